"""Compares two trees of tdyn results directories (scripts/compare-builds.sh): the same files, arrays, tables and
checkpoints byte for byte, results.json equal once each tree's own path, the command lines, start times and
timings are taken out, pass files equal but for that path in their header, and the report's text equal apart
from those. Prints each difference, then a summary line;
exits 1 when anything differs.

    compare_results.py BEFORE AFTER [--rtol R [--atol A]]

With --rtol, a file whose bytes differ but whose numbers agree, |after − before| ≤ A + R·|before| for every number
(float arrays of .npy files, the cells of tables and figures, the numbers of results.json) with everything else
equal, is counted as within tolerance and shown with its worst number, not as a difference: a change that may move
results by round-off (say, a float64 formula rewritten) is checked with --rtol 1e-12."""
import argparse
import io
import json
import pathlib
import re
import sys

RUN_SPECIFIC = {"argv", "init_argv", "topology_argv", "started_utc", "timings", "seconds"}


def normalised(value):
    if isinstance(value, dict):
        return {k: normalised(v) for k, v in value.items() if k not in RUN_SPECIFIC}
    if isinstance(value, list):
        return [normalised(v) for v in value]
    return value


class Tolerance:
    """|after − before| ≤ atol + rtol·|before|, remembering the worst number seen (by its share of the tolerance)."""

    def __init__(self, rtol, atol):
        self.rtol, self.atol = rtol, atol
        self.worst = (0.0, "")  # (|a − b| / tolerance, where)

    def close(self, before, after, where):
        if before == after or (before != before and after != after):  # equal, or both NaN
            return True
        allowed = self.atol + self.rtol * abs(before)
        ratio = abs(after - before) / allowed if allowed > 0 else float("inf")
        if not ratio <= self.worst[0]:
            self.worst = (ratio, f"{where}: {before!r} vs {after!r}")
        return ratio <= 1


NUMBER = re.compile(rb"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|nan|inf)")


def text_within(a, b, tol, name):
    """The same text apart from numbers within tol (tables, figures)."""
    split = lambda t: (NUMBER.split(t), NUMBER.findall(t))
    (words_a, numbers_a), (words_b, numbers_b) = split(a), split(b)
    if words_a != words_b or len(numbers_a) != len(numbers_b):
        return False
    return all(tol.close(float(x), float(y), f"{name} number {i}") for i, (x, y) in enumerate(zip(numbers_a, numbers_b)))


def npy_within(a, b, tol, name):
    import numpy

    x, y = numpy.load(io.BytesIO(a), allow_pickle=False), numpy.load(io.BytesIO(b), allow_pickle=False)
    if x.shape != y.shape or x.dtype != y.dtype:
        return False
    if x.dtype.kind not in "fc":
        return numpy.array_equal(x, y)
    x, y = x.ravel(), y.ravel()
    same = (x == y) | (numpy.isnan(x) & numpy.isnan(y))
    with numpy.errstate(divide="ignore", invalid="ignore"):
        ratio = numpy.where(same, 0.0, numpy.abs(y - x) / (tol.atol + tol.rtol * numpy.abs(x)))
    ratio = numpy.nan_to_num(ratio, nan=numpy.inf)
    i = int(numpy.argmax(ratio))
    return tol.close(x[i].item(), y[i].item(), f"{name}[{i}]")


def first_difference(a, b, path="", tol=None):
    if tol is not None and isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) \
            and not isinstance(b, bool):
        return None if tol.close(a, b, path) else f"{path}: {a!r:.80} vs {b!r:.80}"
    if type(a) is not type(b):
        return f"{path}: {a!r:.80} vs {b!r:.80}"
    if isinstance(a, dict):
        for key in sorted(set(a) | set(b)):
            if key not in a or key not in b:
                return f"{path}/{key}: only in {'after' if key not in a else 'before'}"
            found = first_difference(a[key], b[key], f"{path}/{key}", tol)
            if found:
                return found
        return None
    if isinstance(a, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            found = first_difference(x, y, f"{path}/{i}", tol)
            if found:
                return found
        return None
    return None if a == b else f"{path}: {a!r:.80} vs {b!r:.80}"


def pass_parts(data, root):
    """A pass file (analysis/pass/file.h) as its header, with the tree's own path taken out, and its sections' bytes:
    a pass of a model written inside the tree (analyze's initialisations) names that path in its header."""
    magic, header_at = b"TDYNPASS", 8 + 4 + 8
    if not data.startswith(magic) or len(data) < header_at:
        return None
    size = int.from_bytes(data[12:header_at], "little")
    header = data[header_at:header_at + size].replace(bytes(root), b"DIR")
    return header, data[header_at + size + 8:]  # past the header's checksum, which covers the path


def main(argv):
    parser = argparse.ArgumentParser(description="Compares two trees of tdyn results directories.")
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--rtol", type=float, help="numbers within atol + rtol·|before| count as equal")
    parser.add_argument("--atol", type=float, default=0.0)
    args = parser.parse_args(argv)
    before, after = pathlib.Path(args.before), pathlib.Path(args.after)
    files = lambda root: {p.relative_to(root) for p in root.rglob("*") if p.is_file()}
    names_before, names_after = files(before), files(after)
    differ = within = 0
    for name in sorted(names_before ^ names_after):
        print(f"only {'before' if name in names_before else 'after'}: {name}")
        differ += 1
    for name in sorted(names_before & names_after):
        a, b = (before / name).read_bytes(), (after / name).read_bytes()
        if name.suffix == ".json" or name.suffix in (".html", ".log", ".svg"):
            a, b = a.replace(bytes(before), b"DIR"), b.replace(bytes(after), b"DIR")
        elif name.suffix == ".tdynpass":
            a, b = pass_parts(a, before) or a, pass_parts(b, after) or b
        if a == b:
            continue
        if name.suffix == ".html":
            continue  # the report shows the command lines and timings; its numbers come from results.json
        tol = Tolerance(args.rtol, args.atol) if args.rtol is not None else None
        if name.name == "results.json":
            found = first_difference(normalised(json.loads(a)), normalised(json.loads(b)), tol=tol)
            if found is None and (tol is None or tol.worst[0] == 0):
                continue
            close = found is None
        elif tol is not None and name.suffix == ".npy":
            close = npy_within(a, b, tol, name)
            found = None
        elif tol is not None and name.suffix in (".csv", ".svg", ".txt", ".tsv"):
            close = text_within(a, b, tol, name)
            found = None
        else:
            close, found = False, None
        if close:
            within += 1
            print(f"within tolerance: {name} (worst {tol.worst[1]}, {tol.worst[0]:.2g} of the tolerance)")
            continue
        worst = f" (worst {tol.worst[1]}, {tol.worst[0]:.2g} of the tolerance)" if tol and tol.worst[0] > 1 else ""
        print(f"differs: {name}" + (f" {found}" if found else worst))
        differ += 1
    tolerance = f", {within} within rtol {args.rtol} atol {args.atol}" if args.rtol is not None else ""
    print(f"{len(names_before & names_after)} files compared{tolerance}, {differ} differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
