"""Operator metrics, effective ranks, dominant spectrum, Schur surgery and cumulative products on matrices whose
answers are known in closed form (identities rather than stored numbers)."""
import unittest

import numpy as np

import support
import tdyn


def rotation(theta):
    return np.array([[np.cos(theta), -np.sin(theta)], [np.sin(theta), np.cos(theta)]])


class OperatorMetricsTest(unittest.TestCase):
    def test_symmetric_matrix(self):
        rng = np.random.default_rng(0)
        q, _ = np.linalg.qr(rng.standard_normal((6, 6)))
        values = np.array([3.0, -2.0, 1.5, 0.5, 0.25, 0.1])
        j = q @ np.diag(values) @ q.T
        m = tdyn.operator_metrics(j, alignment_ks=[1, 3])
        support.assert_close(self, np.sort(np.abs(m["eigenvalues"]))[::-1], np.sort(np.abs(values))[::-1], 1e-12,
                             1e-12, "eigenvalues")
        support.assert_close(self, m["singular_values"], np.sort(np.abs(values))[::-1], 1e-12, 1e-12, "sigma")
        self.assertEqual(m["d"], 6)
        self.assertAlmostEqual(m["symmetry_index"], 0.0, places=12)
        self.assertAlmostEqual(m["henrici_departure"]["identity_normalized"], 0.0, places=6)
        self.assertAlmostEqual(m["expanding_fraction"], 3 / 6)
        self.assertAlmostEqual(m["complex_fraction"], 0.0)
        self.assertAlmostEqual(m["condition_number"], 30.0, places=9)
        self.assertEqual([a["k"] for a in m["self_alignment"]], [1, 3])

    def test_singular_matrix_has_no_condition_number(self):
        self.assertIsNone(tdyn.operator_metrics(np.diag([1.0, 0.0]))["condition_number"])

    def test_effective_ranks(self):
        ranks = tdyn.effective_ranks(np.ones(10))
        for key in ("roy_vetterli", "participation_ratio", "stable_rank"):
            self.assertAlmostEqual(ranks[key], 10.0, places=9, msg=key)
        self.assertEqual(ranks["energy_rank"], 9)
        self.assertAlmostEqual(tdyn.effective_ranks([5.0, 0, 0])["roy_vetterli"], 1.0)

    def test_dominant_spectrum(self):
        real = tdyn.dominant_spectrum(np.diag([0.5, -2.0, 1.0]))
        self.assertFalse(real["complex_pair"])
        self.assertAlmostEqual(real["lambda1"], -2.0)
        self.assertAlmostEqual(real["lambda2"], 1.0)
        self.assertAlmostEqual(real["modulus_ratio"], 0.5)
        np.testing.assert_allclose(real["eigenvector_real"], [0, 1, 0], atol=1e-12)
        self.assertIsNone(real["eigenvector_imag"])

        f = np.zeros((3, 3))
        f[:2, :2] = 2 * rotation(0.3)
        f[2, 2] = 1.0
        pair = tdyn.dominant_spectrum(f)
        self.assertTrue(pair["complex_pair"])
        self.assertAlmostEqual(pair["lambda1"], 2 * np.exp(0.3j))
        v = pair["eigenvector_real"] + 1j * pair["eigenvector_imag"]
        support.assert_close(self, f @ v, pair["lambda1"] * v, 0, 1e-12, "F v = lambda v")

    def test_schur_surgery(self):
        rng = np.random.default_rng(1)
        j = rng.standard_normal((5, 5))
        j0, j1 = tdyn.schur_surgery(j, [0.0, 1.0])
        support.assert_close(self, j1.real, j, 0, 1e-12, "J_1 = J")
        self.assertLess(np.max(np.abs(j1.imag)), 1e-12)
        # J_0 = Q Lambda Q* is normal: its Henrici departure vanishes.
        dep0 = np.sqrt(max(0.0, np.linalg.norm(j0) ** 2 - np.sum(np.abs(np.linalg.eigvals(j0)) ** 2)))
        self.assertLess(dep0, 1e-6)
        half = tdyn.schur_surgery(j, 0.5)
        self.assertEqual(half.shape, (5, 5))
        self.assertEqual(half.dtype, np.complex128)
        control = tdyn.schur_surgery(j, 1.0, control_seed=3)
        support.assert_close(self, np.sort(np.abs(np.linalg.eigvals(control))), np.sort(np.abs(np.linalg.eigvals(j))),
                             1e-8, 1e-8, "control keeps the eigenvalues")

    def test_cumulative_products(self):
        a, b = np.diag([2.0, 3.0]), rotation(0.5)
        c1, c2 = tdyn.cumulative_products([a, b])
        support.assert_close(self, c2, b @ a, 0, 1e-15, "C_2 = J_2 J_1")
        support.assert_close(self, c1, a, 0, 0, "C_1 = J_1")

    def test_errors(self):
        with self.assertRaisesRegex(tdyn.Error, "square"):
            tdyn.operator_metrics(np.ones((2, 3)))
        with self.assertRaisesRegex(tdyn.Error, "nan"):
            tdyn.operator_metrics(np.array([[1.0, np.nan], [0.0, 1.0]]))
        with self.assertRaises(tdyn.Error):
            tdyn.effective_ranks([-1.0, 2.0])


if __name__ == "__main__":
    unittest.main()
