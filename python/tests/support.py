"""Helpers shared by the Python tests: where the shared test data and the CLI are, an independent safetensors
reader (plain numpy), and the tolerance check |a - b| <= atol + rtol |b| that reports the worst element."""
import json
import os
import pathlib
import struct
import tempfile

import numpy as np


def shared_dir():
    """../shared beside the source tree, or $TDYN_SHARED."""
    if os.environ.get("TDYN_SHARED"):
        return pathlib.Path(os.environ["TDYN_SHARED"])
    source = pathlib.Path(os.environ.get("TDYN_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
    return source.parent / "shared"


def shared(relative):
    return shared_dir() / relative


def have_shared(relative):
    return shared(relative).exists()


def missing_shared(relative):
    return f"shared test data not found: {shared(relative)} (set TDYN_SHARED to the shared/ directory)"


def cli():
    """The tdyn executable ($TDYN_CLI, set by ctest), or None."""
    path = os.environ.get("TDYN_CLI")
    return path if path and os.path.exists(path) else None


def cli_scratch(test, name, *shared_paths):
    """For a test that runs the CLI beside Python: skips `test` unless the tdyn executable is known and every one of
    `shared_paths` exists (naming the first missing one), then returns a new scratch directory tdyn_NAME_*."""
    if cli() is None:
        test.skipTest("the tdyn executable is not known (TDYN_CLI is set by ctest)")
    for relative in shared_paths:
        if not have_shared(relative):
            test.skipTest(missing_shared(relative))
    return pathlib.Path(tempfile.mkdtemp(prefix=f"tdyn_{name}_"))


_DTYPES = {"F64": "<f8", "F32": "<f4", "I64": "<i8", "I32": "<i4"}


def read_safetensors(path):
    """{name: array} of a .safetensors file: 8-byte header length, JSON header, then the data buffer."""
    data = pathlib.Path(path).read_bytes()
    (header_length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + header_length])
    header.pop("__metadata__", None)
    buffer = data[8 + header_length:]
    out = {}
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        out[name] = np.frombuffer(buffer[begin:end], dtype=_DTYPES[entry["dtype"]]).reshape(entry["shape"])
    return out


def assert_close(test, actual, expected, rtol, atol, what):
    """|actual - expected| <= atol + rtol |expected| elementwise (real or complex); a failure names the worst
    element."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    test.assertEqual(actual.shape, expected.shape, f"{what}: shape")
    excess = np.abs(actual - expected) - (atol + rtol * np.abs(expected))
    worst = np.unravel_index(np.argmax(excess), excess.shape) if excess.size else ()
    test.assertTrue(excess.size == 0 or excess[worst] <= 0,
                    f"{what}: worst element {worst}: got {actual[worst]}, expected {expected[worst]}, "
                    f"max |diff| {np.max(np.abs(actual - expected)):.3g}")


def assert_close_to_ref(test, actual, expected, rtol, atol_x_max, what):
    """The fixtures' tolerance form: atol = atol_x_tensor_max * max |expected|."""
    assert_close(test, actual, expected, rtol, atol_x_max * float(np.max(np.abs(expected))), what)


def json_numbers(value):
    """A result as results.json holds it: NaN (not a JSON number) is written as null."""
    if isinstance(value, dict):
        return {k: json_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_numbers(v) for v in value]
    return None if isinstance(value, float) and value != value else value
