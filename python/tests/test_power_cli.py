"""tdyn.power runs what `tdyn power` runs: its results, options and arrays equal the CLI's results.json and .npy
files, and with out= it writes the same files, byte for byte."""
import json
import pathlib
import subprocess
import tempfile
import unittest

import numpy as np

import tdyn
from support import cli, have_shared, json_numbers, missing_shared, shared

STORIES = "models/stories260K/stories260K.bin"
CORPUS = "data/wikitext-2/wiki.test.raw"
ALBERT = "fixtures/albert"
TABLES = ["layers.csv", "iteration_curves.csv", "steering.csv"]


class PowerLikeTheCliTest(unittest.TestCase):
    def setUp(self):
        if cli() is None:
            self.skipTest("the tdyn executable is not known (TDYN_CLI is set by ctest)")
        self.tmp = pathlib.Path(tempfile.mkdtemp(prefix="tdyn_power_cli_"))

    def run_cli(self, *args):
        out = self.tmp / "cli"
        subprocess.run([cli(), "--quiet", "power", *args, "--out", str(out)], check=True, capture_output=True)
        return out, json.loads((out / "results.json").read_text())

    def assert_same_run(self, run, cli_dir, cli_json, py_dir):
        options = dict(cli_json["options"])
        for key in ("samples", "tokenizer", "from_pass"):  # how the CLI got its samples
            options.pop(key)
        self.assertEqual(json_numbers(run["options"]), options)
        self.assertEqual(run["model"], cli_json["model"])
        # The CLI's notes also say which figures could not be drawn.
        results = dict(cli_json["results"])
        self.assertEqual(results.pop("notes")[:len(run["results"]["notes"])], run["results"]["notes"])
        self.assertEqual({k: v for k, v in json_numbers(run["results"]).items() if k != "notes"}, results)
        arrays = [name[:-4] for name in cli_json["files"] if name.endswith(".npy")]
        self.assertEqual(sorted(arrays), sorted(k for k in run if k not in ("results", "options", "model")))
        for name in arrays:
            np.testing.assert_array_equal(run[name], np.load(cli_dir / f"{name}.npy"), err_msg=name)
            self.assertEqual(run[name].dtype, np.load(cli_dir / f"{name}.npy").dtype, name)
            self.assertEqual((py_dir / f"{name}.npy").read_bytes(), (cli_dir / f"{name}.npy").read_bytes(), name)
        for table in TABLES:
            if (cli_dir / table).exists():
                self.assertEqual((py_dir / table).read_bytes(), (cli_dir / table).read_bytes(), table)
        written = json.loads((py_dir / "results.json").read_text())
        self.assertEqual(written["results"], cli_json["results"])
        self.assertEqual(written["options"], cli_json["options"])  # with how the samples were drawn, as the CLI records it

    def test_stories_text(self):
        if not have_shared(STORIES) or not have_shared(CORPUS):
            self.skipTest(missing_shared(STORIES))
        path, corpus = str(shared(STORIES)), str(shared(CORPUS))
        cli_dir, cli_json = self.run_cli(path, "--data", corpus, "--samples", "3", "--max-len", "24", "--iterate-layer", "2",
                                         "--iterations", "40", "--steer-scales", "0,1,100000", "--steer-samples", "2")
        lines = []
        run = tdyn.power(tdyn.load(path), data=corpus, samples=3, max_len=24, iterate_layer=2, iterations=40,
                         steer_scales=[0, 1, 100000], steer_samples=2, progress=lines.append, out=str(self.tmp / "py"))
        self.assert_same_run(run, cli_dir, cli_json, self.tmp / "py")
        self.assertEqual(run["alignment_after"].shape, (5, cli_json["results"]["tokens"]))
        self.assertEqual(run["eigenvalues"].dtype, np.complex128)
        self.assertIn("spectrum of F_0: |lambda1| = ", lines[0])
        self.assertTrue(any(line.startswith("steering: 2/2 samples") for line in lines), lines)

    def test_albert_ids_idealised_token_steering(self):
        if not have_shared(ALBERT):
            self.skipTest(missing_shared(ALBERT))
        path = str(shared(ALBERT))
        ids = [2, 14, 9, 31, 7, 22, 3]
        cli_dir, cli_json = self.run_cli(path, "--ids", ",".join(map(str, ids)), "--mode", "attn-only-l2", "--no-residual",
                                         "--iterations", "30", "--steer", "token:5", "--steer-scales", "0,10")
        run = tdyn.power(path, ids=ids, mode="attn-only-l2", residual=False, iterations=30, steer_direction="token:5",
                         steer_scales=[0, 10], out=str(self.tmp / "py"))
        self.assert_same_run(run, cli_dir, cli_json, self.tmp / "py")
        self.assertEqual(run["options"]["iteration"]["layer"], 0)  # the shared layer, by default

    def test_ablated_like_the_cli(self):
        if not have_shared(STORIES):
            self.skipTest(missing_shared(STORIES))
        path = str(shared(STORIES))
        ids = [1, 403, 407, 261, 378, 418, 356, 260, 299]
        ablate = ["blocks.4.attn.hook_z:heads=1,6", "blocks.1.hook_mlp_out"]
        cli_dir, cli_json = self.run_cli(path, "--ids", ",".join(map(str, ids)), "--iterate-layer", "1", "--iterations", "20",
                                         "--steer-scales", "0,100", "--ablate", ablate[0], "--ablate", ablate[1])
        run = tdyn.power(path, ids=ids, iterate_layer=1, iterations=20, steer_scales=[0, 100], ablate=ablate,
                         out=str(self.tmp / "py"))
        self.assert_same_run(run, cli_dir, cli_json, self.tmp / "py")
        self.assertEqual(run["options"]["ablate"], ["blocks.4.attn.hook_z:zero:heads=1,6", "blocks.1.hook_mlp_out:zero"])
        clean = tdyn.power(path, ids=ids, iterate_layer=1, iterations=20, steer_scales=[0, 100])
        np.testing.assert_array_equal(run["alignment_after"][0], clean["alignment_after"][0])  # before any ablated part
        self.assertGreater(np.abs(run["alignment_after"][1] - clean["alignment_after"][1]).max(), 1e-4)
        self.assertNotEqual(run["results"]["iteration"], clean["results"]["iteration"])
        with self.assertRaisesRegex(Exception, "residual-stream boundary"):
            tdyn.power(path, ids=ids, ablate=["blocks.0.hook_resid_post"])

    def test_errors(self):
        if not have_shared(STORIES):
            self.skipTest(missing_shared(STORIES))
        path = str(shared(STORIES))
        with self.assertRaisesRegex(tdyn.Error, "iterate_layer 9: the model has 5 layers"):
            tdyn.power(path, ids=[1, 2, 3], iterate_layer=9)
        with self.assertRaisesRegex(tdyn.Error, "steer_direction token:once upon a time: .* tokens, not one"):
            tdyn.power(path, ids=[1, 2, 3], iterate=False, steer_direction="token:once upon a time")
        with self.assertRaisesRegex(ValueError, "no"):
            tdyn.power(path, ids=[1, 2, 3], iterate=False, steer=False, progress=lambda line: int("no"))


if __name__ == "__main__":
    unittest.main()
