"""The zoo's archives on another numpy: the same output bits as on the numpy that made them.

    python -m tests.models.zoo.numpy_floor write DIR     # the full install: archives, inputs, outputs
    python tests/models/zoo/numpy_floor.py compare DIR   # any numpy the runtime supports (numpy only)

``write`` converts every zoo model, builds it at -O0 and -O2, saves each archive in DIR and runs it on
the zoo's tested shapes; the inputs, the outputs and the model's float tolerance (its zoo judge's)
go to DIR as pickles of plain Python values (arrays as dtype, shape and bytes), which any numpy
reads. ``compare`` loads each archive, runs it on the same inputs and counts the outputs that have
the same bits (a zero's sign included; NaN matches NaN). An output that does not must be a float
within the judge's tolerance: an older numpy's wheel bundles an older OpenBLAS, whose kernels on
some CPU may sum in another order (on this project's machine every run gives the same bits);
integers and quantized outputs must be equal. CI runs ``compare`` in a fresh venv holding the
oldest numpy that pyproject.toml accepts (``.ci/numpy_floor.sh``, numpy 2.0): the oldest numpy 2
releases have their own bugs (numpy 2.0-2.1 crash comparing a strided unsigned array with a
negative int; 2.0's ``take`` refuses uint64 indices), which only running there finds.
"""

from __future__ import annotations

import pickle
import sys
from pathlib import Path

import numpy as np

_ARRAY = "__array__"


def encode(value):
    """``value`` with every array (and numpy scalar) as a plain tuple; dicts, lists and tuples walked."""
    if isinstance(value, np.generic):
        value = np.asarray(value)
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            return (_ARRAY, "O", value.shape, [encode(v) for v in value.reshape(-1).tolist()])
        return (_ARRAY, value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, dict):
        return {k: encode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(encode(v) for v in value)
    return value


def decode(value):
    """:func:`encode` undone."""
    if isinstance(value, tuple) and len(value) == 4 and value[0] == _ARRAY:
        _, dtype, shape, data = value
        if dtype == "O":
            array = np.empty(len(data), object)
            array[:] = [decode(v) for v in data]
            return array.reshape(shape)
        return np.frombuffer(data, np.dtype(dtype)).reshape(shape).copy()
    if isinstance(value, dict):
        return {k: decode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(decode(v) for v in value)
    return value


def same_bits(got, want) -> bool:
    """Whether two outputs (arrays, or lists/dicts of them: ZipMap's) hold the same values, bit for bit."""
    if isinstance(want, dict):
        return isinstance(got, dict) and got.keys() == want.keys() and all(same_bits(got[k], want[k]) for k in want)
    if isinstance(want, (list, tuple)):
        return isinstance(got, (list, tuple)) and len(got) == len(want) and all(map(same_bits, got, want))
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape or got.dtype != want.dtype:
        return False
    if want.dtype.kind == "c":
        return same_bits(got.real, want.real) and same_bits(got.imag, want.imag)
    if want.dtype.kind == "f":           # equal and of one sign (-0.0 is not +0.0), or both NaN
        same = (got == want) & (np.signbit(got) == np.signbit(want))
        return bool((same | (np.isnan(got) & np.isnan(want))).all())
    if want.dtype == object:
        return all(map(same_bits, got.reshape(-1).tolist(), want.reshape(-1).tolist()))
    return bool((got == want).all())


def close(got, want, tolerance: tuple) -> bool:
    """Whether ``got`` is within ``(rtol, atol)`` of ``want``: float arrays of one shape and dtype."""
    got, want = np.asarray(got), np.asarray(want)
    if want.dtype.kind != "f" or got.dtype != want.dtype or got.shape != want.shape or not any(tolerance):
        return False
    return bool(np.allclose(got, want, rtol=tolerance[0], atol=tolerance[1], equal_nan=True))


def write(directory: Path) -> int:
    import relaxpack
    from relaxpack.runtime import VirtualMachine, load

    from .inputs import make_inputs
    from .judge import HERE, JUDGES, MODELS

    directory.mkdir(parents=True, exist_ok=True)
    for name in sorted(MODELS):
        entry = MODELS[name]
        module = relaxpack.from_onnx(str(HERE / entry["file"]))
        for level in (0, 2):
            archive = directory / f"{name}-O{level}.rpk"
            relaxpack.build(module, opt_level=level).save(archive)
            vm = VirtualMachine(load(archive))
            cases = []
            for dims in entry["shapes"]:
                feeds = make_inputs(entry, dims)
                cases.append((feeds, vm.run(feeds)))
            judge = JUDGES[entry["judge"]]
            record = {"tolerance": (judge.rtol, judge.atol), "cases": cases}
            archive.with_suffix(".cases").write_bytes(pickle.dumps(encode(record)))
    print(f"numpy {np.__version__}: {2 * len(MODELS)} archives and their outputs written to {directory}")
    return 0


def compare(directory: Path) -> int:
    from relaxpack.runtime import VirtualMachine, load

    failures, runs, near = [], 0, []
    archives = sorted(directory.glob("*.rpk"))
    for archive in archives:
        try:
            vm = VirtualMachine(load(archive))
            record = decode(pickle.loads(archive.with_suffix(".cases").read_bytes()))
            for feeds, want in record["cases"]:
                got = vm.run(feeds)
                runs += 1
                differing = [k for k in want if not same_bits(got[k], want[k])]
                far = [k for k in differing if not close(got[k], want[k], tuple(record["tolerance"]))]
                if far:
                    failures.append(f"{archive.stem}: {', '.join(far)} differ beyond {tuple(record['tolerance'])}")
                elif differing:
                    near.append(f"{archive.stem}: {', '.join(differing)} within {tuple(record['tolerance'])}")
        except Exception as err:  # noqa: BLE001 - every archive is tried; each failure is one line
            failures.append(f"{archive.stem}: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}")
    for line in near + failures:
        print(line)
    print(f"numpy {np.__version__}: {len(archives)} archives, {runs} runs: {runs - len(near) - len(failures)} "
          f"the same bits, {len(near)} within the judge's tolerance, {len(failures)} failures")
    return 1 if failures or not archives else 0


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("write", "compare"):
        print("usage: numpy_floor.py write|compare DIR", file=sys.stderr)
        return 2
    return (write if argv[0] == "write" else compare)(Path(argv[1]))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
