"""The families of ``fuzz_archive.py`` about what the user sees (issue 20, items 14-19).

    python scripts/fuzz_archive.py --family names --cases 10000 --memory 2
    python scripts/fuzz_archive.py --family input-files --cases 10000 --memory 2

- ``names``: input, output and function names and metadata text become
  hostile strings (terminal escapes, bidirectional overrides, lone
  surrogates, newlines, 4096 characters, empty, duplicates);
- ``metadata``: the metadata the tools read gets other types and values;
- ``shape-programs``: the dim programs in the bytecode divide by zero, read
  other heap slots, or get boundary numbers;
- ``input-files``: hostile ``.npy``/``.npz`` inputs for a seed archive (zip
  bombs, headers claiming 2**40 elements, truncated or bit-flipped files,
  wrong dtypes and shapes, object arrays, zips with odd members).

An archive case passes when loading raises ArchiveError or succeeds, a run
returns outputs or raises a RelaxpackError, and ``relaxpack inspect`` and
``relaxpack run`` exit 0, or 1 with one ``error:`` line, and print no raw
control character. An input-file case passes when reading and running raise
only RelaxpackErrors (MemoryError is a failure: the campaign runs under
``--memory``) and the CLI behaves as above.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import random
import re
import struct
import zipfile

import numpy as np

HEADER = struct.Struct("<8sIIQ32sQ")
HOSTILE = ["x\x1b]0;pwned\x07", "\x1b[2J\x1b[H", "a\nerror: forged", "\u202eevil", "\ud800", "", "\x00",
           "n" * 4096, "\x9b31m", "tab\there", "\r", "caf\u00e9", "\x7f"]
#: raw in output, these mean the CLI passed something from a file straight to the terminal
_RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


# ---------------------------------------------------------------- re-sealing a manifest
def manifest_of(data: bytes) -> dict:
    return json.loads(data[64:64 + HEADER.unpack(data[:64])[3]])


def reseal(data: bytes, m: dict) -> bytes:
    magic, version, flags, length, _, offset = HEADER.unpack(data[:64])
    raw = json.dumps(m, sort_keys=True, separators=(",", ":")).encode()
    new_offset = -(-(64 + len(raw)) // 64) * 64
    return (HEADER.pack(magic, version, flags, len(raw), hashlib.sha256(raw).digest(), new_offset) + raw
            + bytes(new_offset - 64 - len(raw)) + data[offset:])


# ---------------------------------------------------------------- archive families
def hostile_names(rng: random.Random, data: bytes, renames: dict) -> tuple[str, bytes]:
    """Rename an input (consistently in the entry function and the signature), an output, a
    function or a metadata text; ``renames`` gets ``{old input name: new}``."""
    m = manifest_of(data)
    new = rng.choice(HOSTILE) + (rng.choice(HOSTILE) if rng.random() < 0.3 else "")
    entry = next((f for f in m["functions"] if f["name"] == m["entry"]), None)
    where = rng.choice(["input", "output", "function", "metadata", "dim"])
    if where == "input" and entry and entry["params"]:
        i = rng.randrange(len(entry["params"]))
        renames[entry["params"][i]["name"]] = new
        entry["params"][i]["name"] = new
        m["inputs"] = entry["params"]
    elif where == "output" and entry and entry["outputs"]:
        entry["outputs"][rng.randrange(len(entry["outputs"]))] = new
        m["outputs"] = entry["outputs"]
    elif where == "function" and entry:
        old = entry["name"]
        entry["name"] = new
        m["entry"] = new
        m["func_table"] = [[k, new if k == "vm" and n == old else n] for k, n in m["func_table"]]
    elif where == "dim" and entry and entry["dim_ranges"]:
        entry["dim_ranges"][0][0] = new
        m["dim_ranges"] = entry["dim_ranges"]
    else:
        m["metadata"][rng.choice(["source", "stage", "ir", "note"])] = new
    return f"names: {where} -> {new[:40]!r}", reseal(data, m)


_VALUES = [None, True, -1, 0, 2 ** 70, 1.5, float("inf"), "x", "", [], [1, 2], {}, {"a": 1}, "\x1b[2J"]


def metadata_types(rng: random.Random, data: bytes, renames: dict) -> tuple[str, bytes]:
    m = manifest_of(data)
    meta = m["metadata"]
    if rng.random() < 0.5 and isinstance(meta.get("memory_plan"), dict):
        key = rng.choice(["buffers", "arena_bytes", "lower_bound_bytes", "naive_bytes", "workspaces",
                          "workspace_bytes", "largest_workspace_bytes", "planned_at", "algorithm", "pool_bytes",
                          "intermediates"])
        meta["memory_plan"][key] = value = rng.choice(_VALUES + [{"global": "big"}, {"\x1b": 1}])
        where = f"memory_plan.{key}"
    else:
        where = rng.choice(["memory_plan", "ir", "stage", "source", "source_sha256"])
        meta[where] = value = rng.choice(_VALUES)
    return f"metadata: {where} = {value!r:.40}", reseal(data, m)


def _programs(node, path=()):
    """Every dim program (a list starting with an operator or "h") in an immediate, with its path."""
    if isinstance(node, list):
        if node and node[0] in ("+", "-", "*", "//", "%", "min", "max", "neg", "h"):
            yield path, node
        for i, item in enumerate(node):
            yield from _programs(item, path + (i,))


def shape_programs(rng: random.Random, data: bytes, renames: dict) -> tuple[str, bytes]:
    m = manifest_of(data)
    found = [(fn, pc, path, prog) for fn in m["functions"] for pc, ins in enumerate(fn["instructions"])
             if ins[0] == "call" for path, prog in _programs(ins[3], (3,))]
    if not found:
        return "shape programs: none in this archive", data
    fn, pc, path, prog = rng.choice(found)
    how = rng.choice(["divide by zero", "modulo zero", "divide by a heap slot", "other slot", "boundary",
                      "negate", "huge"])
    new = {"divide by zero": ["//", prog, 0], "modulo zero": ["%", prog, 0],
           "divide by a heap slot": ["//", prog, ["h", rng.randrange(4)]],
           "other slot": ["h", rng.choice([0, 1, 2, 7, -1, 2 ** 40])], "boundary": rng.choice([0, -1, 2 ** 62, -2 ** 63]),
           "negate": ["neg", prog], "huge": ["*", prog, 2 ** 62]}[how]
    node = fn["instructions"][pc]
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = new
    return f"shape programs: {fn['name'][:20]!r} pc {pc}: {how}", reseal(data, m)


ARCHIVE_FAMILIES = {"names": hostile_names, "metadata": metadata_types, "shape-programs": shape_programs}


# ---------------------------------------------------------------- the CLI, in process
def cli(*args: str) -> tuple[int, str, str]:
    """``relaxpack ARGS`` in this process: (exit code, stdout, stderr)."""
    from relaxpack.cli import main
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(args))
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    return code, out.getvalue(), err.getvalue()


def cli_problem(*args: str) -> tuple[int, str | None]:
    """``relaxpack ARGS``'s exit code and what is wrong with how it ended (or None)."""
    code, out, err = cli(*args)
    raw = _RAW.search(out + err)
    if raw:
        return code, f"relaxpack {args[0]} printed a raw control character {raw.group()!r}"
    if "Traceback" in out + err:
        return code, f"relaxpack {args[0]} printed a traceback: {err[-300:]!r}"
    if code == 0:
        return code, None
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    if code != 1 or len(errors) != 1 or len([line for line in err.splitlines() if line.strip()]) != 1:
        return code, f"relaxpack {args[0]} exited {code} with {err[-300:]!r}"
    return code, None


# ---------------------------------------------------------------- input files
def _npy(array_or_header, rng: random.Random) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array_or_header, allow_pickle=False)
    return buf.getvalue()


def _claims(shape, descr: str, data: bytes = b"", version=(1, 0), fortran=False) -> bytes:
    buf = io.BytesIO()
    header = {"descr": descr, "fortran_order": fortran, "shape": tuple(shape)}
    if version == (1, 0):
        np.lib.format.write_array_header_1_0(buf, header)
    else:
        np.lib.format.write_array_header_2_0(buf, header)
    return buf.getvalue() + data


def _zip(members: list[tuple[str, bytes]], rng: random.Random) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", rng.choice([zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])) as z:
        for name, data in members:
            z.writestr(name, data)
    return buf.getvalue()


def hostile_input(rng: random.Random, params: list, tmp: str) -> tuple[str, list[str]]:
    """A hostile input file for a model with inputs ``params``: (description, CLI arguments)."""
    from tests.robustness.input_bombs import zip_bomb
    p = rng.choice(params)
    shape = [min(d, 64) if isinstance(d, int) else rng.choice([1, 2, 3]) for d in (p.shape or ())]
    good = np.zeros(shape, p.dtype or "float32")
    how = rng.choice(["bomb", "bomb", "claim", "claim", "truncate", "flip npy", "flip npz", "dtype", "rank",
                      "object", "v2 header", "odd member", "duplicate", "fortran", "empty", "garbage", "bigger"])
    npz = how in ("bomb", "flip npz", "odd member", "duplicate") or rng.random() < 0.3
    if how == "bomb":   # up to 3.9 GB inflated (no zip64 here)
        descr = rng.choice(["<f4", "<f8", np.dtype(p.dtype or "float32").str])
        big = [rng.choice([d, d + 1, 1024]) for d in shape or [1]]
        rest = int(np.prod(big[1:], dtype=object)) * np.dtype(descr).itemsize
        big[0] = max(1, min(big[0] * rng.choice([1, 1000, 30000]), (3_900_000_000 // max(rest, 1))))
        while int(np.prod(big, dtype=object)) * np.dtype(descr).itemsize > 3_900_000_000:
            k = max(range(len(big)), key=lambda i: big[i])     # the other dims alone were too big
            big[k] = max(1, big[k] // 2)
        data = zip_bomb({p.name: (tuple(big), descr)})
        name = f"bomb {big} {descr}"
    else:
        claimed = [rng.choice([2 ** 40, 2 ** 31, 0, 1, d]) for d in shape] or [2 ** 40]
        body = {"claim": _claims(claimed, good.dtype.str),
                "truncate": _npy(good, rng)[:rng.randrange(1, len(_npy(good, rng)))],
                "flip npy": _flip(_npy(good, rng), rng),
                "dtype": _npy(good.astype(rng.choice(["float64", "int8", "bool", "U3", "complex64"])), rng),
                "rank": _npy(good.reshape(good.shape + (1,)), rng),
                "object": _claims(shape, "|O", b"\x80\x04N."),
                "v2 header": _claims(shape, good.dtype.str, good.tobytes(), version=(2, 0)),
                "fortran": _claims(shape, good.dtype.str, good.tobytes(), fortran=True),
                "empty": b"", "garbage": rng.randbytes(rng.choice([1, 10, 200])),
                "bigger": _npy(good, rng) + bytes(rng.choice([1, 64])),
                }.get(how, _npy(good, rng))
        name = how
        if npz:
            members = [(f"{p.name}.npy", body)]
            if how == "odd member":
                members.append(("readme.txt", b"hello"))
            if how == "duplicate":
                members.append((f"{p.name}.npy", body))
            data = _zip(members, rng)
            if how == "flip npz":
                data = _flip(data, rng)
        else:
            data = body
    path = os.path.join(tmp, "in.npz" if npz else "in.npy")
    with open(path, "wb") as f:
        f.write(data)
    args = ["--inputs", path] if npz else ["--input", f"{p.name}={path}"]
    return f"input file: {name} ({'npz' if npz else 'npy'}, {len(data)} bytes)", args


def _flip(data: bytes, rng: random.Random) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.choice([1, 2, 8])):
        buf[rng.randrange(len(buf))] ^= 1 << rng.randrange(8)
    return bytes(buf)


__all__ = ["ARCHIVE_FAMILIES", "cli", "cli_problem", "hostile_input", "manifest_of", "reseal"]
