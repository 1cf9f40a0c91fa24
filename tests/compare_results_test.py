"""scripts/compare_results.py, the comparison behind scripts/compare-builds.sh, on two small trees made here: what
must count as the same (each tree's own path, command lines, timings), what must count as a difference (one bit of
a pass file's sums, one number of an array), and what --rtol lets through."""
import contextlib
import io
import json
import pathlib
import shutil
import struct
import sys
import tempfile
import unittest

import numpy

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "scripts"))
import compare_results  # noqa: E402


def pass_file(header, sums):
    """A pass file laid out as analysis/pass/file.h says: magic, version, header size, header, its checksum, then
    (here) one section's raw bytes."""
    text = json.dumps(header).encode()
    checksum = 1469598103934665603
    for byte in text:  # FNV-1a, as the writer's header checksum
        checksum = ((checksum ^ byte) * 1099511628211) % 2**64
    return b"TDYNPASS" + struct.pack("<IQ", 1, len(text)) + text + struct.pack("<Q", checksum) + struct.pack(f"<{len(sums)}d", *sums)


def npy(values):
    out = io.BytesIO()
    numpy.save(out, numpy.asarray(values, dtype=numpy.float64))
    return out.getvalue()


class CompareResultsTest(unittest.TestCase):
    def setUp(self):
        self.root = pathlib.Path(tempfile.mkdtemp(prefix="compare_results_"))
        self.before, self.after = self.root / "before", self.root / "after"

    def tearDown(self):
        shutil.rmtree(self.root)

    def write(self, side, files):
        tree = self.before if side == "before" else self.after
        for name, make in files.items():
            path = tree / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(make(tree))

    def compare(self, *options):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = compare_results.main([str(self.before), str(self.after), *options])
        return code, out.getvalue()

    def same_run(self, sums, array):
        return {
            "run/results.json": lambda tree: json.dumps({"argv": [str(tree)], "timings": {"pass": 1.5 if tree == self.before else 2},
                                                         "results": {"out": str(tree / "run"), "rho": 0.25}}).encode(),
            "run/init/pass.tdynpass": lambda tree: pass_file({"identity": {"model": {"path": str(tree / "run/init/model")}}}, sums),
            "run/values.npy": lambda tree: npy(array),
        }

    def test_a_run_in_another_tree_is_the_same(self):
        self.write("before", self.same_run([1.0, 2.0], [0.5, 1.5]))
        self.write("after", self.same_run([1.0, 2.0], [0.5, 1.5]))
        code, out = self.compare()
        self.assertEqual(code, 0, out)
        self.assertIn("3 files compared, 0 differ", out)

    def test_changed_sums_and_numbers_differ(self):
        self.write("before", self.same_run([1.0, 2.0], [0.5, 1.5]))
        self.write("after", self.same_run([1.0, 2.0000000000000004], [0.5, 1.5 * (1 + 1e-14)]))
        self.write("after", {"run/extra.csv": lambda tree: b"a\n1\n"})
        code, out = self.compare()
        self.assertEqual(code, 1, out)
        self.assertIn("differs: run/init/pass.tdynpass", out)
        self.assertIn("differs: run/values.npy", out)
        self.assertIn("only after: run/extra.csv", out)
        # Within a tolerance the array agrees and says by how much; the pass file is binary and still differs.
        code, out = self.compare("--rtol", "1e-12")
        self.assertIn("within tolerance: run/values.npy (worst run/values.npy[1]", out)
        self.assertIn("differs: run/init/pass.tdynpass", out)
        code, out = self.compare("--rtol", "1e-16")
        self.assertIn("differs: run/values.npy", out)


if __name__ == "__main__":
    unittest.main()
