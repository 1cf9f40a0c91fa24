"""Compares two trees of tdyn results directories (scripts/compare-builds.sh): the same files, arrays, tables and
checkpoints byte for byte, results.json equal once each tree's own path, the command lines, start times and
timings are taken out, and the report's text equal apart from those. Prints each difference, then a summary line;
exits 1 when anything differs."""
import json
import pathlib
import sys

RUN_SPECIFIC = {"argv", "init_argv", "topology_argv", "started_utc", "timings", "seconds"}


def normalised(value):
    if isinstance(value, dict):
        return {k: normalised(v) for k, v in value.items() if k not in RUN_SPECIFIC}
    if isinstance(value, list):
        return [normalised(v) for v in value]
    return value


def first_difference(a, b, path=""):
    if type(a) is not type(b):
        return f"{path}: {a!r:.80} vs {b!r:.80}"
    if isinstance(a, dict):
        for key in sorted(set(a) | set(b)):
            if key not in a or key not in b:
                return f"{path}/{key}: only in {'after' if key not in a else 'before'}"
            found = first_difference(a[key], b[key], f"{path}/{key}")
            if found:
                return found
        return None
    if isinstance(a, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            found = first_difference(x, y, f"{path}/{i}")
            if found:
                return found
        return None
    return None if a == b else f"{path}: {a!r:.80} vs {b!r:.80}"


def main(before, after):
    before, after = pathlib.Path(before), pathlib.Path(after)
    files = lambda root: {p.relative_to(root) for p in root.rglob("*") if p.is_file()}
    names_before, names_after = files(before), files(after)
    differ = 0
    for name in sorted(names_before ^ names_after):
        print(f"only {'before' if name in names_before else 'after'}: {name}")
        differ += 1
    for name in sorted(names_before & names_after):
        a, b = (before / name).read_bytes(), (after / name).read_bytes()
        if name.suffix == ".json" or name.suffix in (".html", ".log", ".svg"):
            a, b = a.replace(bytes(before), b"DIR"), b.replace(bytes(after), b"DIR")
        if a == b:
            continue
        if name.name == "results.json":
            found = first_difference(normalised(json.loads(a)), normalised(json.loads(b)))
            if found is None:
                continue
            print(f"differs: {name} {found}")
        elif name.suffix == ".html":
            continue  # the report shows the command lines and timings; its numbers come from results.json
        else:
            print(f"differs: {name}")
        differ += 1
    print(f"{len(names_before & names_after)} files compared, {differ} differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
