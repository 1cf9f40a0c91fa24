"""tdyn.compare does what `tdyn compare` does: the same files in its directory, and its table equal to compare.csv."""
import csv
import json
import math
import pathlib
import subprocess
import unittest

import numpy as np

import tdyn
from support import cli, cli_scratch, shared

STORIES = "models/stories260K/stories260K.bin"
AIDREAMS = "models/aidreams260K/aidreams260K.bin"


class CompareLikeTheCliTest(unittest.TestCase):
    def setUp(self):
        self.tmp = cli_scratch(self, "compare_cli", STORIES, AIDREAMS)
        self.runs = []
        for model, command in [(STORIES, "power"), (STORIES, "jacobian"), (AIDREAMS, "jacobian")]:
            out = self.tmp / f"{pathlib.Path(model).stem}-{command}"
            subprocess.run([cli(), "-q", command, str(shared(model)), "--samples", "6", "--max-len", "16", "--out", str(out)],
                           check=True)
            self.runs.append(str(out))

    def test_table_and_files_equal_the_cli(self):
        subprocess.run([cli(), "-q", "compare", *self.runs, "--label", "stories", "--label", "stories", "--out",
                        str(self.tmp / "cli")], check=True)
        result = tdyn.compare(self.runs, labels=["stories", "stories"], out=str(self.tmp / "py"))
        self.assertEqual(result["dir"], str(self.tmp / "py"))
        self.assertEqual([m["label"] for m in result["results"]["results"]["models"]], ["stories", "aidreams260K"])
        self.assertEqual((self.tmp / "cli/compare.csv").read_text(), (self.tmp / "py/compare.csv").read_text())
        self.assertEqual((self.tmp / "cli/index.html").read_text(), (self.tmp / "py/index.html").read_text())
        cli_results = json.loads((self.tmp / "cli/results.json").read_text())
        self.assertEqual(cli_results["results"], result["results"]["results"])

        table = result["table"]
        with open(self.tmp / "cli/compare.csv", newline="") as f:
            rows = list(csv.DictReader(f))
        self.assertEqual(len(rows), len(table["value"]))
        self.assertGreater(len(rows), 50)
        for i, row in enumerate(rows):
            for column in ("model", "source", "part", "sublayer", "quantity", "from"):
                self.assertEqual(table[column][i], row[column], column)
            self.assertEqual(table["depth"][i], int(row["depth"]))
            for column in ("normalized_depth", "at", "value", "lo", "hi"):
                expected = float(row[column]) if row[column] else math.nan
                self.assertTrue(table[column][i] == expected or (math.isnan(expected) and math.isnan(table[column][i])), column)
        self.assertEqual(table["value"].dtype, np.float64)
        self.assertEqual(table["depth"].dtype, np.int64)
        # The two models of other depths on one axis: stories260K's five layers, aidreams260K's four.
        gamma = table["quantity"] == "gamma"
        np.testing.assert_allclose(table["normalized_depth"][gamma], [0.2, 0.4, 0.6, 0.8, 1.0])
        departure = (table["quantity"] == "normalized_departure") & (table["model"] == "aidreams260K")
        np.testing.assert_allclose(table["normalized_depth"][departure], [0.125, 0.25, 0.375, 0.5, 0.625, 0.75, 0.875, 1.0])

    def test_bad_input_raises(self):
        with self.assertRaisesRegex(tdyn.Error, "2 labels for 1 results directories"):
            tdyn.compare(self.runs[:1], labels=["a", "b"], out=str(self.tmp / "bad"))
        with self.assertRaisesRegex(tdyn.Error, "has no results.json"):
            tdyn.compare([str(self.tmp)], out=str(self.tmp / "bad"))
        self.assertFalse((self.tmp / "bad").exists())


if __name__ == "__main__":
    unittest.main()
