"""tdyn.analyze runs what `tdyn analyze` runs: the same files, byte for byte, in its results directory, and each
part's returned arrays equal to the .npy files that part writes."""
import json
import subprocess
import unittest

import numpy as np

import tdyn
from support import cli, cli_scratch, json_numbers, shared

STORIES = "models/stories260K/stories260K.bin"
CORPUS = "data/wikitext-2/wiki.test.raw"
PARTS = ["power", "power-l2", "jacobian", "init", "topology", "particles"]


def without_dir(path, root):
    """A results.json with the run's own directory taken out of every path it records."""
    doc = json.loads(path.read_text().replace(str(root), "DIR"))
    for key in ("argv", "started_utc", "timings"):
        doc.pop(key, None)
    for record in doc.get("results", {}).get("parts", {}).values():
        for key in ("argv", "init_argv", "seconds"):
            record.pop(key, None)
        for seed in record.get("seeds", []):  # the init control's seeds
            for key in ("argv", "init_argv"):
                seed.pop(key, None)
    return doc


class AnalyzeLikeTheCliTest(unittest.TestCase):
    def setUp(self):
        self.tmp = cli_scratch(self, "analyze_cli", STORIES, CORPUS)
        self.model, self.corpus = str(shared(STORIES)), str(shared(CORPUS))

    def test_same_files_and_arrays(self):
        cli_dir, py_dir = self.tmp / "cli", self.tmp / "py"
        subprocess.run([cli(), "--threads", "1", "--quiet", "analyze", self.model, "--data", self.corpus, "--samples", "6",
                        "--max-len", "20", "--particles-tokens", "8", "--particles-T", "2", "--out", str(cli_dir)],
                       check=True, capture_output=True)
        lines = []
        # A loaded tdyn.Model is analysed as it is (test_skips_and_errors gives a path).
        run = tdyn.analyze(tdyn.load(self.model), out=str(py_dir), data=self.corpus, samples=6, max_len=20,
                           particles_tokens=8, particles_T=2, progress=lines.append)
        self.assertEqual(run["dir"], str(py_dir))
        for part in PARTS:
            self.assertEqual(run["results"]["results"]["parts"][part]["status"], "ok", part)
        self.assertIn("part 1 of 6: power", lines)

        cli_files = sorted(p.relative_to(cli_dir) for p in cli_dir.rglob("*") if p.is_file())
        py_files = sorted(p.relative_to(py_dir) for p in py_dir.rglob("*") if p.is_file())
        self.assertEqual(cli_files, py_files)
        compared = 0
        for name in cli_files:
            if name.suffix in (".npy", ".csv", ".safetensors", ".ids"):
                self.assertEqual((py_dir / name).read_bytes(), (cli_dir / name).read_bytes(), str(name))
                compared += 1
            elif name.name == "results.json":
                self.assertEqual(without_dir(py_dir / name, py_dir), without_dir(cli_dir / name, cli_dir), str(name))
        self.assertGreater(compared, 50)

        # Each part's dict holds the arrays its directory holds.
        for key, part_dir in [("power", "power"), ("power_l2", "power-l2"), ("jacobian", "jacobian"), ("topology", "topology"),
                              ("init_power", "init/seed-0/power"), ("init_jacobian", "init/seed-0/jacobian"),
                              ("init_topology", "init/seed-0/topology")]:
            arrays = [k for k, v in run[key].items() if isinstance(v, np.ndarray) and (cli_dir / part_dir / f"{k}.npy").exists()]
            self.assertTrue(arrays, key)
            for name in arrays:
                np.testing.assert_array_equal(run[key][name], np.load(cli_dir / part_dir / f"{name}.npy"), err_msg=f"{key}/{name}")
            written = json.loads((py_dir / part_dir / "results.json").read_text())["results"]
            for beside in ("checkpoints", "notes"):  # topology's comparison of checkpoints, with its figures' notes
                if beside not in run[key]["results"]:
                    written.pop(beside, None)
            self.assertEqual(run[key]["results"], written, key)
        self.assertEqual(run["jacobian"]["mean_jacobians"].shape[0], 2 * run["jacobian"]["model"]["n_layers"])
        particles = run["particles"]
        self.assertEqual(particles["x0"].shape[0], 8)
        self.assertEqual(json_numbers(particles["results"]), json.loads((py_dir / "particles/results.json").read_text())["results"])

    def test_skips_and_errors(self):
        run = tdyn.analyze(self.model, out=str(self.tmp / "some"), data=self.corpus, samples=3, max_len=12,
                           skip=["power", "power-l2", "topology", "particles"], init_control=False)
        parts = run["results"]["results"]["parts"]
        self.assertEqual([parts[p]["status"] for p in PARTS], ["skipped", "skipped", "ok", "skipped", "skipped", "skipped"])
        self.assertIsNone(run["power"])
        self.assertIsNone(run["power_l2"])
        self.assertIsNotNone(run["jacobian"])
        # The top-level record carries the equivalent command line.
        argv = run["results"]["argv"]
        self.assertIn("analyze", argv)
        self.assertIn("--no-init-control", argv)
        ablated = tdyn.analyze(self.model, out=str(self.tmp / "ablated"), data=self.corpus, samples=3, max_len=12,
                               skip=["power-l2", "topology", "particles"], init_control=False,
                               ablate=["blocks.1.hook_attn_out"])
        self.assertEqual(ablated["results"]["options"]["ablate"], ["blocks.1.hook_attn_out:zero"])
        for part in ("power", "jacobian"):
            self.assertEqual(ablated[part]["options"]["ablate"], ["blocks.1.hook_attn_out:zero"], part)
        self.assertEqual(ablated["power"]["results"]["layers"][1]["frobenius_norm"], 0)  # F_1 of no attention
        self.assertIn("--ablate", ablated["results"]["argv"])
        with self.assertRaisesRegex(tdyn.Error, "unknown part 'bogus'"):
            tdyn.analyze(self.model, out=str(self.tmp / "bad"), skip=["bogus"])
        with self.assertRaisesRegex(tdyn.Error, "outside the vocabulary"):
            tdyn.analyze(self.model, out=str(self.tmp / "gpt2"), data=self.corpus, samples=2, max_len=12,
                         tokenizer=str(shared("tokenizers/gpt2/encoder.json")))


if __name__ == "__main__":
    unittest.main()
