"""tdyn.particles runs what `tdyn particles` runs: its results, options and arrays equal the CLI's results.json
and .npy files, and with out= it writes the same files, for a preset and for a real layer."""
import json
import pathlib
import subprocess
import tempfile
import unittest

import numpy as np

import tdyn
from support import cli, have_shared, json_numbers, missing_shared, shared

ARRAYS = ["x0", "Q", "K", "V", "t", "x", "z", "P", "P_times"]
STORIES = "models/stories260K/stories260K.bin"


class ParticlesLikeTheCliTest(unittest.TestCase):
    def setUp(self):
        if cli() is None:
            self.skipTest("the tdyn executable is not known (TDYN_CLI is set by ctest)")
        self.tmp = pathlib.Path(tempfile.mkdtemp(prefix="tdyn_particles_cli_"))

    def run_cli(self, *args):
        out = self.tmp / "cli"
        subprocess.run([cli(), "--quiet", "particles", *args, "--out", str(out)], check=True, capture_output=True)
        return out, json.loads((out / "results.json").read_text())

    def assert_same_run(self, run, cli_dir, cli_json, py_dir):
        results = {k: v for k, v in cli_json["results"].items() if k != "figure_notes"}
        self.assertEqual(json_numbers(run["results"]), results)
        self.assertEqual(run["model"], cli_json["model"])
        for name in ARRAYS:
            np.testing.assert_array_equal(run[name], np.load(cli_dir / f"{name}.npy"), err_msg=name)
            self.assertEqual((py_dir / f"{name}.npy").read_bytes(), (cli_dir / f"{name}.npy").read_bytes(), name)
        self.assertEqual((py_dir / "diagnostics.csv").read_bytes(), (cli_dir / "diagnostics.csv").read_bytes())
        written = json.loads((py_dir / "results.json").read_text())
        self.assertEqual(written["results"], cli_json["results"])

    def test_preset(self):
        cli_dir, cli_json = self.run_cli("--preset", "hyperplanes", "--T", "2", "--attention-times", "0,1.5", "--seed", "3")
        run = tdyn.particles("hyperplanes", T=2.0, attention_times=[0, 1.5], seed=3, out=str(self.tmp / "py"))
        self.assertEqual(run["options"], cli_json["options"])
        self.assert_same_run(run, cli_dir, cli_json, self.tmp / "py")
        self.assertEqual(run["P"].shape[0], 2)

    def test_real_layer(self):
        if not have_shared(STORIES):
            self.skipTest(missing_shared(STORIES))
        path = str(shared(STORIES))
        ids = [1, 403, 407, 261, 378, 270, 449, 265, 407, 261]
        cli_dir, cli_json = self.run_cli("--from-model", path, "--layer", "2", "--head", "1", "--ids",
                                         ",".join(map(str, ids)), "--n", "8", "--T", "3")
        model = tdyn.load(path)
        run = tdyn.particles(model=model, layer=2, head=1, ids=ids, n=8, T=3.0, out=str(self.tmp / "py"))
        # The written options also say how the model was loaded, as the CLI's do.
        self.assertEqual(json.loads((self.tmp / "py" / "results.json").read_text())["options"], cli_json["options"])
        cli_json["options"]["from_model"].pop("allow_unknown_config_keys")
        self.assertEqual(run["options"], cli_json["options"])
        self.assertEqual(run["model"]["bridge"]["token_source"]["ids"], ids)
        self.assert_same_run(run, cli_dir, cli_json, self.tmp / "py")
        self.assertEqual(run["x0"].shape, (8, 64))

    def test_real_layer_from_text(self):
        if not have_shared(STORIES):
            self.skipTest(missing_shared(STORIES))
        path = str(shared(STORIES))
        prompt = "Once upon a time there was a little girl named Lily."
        cli_dir, cli_json = self.run_cli("--from-model", path, "--layer", "1", "--prompt", prompt, "--n", "6", "--T", "2")
        run = tdyn.particles(model=path, layer=1, prompt=prompt, n=6, T=2.0)
        self.assertEqual(run["model"], cli_json["model"])
        np.testing.assert_array_equal(run["x"], np.load(cli_dir / "x.npy"))
        # No tokens given: the first sample drawn from the default corpus, as the CLI's default.
        run = tdyn.particles(model=path, layer=1, n=6, T=2.0)
        self.assertIn("wikitext-2", run["model"]["bridge"]["token_source"]["data"])
        self.assertEqual(run["x0"].shape, (6, 64))

    def test_errors(self):
        with self.assertRaisesRegex(tdyn.Error, "unknown argument 'bogus'"):
            tdyn.particles("polytope", bogus=1)
        with self.assertRaisesRegex(tdyn.Error, "attention time 9"):
            tdyn.particles("polytope", attention_times=[9.0])
        with self.assertRaisesRegex(tdyn.Error, "a model's tokens: give model too"):
            tdyn.particles("polytope", prompt="Once")
        if have_shared(STORIES):
            path = str(shared(STORIES))
            with self.assertRaisesRegex(tdyn.Error, "init makes the tokens"):
                tdyn.particles(model=path, ids=[1, 2, 3], init="sphere")
            with self.assertRaisesRegex(tdyn.Error, "one sample of tokens: 2 were given"):
                tdyn.particles(model=path, ids=[[1, 2, 3], [1, 4, 5]])
            with self.assertRaisesRegex(tdyn.Error, "outside the vocabulary"):
                tdyn.particles(model=path, ids=[1, 2, 10 ** 6])


if __name__ == "__main__":
    unittest.main()
