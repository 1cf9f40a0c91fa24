"""tdyn.jacobian runs what `tdyn jacobian` runs: its results, options and arrays equal the CLI's results.json and
.npy files, and with out= it writes the same files, through the shared pass (structured mean) and without it
(plain mean, mean of products, a compared checkpoint)."""
import json
import subprocess
import unittest

import numpy as np

import tdyn
from support import cli, cli_scratch, json_numbers, shared

STORIES = "models/stories260K/stories260K.bin"
SAMPLES = [[1, 403, 407, 261, 378, 270, 449, 265, 407, 261],
           [1, 60, 70, 80, 90, 100, 110, 120],
           [1, 300, 301, 302, 303, 304, 305, 306, 307, 308, 309, 310]]
ARRAYS = ["samples.source_index", "mean_jacobians", "cumulative_products", "mean.eigenvalues", "mean.singular_values",
          "cumulative.eigenvalues", "cumulative.singular_values"]
# How the CLI was given its model and samples; tdyn.jacobian takes them as arguments.
INPUT_OPTIONS = ["model", "compare", "samples", "tokenizer", "pass"]


class JacobianLikeTheCliTest(unittest.TestCase):
    def setUp(self):
        self.tmp = cli_scratch(self, "jacobian_cli", STORIES)
        self.model = str(shared(STORIES))
        self.ids_file = self.tmp / "samples.ids"
        self.ids_file.write_text("".join(",".join(map(str, s)) + "\n" for s in SAMPLES))

    def run_cli(self, *args):
        out = self.tmp / "cli"
        subprocess.run([cli(), "jacobian", self.model, "--data", str(self.ids_file), "--min-len", "1", *args,
                        "--out", str(out), "--quiet"], check=True, capture_output=True)
        return out, json.loads((out / "results.json").read_text())

    def assert_same_run(self, run, cli_dir, cli_json, py_dir, arrays, tables):
        results = {k: v for k, v in cli_json["results"].items() if k != "figure_notes"}
        self.assertEqual(json_numbers(run["results"]), results)
        self.assertEqual(run["model"], cli_json["model"])
        self.assertEqual(run["options"], {k: v for k, v in cli_json["options"].items() if k not in INPUT_OPTIONS})
        for name in arrays:
            np.testing.assert_array_equal(run[name], np.load(cli_dir / f"{name}.npy"), err_msg=name)
            self.assertEqual((py_dir / f"{name}.npy").read_bytes(), (cli_dir / f"{name}.npy").read_bytes(), name)
        for table in tables:
            self.assertEqual((py_dir / table).read_bytes(), (cli_dir / table).read_bytes(), table)
        written = json.loads((py_dir / "results.json").read_text())
        self.assertEqual(written["results"], cli_json["results"])
        # The written options also say how model and samples were given, as the CLI's do: here ids, there a .ids file.
        options = dict(written["options"])
        self.assertEqual(options.pop("samples")["ids"], SAMPLES)
        self.assertEqual(options, {k: v for k, v in cli_json["options"].items() if k != "samples"})

    def test_structured_mean_through_the_pass(self):
        cli_dir, cli_json = self.run_cli("--surgery", "--alphas", "0,0.5", "--alignment-k", "1,10", "--eig-depths", "2,9")
        lines = []
        run = tdyn.jacobian(self.model, SAMPLES, surgery=True, alphas=[0, 0.5], alignment_ks=[1, 10], eig_depths=[2, 9],
                            progress=lines.append, out=str(self.tmp / "py"))
        self.assert_same_run(run, cli_dir, cli_json, self.tmp / "py", ARRAYS,
                             ["metrics_mean.csv", "metrics_cumulative.csv", "surgery.csv"])
        self.assertEqual(run["mean_jacobians"].shape, (10, 64, 64))
        self.assertEqual(run["mean.eigenvalues"].dtype, np.complex128)
        self.assertEqual(run["results"]["models"][0]["pairs"], 3)
        self.assertTrue(any("metrics" in line for line in lines), lines)

    def test_plain_mean_products_and_compare(self):
        cli_dir, cli_json = self.run_cli("--mean", "plain", "--cumulative", "both", "--positions", "all",
                                         "--compare", self.model)
        model = tdyn.load(self.model)
        run = tdyn.jacobian(self.model, SAMPLES, compare=[model], mean="plain", cumulative="both", positions="all",
                            out=str(self.tmp / "py"))
        # A tdyn.Model records the path it was loaded from; the CLI the path as given (the same string here).
        arrays = ARRAYS + ["mean_of_products"] + ["compare1." + a for a in ARRAYS[1:] + ["mean_of_products"]]
        self.assert_same_run(run, cli_dir, cli_json, self.tmp / "py", arrays,
                             ["metrics_mean.csv", "metrics_cumulative.csv", "metrics_mean_of_products.csv"])
        self.assertEqual(run["results"]["models"][1]["pairs"], sum(len(s) for s in SAMPLES))
        # Without out=, nothing is written and the arrays are the same.
        silent = tdyn.jacobian(self.model, SAMPLES, mean="plain", positions="all")
        np.testing.assert_array_equal(silent["mean_jacobians"], run["mean_jacobians"])

    def test_ablated_heads_like_the_cli(self):
        ablate = "blocks.1.attn.hook_z:heads=0,3"
        cli_dir, cli_json = self.run_cli("--ablate", ablate)
        run = tdyn.jacobian(self.model, SAMPLES, ablate=[ablate], out=str(self.tmp / "py"))
        self.assert_same_run(run, cli_dir, cli_json, self.tmp / "py", ARRAYS, ["metrics_mean.csv"])
        self.assertEqual(run["options"]["ablate"], ["blocks.1.attn.hook_z:zero:heads=0,3"])
        unablated = tdyn.jacobian(self.model, SAMPLES)
        np.testing.assert_array_equal(run["mean_jacobians"][:2], unablated["mean_jacobians"][:2])
        self.assertGreater(np.abs(run["mean_jacobians"][2] - unablated["mean_jacobians"][2]).max(), 1e-3)

    def test_verdict_metrics_only_like_the_cli(self):
        cli_dir, cli_json = self.run_cli("--surgery", "--alphas", "0,1", "--verdict-metrics-only")
        run = tdyn.jacobian(self.model, SAMPLES, surgery=True, alphas=[0, 1], verdict_metrics_only=True,
                            out=str(self.tmp / "py"))
        self.assert_same_run(run, cli_dir, cli_json, self.tmp / "py", ARRAYS,
                             ["metrics_mean.csv", "metrics_cumulative.csv", "surgery.csv"])
        self.assertTrue(run["options"]["verdict_metrics_only"])
        self.assertTrue(np.isnan(run["cumulative.eigenvalues"][-1]).all(), "no Schur form of the last product")
        self.assertFalse(np.isnan(run["cumulative.singular_values"][-1]).any())
        self.assertTrue(np.isnan(run["cumulative.singular_values"][1]).all(), "the depths between the ends")

    def test_errors(self):
        with self.assertRaisesRegex(tdyn.Error, "residual-stream boundary"):
            tdyn.jacobian(self.model, SAMPLES, ablate=["blocks.0.hook_resid_mid"])
        with self.assertRaisesRegex(tdyn.Error, "mean: expected"):
            tdyn.jacobian(self.model, SAMPLES, mean="average")
        with self.assertRaisesRegex(tdyn.Error, "eig_depths: depth 11"):
            tdyn.jacobian(self.model, SAMPLES, eig_depths=[11])
        with self.assertRaisesRegex(tdyn.Error, "save_per_sample"):
            tdyn.jacobian(self.model, SAMPLES, save_per_sample=True)
        with self.assertRaisesRegex(tdyn.Error, "no samples"):
            tdyn.jacobian(self.model, [])


if __name__ == "__main__":
    unittest.main()
