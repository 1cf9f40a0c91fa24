"""tdyn.simulate: presets, heads given as arrays, the shapes of what comes back, and the limits the paper proves
for the simplest cases (a hand-computed Euler step, the decaying mean for V = -I)."""
import unittest

import numpy as np

import tdyn


class ParticlesTest(unittest.TestCase):
    def test_preset_polytope(self):
        self.assertIn("polytope", tdyn.particle_presets())
        r = tdyn.simulate("polytope", n=8, T=2.0, seed=1)
        k = len(r["times"])
        self.assertEqual(k, 21)
        self.assertEqual(r["x"].shape, (k, 8, r["settings"]["d"]))
        self.assertEqual(r["z"].shape, r["x"].shape)
        np.testing.assert_array_equal(r["x"][0], r["x0"])
        self.assertEqual(r["settings"]["preset"], "polytope")
        self.assertIn("clusters", r["diagnostics"]["final"])

    def test_head_given_as_arrays(self):
        rng = np.random.default_rng(0)
        x0 = rng.uniform(-1, 1, (6, 3))
        r = tdyn.simulate(Q=0.1 * np.eye(3), V=-np.eye(3), x0=x0, T=10.0, dt=0.1, integrator="rk4")
        np.testing.assert_array_equal(r["x0"], x0)
        np.testing.assert_array_equal(r["K"], r["Q"])  # K defaults to Q
        self.assertIsNone(r["O"])
        self.assertEqual(r["settings"]["integrator"], "rk4")
        # V = -I with nearly uniform attention: the mean token decays like e^{-t}.
        self.assertLess(np.linalg.norm(r["x"][-1].mean(axis=0)), 1e-3 * np.linalg.norm(x0.mean(axis=0)))

    def test_euler_step_by_hand(self):
        rng = np.random.default_rng(2)
        q, k, v = rng.standard_normal((3, 2, 2))
        x0 = rng.standard_normal((4, 2))
        r = tdyn.simulate(Q=q, K=k, V=v, x0=x0, T=0.1, dt=0.1, diagnostics=False)
        p = tdyn.attention_matrix(q, k, x0)
        np.testing.assert_allclose(p.sum(axis=1), 1.0, atol=1e-14)
        scores = (x0 @ q.T) @ (x0 @ k.T).T
        expected_p = np.exp(scores - scores.max(axis=1, keepdims=True))
        expected_p /= expected_p.sum(axis=1, keepdims=True)
        np.testing.assert_allclose(p, expected_p, atol=1e-14)
        np.testing.assert_allclose(r["x"][-1], x0 + 0.1 * p @ x0 @ v.T, atol=1e-13)
        self.assertIsNone(r["diagnostics"])

    def test_generator_specs(self):
        r = tdyn.simulate(V="psd:1", Q="gaussian", K="gaussian", n=5, d=4, T=0.5, seed=3)
        self.assertEqual(r["V"].shape, (4, 4))
        np.testing.assert_allclose(r["V"], r["V"].T, atol=1e-12)
        self.assertFalse(np.array_equal(r["Q"], r["K"]))

    def test_errors(self):
        with self.assertRaisesRegex(tdyn.Error, "no-such-preset"):
            tdyn.simulate("no-such-preset")
        with self.assertRaises(tdyn.Error):
            tdyn.simulate(Q=np.eye(3), V=np.eye(2), T=0.1)
        with self.assertRaises(tdyn.Error):
            tdyn.simulate(T=0.15, dt=0.1)
        with self.assertRaises(tdyn.Error):
            tdyn.simulate(integrator="leapfrog", T=0.1)


if __name__ == "__main__":
    unittest.main()
