"""tdyn.topology runs what `tdyn topology` runs: its results, options and arrays equal the CLI's results.json
and .npy files, and with out= it writes the same files."""
import json
import subprocess
import unittest

import numpy as np

import tdyn
from support import cli, cli_scratch, shared
from test_particles_cli import json_numbers

STORIES = "models/stories260K/stories260K.bin"
PROMPT = ("Once upon a time there was a little girl named Lily. She liked to play outside in the park with her dog. "
          "One day the dog ran after a red ball and Lily laughed.")
ARRAYS = ["membership", "participation", "n_other_communities", "log_column_gain", "log_row_gain"]
TABLES = ["boundaries.csv", "gamma_scan.csv", "coupling.csv", "graph_layout.csv", "mean_jacobians.npy",
          "correlation_blocks.2.hook_resid_mid.npy", "graph_blocks.2.hook_resid_mid.csv"]
# The options the command records beside the analysis's: how it drew the samples and ran the pass.
COMMAND_OPTIONS = ["samples", "tokenizer", "pass", "compare", "random_init"]


class TopologyLikeTheCliTest(unittest.TestCase):
    def setUp(self):
        self.tmp = cli_scratch(self, "topology_cli", STORIES)
        self.path = str(shared(STORIES))

    def run_cli(self, *args):
        out = self.tmp / "cli"
        subprocess.run([cli(), "--quiet", "topology", self.path, "--prompt", PROMPT, *args, "--out", str(out)],
                       check=True, capture_output=True)
        return out, json.loads((out / "results.json").read_text())

    def test_same_as_cli(self):
        cli_dir, cli_json = self.run_cli("--permutations", "200", "--gamma-scan", "0.02,0.1", "--save-correlations",
                                         "--save-jacobians", "--draw-boundary", "3")
        lines = []
        run = tdyn.topology(tdyn.load(self.path), prompt=PROMPT, permutations=200, gamma_scan=[0.02, 0.1],
                            keep_correlations=True, keep_jacobians=True, draw_boundary=3, progress=lines.append,
                            out=str(self.tmp / "py"))
        self.assertTrue(any(line.startswith("topology stories260K: communities") for line in lines), lines)

        results = {k: v for k, v in cli_json["results"].items() if k not in ("notes", "checkpoints")}
        self.assertEqual(json_numbers(run["results"]), results)
        self.assertEqual(run["options"], {k: v for k, v in cli_json["options"].items() if k not in COMMAND_OPTIONS})
        self.assertEqual(run["model"], cli_json["model"])
        for name in ARRAYS:
            np.testing.assert_array_equal(run[name], np.load(cli_dir / f"{name}.npy"), err_msg=name)
        np.testing.assert_array_equal(run["mean_jacobians"], np.load(cli_dir / "mean_jacobians.npy"))
        np.testing.assert_array_equal(run["correlations"][5], np.load(cli_dir / "correlation_blocks.2.hook_resid_mid.npy"))
        self.assertEqual(run["layout"].shape, (64, 2))

        py_dir = self.tmp / "py"
        for name in [f"{a}.npy" for a in ARRAYS] + TABLES:
            self.assertEqual((py_dir / name).read_bytes(), (cli_dir / name).read_bytes(), name)
        written = json.loads((py_dir / "results.json").read_text())
        for checkpoint in written["results"]["checkpoints"] + cli_json["results"]["checkpoints"]:
            checkpoint.pop("results_dir")  # the directory each wrote to
        self.assertEqual(written["results"], cli_json["results"])
        # The written options also say how the samples were drawn and the pass run, as the CLI's do.
        self.assertEqual(written["options"], cli_json["options"])
        self.assertIn("load_samples", written["timings"])

    def test_ablated_same_as_cli(self):
        ablate = "blocks.2.attn.hook_z:heads=1"
        cli_dir, cli_json = self.run_cli("--permutations", "0", "--save-jacobians", "--ablate", ablate)
        model = tdyn.load(self.path)
        plain = tdyn.topology(model, prompt=PROMPT, permutations=0, keep_jacobians=True)
        run = tdyn.topology(model, prompt=PROMPT, permutations=0, keep_jacobians=True, ablate=[ablate])
        self.assertEqual(run["options"]["ablate"], ["blocks.2.attn.hook_z:zero:heads=1"])
        self.assertEqual(run["options"], {k: v for k, v in cli_json["options"].items() if k not in COMMAND_OPTIONS})
        np.testing.assert_array_equal(run["mean_jacobians"], np.load(cli_dir / "mean_jacobians.npy"))
        np.testing.assert_array_equal(run["mean_jacobians"][:4], plain["mean_jacobians"][:4])  # layers 0 and 1
        self.assertGreater(np.abs(run["mean_jacobians"][4] - plain["mean_jacobians"][4]).max(), 1e-3)

    def test_topology_only_from_ids(self):
        ids = tdyn.load(self.path).tokenizer().encode(PROMPT)
        cli_dir, cli_json = self.run_cli("--no-coupling", "--boundaries", "layers", "--threshold", "0.3")
        lines = []
        run = tdyn.topology(self.path, [ids], coupling=False, boundaries="layers", threshold=0.3, label="tiny",
                            progress=lines.append)
        self.assertEqual(run["model"]["label"], "tiny")
        self.assertTrue(any(line.startswith("topology tiny: samples") for line in lines), lines)
        self.assertIsNone(run["results"]["coupling"])
        self.assertEqual(json_numbers(run["results"])["boundaries"], cli_json["results"]["boundaries"])
        np.testing.assert_array_equal(run["membership"], np.load(cli_dir / "membership.npy"))
        self.assertEqual(run["log_column_gain"].shape, (0, 64))

    def test_compare_and_random_init_like_the_cli(self):
        cli_dir, cli_json = self.run_cli("--permutations", "0", "--compare", self.path, "--random-init")
        py_dir = self.tmp / "py"
        run = tdyn.topology(tdyn.load(self.path), prompt=PROMPT, permutations=0, compare=[self.path], random_init=0,
                            out=str(py_dir))
        self.assertEqual([c["model"]["label"] for c in run["compare"]], ["stories260K_2", "random_init"])
        for other, label in zip(run["compare"], ["stories260K_2", "random_init"]):
            for name in ARRAYS:
                np.testing.assert_array_equal(other[name], np.load(cli_dir / "compare" / label / f"{name}.npy"),
                                              err_msg=f"{label} {name}")
        # The same checkpoint twice: the same communities.
        np.testing.assert_array_equal(run["compare"][0]["membership"], run["membership"])
        self.assertEqual((py_dir / "checkpoints.csv").read_bytes(), (cli_dir / "checkpoints.csv").read_bytes())
        # The same results, but for the directories each wrote to (the random initialisation's checkpoint among them).
        written = json.loads((py_dir / "results.json").read_text().replace(str(py_dir), str(cli_dir)))
        for checkpoint in written["results"]["checkpoints"] + cli_json["results"]["checkpoints"]:
            checkpoint.pop("results_dir")
        self.assertEqual(written["results"], cli_json["results"])
        self.assertEqual(written["options"], cli_json["options"])
        with self.assertRaisesRegex(tdyn.Error, "comparing checkpoints writes each one's results .*: give the results directory"):
            tdyn.topology(self.path, prompt=PROMPT, random_init=0)

    def test_errors(self):
        with self.assertRaisesRegex(tdyn.Error, "boundaries: expected 'layers' or 'sublayers'"):
            tdyn.topology(self.path, [[1, 2, 3]], boundaries="heads")
        with self.assertRaisesRegex(tdyn.Error, "draw_boundary 99"):
            tdyn.topology(self.path, [[1, 403, 407, 261, 378]], coupling=False, draw_boundary=99)
        with self.assertRaisesRegex(tdyn.Error, "sample 0: token id 1000000 at position 2 is outside the vocabulary"):
            tdyn.topology(self.path, [[1, 2, 10 ** 6]])


if __name__ == "__main__":
    unittest.main()
