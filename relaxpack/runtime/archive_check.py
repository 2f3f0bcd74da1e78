"""Validation of deployment archives, before anything in them is used.

The loader (:mod:`relaxpack.runtime.archive`) hands each part of a file to
one function here: the fixed header, the manifest bytes, the manifest's
structure (a schema written out by hand: every key present with the right
type, every count bounded), the constant ranges and the bytecode. Each
failure is an :class:`~relaxpack.errors.ArchiveError` with a one-line
message naming the field at fault, e.g. ``manifest: functions[0] ('main')
.instructions[7] args[0]: register 40 out of range 0..22`` (the loader
puts the file's path in front).

Format 2 adds each function's ``results`` (the outputs' kind, dtype and
symbolic shape) and ``spans`` (the ONNX nodes each instruction came from);
format 1 archives still load, without them. Format 3 lets a constant name
the narrower dtype its values are ``stored`` in (:mod:`.constant_storage`).

Bytecode jumps forward only (``If``/``Goto`` skip a branch), so a
function's instructions run at most once per call and a malicious archive
cannot loop.
"""

from __future__ import annotations

import hashlib
import json
import re
import reprlib
import struct
from dataclasses import dataclass

from ..errors import ArchiveError, RelaxpackError
from .bytecode import CONST, FUNC, IMM, NO_DST, REG
from .constant_storage import candidates
from .dtypes import numpy_dtype
from .executable import FUNC_KINDS

FORMAT_VERSION = 3                     # what this runtime writes
READ_VERSIONS = (1, 2, 3)              # what it loads
MAGIC = b"\x89RPK\r\n\x1a\n"          # PNG-style: catches text-mode transfers
PARAMS_MAGIC = b"\x89RPP\r\n\x1a\n"
HEADER = struct.Struct("<8sIIQ32sQ")   # magic, version, flags, manifest length, sha256, data offset
PARAMS_HEADER = struct.Struct("<8sIIQ")  # magic, version, reserved, data length; padded to ALIGNMENT
ALIGNMENT = 64
FLAG_EXTERNAL_PARAMS = 1
assert HEADER.size == ALIGNMENT and PARAMS_HEADER.size <= ALIGNMENT

# Limits: far above any real model, low enough that a hostile file cannot
# make the loader (or a VM prepared from it) exhaust memory.
MAX_MANIFEST_BYTES = 32 << 20
MAX_JSON_DEPTH = 96
MAX_NAME = 4096
MAX_FUNCTIONS = 4096
MAX_INSTRUCTIONS = 1 << 20          # all functions together
MAX_REGISTERS = 1 << 20             # per function
MAX_OPERANDS = 1 << 16              # per instruction (a tuple of 10,000 outputs fits)
MAX_TABLE = 1 << 16                 # function-table entries
MAX_CONSTANTS = 1 << 20
MAX_NDIM = 32
MAX_DIM = 1 << 48
MAX_OFFSET = 1 << 62
MAX_ELEMENTS = 1 << 58              # times the largest itemsize (16) stays below numpy's limit
MAX_JSON_CONTAINERS = 1 << 22       # lists and objects in the manifest (each costs ~60 bytes parsed)
MAX_PARAMS = 1 << 16                # inputs or outputs of one function (a Split into 10,000 outputs fits)

_SHA = re.compile(r"[0-9a-f]{64}")


def align(n: int) -> int:
    return -(-n // ALIGNMENT) * ALIGNMENT


# ---------------------------------------------------------------- header
@dataclass(frozen=True)
class Header:
    version: int
    flags: int
    manifest_length: int
    manifest_sha256: bytes
    data_offset: int


def check_header(raw: bytes, file_size: int) -> Header:
    """The header of a ``file_size``-byte archive, its fields checked against the size."""
    if file_size < HEADER.size:
        raise ArchiveError(f"{file_size} bytes, shorter than the {HEADER.size}-byte archive header")
    magic, version, flags, length, digest, data_offset = HEADER.unpack(raw[:HEADER.size])
    if magic != MAGIC:
        raise ArchiveError(f"not a relaxpack archive (magic {magic!r}, expected {MAGIC!r})")
    check_version(version)
    if flags & ~FLAG_EXTERNAL_PARAMS:
        raise ArchiveError(f"unknown header flags {flags:#x}")
    if length == 0 or length > MAX_MANIFEST_BYTES:
        raise ArchiveError(f"manifest length {length} outside 1..{MAX_MANIFEST_BYTES}")
    if HEADER.size + length > file_size:
        raise ArchiveError(f"manifest of {length} bytes runs past the end of the "
                           f"{file_size}-byte file (truncated?)")
    expected = align(HEADER.size + length)
    if data_offset != expected:
        raise ArchiveError(f"data section offset {data_offset}, expected {expected} "
                           f"(the manifest's end, aligned to {ALIGNMENT})")
    if data_offset > file_size:
        raise ArchiveError(f"data section offset {data_offset} is past the end of the "
                           f"{file_size}-byte file (truncated?)")
    return Header(version, flags, length, digest, data_offset)


def check_version(version: int) -> None:
    if version > FORMAT_VERSION:
        raise ArchiveError(f"archive format {version} is newer than this runtime's "
                           f"{FORMAT_VERSION}; upgrade relaxpack")
    if version not in READ_VERSIONS:
        raise ArchiveError(f"archive format {version} is not supported "
                           f"(this runtime reads formats {', '.join(map(str, READ_VERSIONS))})")


def check_params_header(raw: bytes, file_size: int, nbytes: int) -> None:
    if file_size < ALIGNMENT:
        raise ArchiveError(f"{file_size} bytes, shorter than the {ALIGNMENT}-byte params header")
    magic, version, reserved, length = PARAMS_HEADER.unpack(raw[:PARAMS_HEADER.size])
    if magic != PARAMS_MAGIC:
        raise ArchiveError(f"not a relaxpack params file (magic {magic!r}, expected {PARAMS_MAGIC!r})")
    check_version(version)
    if reserved or any(raw[PARAMS_HEADER.size:ALIGNMENT]):
        raise ArchiveError("reserved header bytes are not zero")
    if length != nbytes or file_size != ALIGNMENT + nbytes:
        raise ArchiveError(f"holds {file_size - ALIGNMENT} data bytes (header says {length}), "
                           f"the archive expects {nbytes}")


# ---------------------------------------------------------------- manifest bytes
def decode_manifest(raw: bytes, header: Header) -> dict:
    """The manifest's JSON object, after its checksum, encoding, keys and depth are checked."""
    if hashlib.sha256(raw).digest() != header.manifest_sha256:
        raise ArchiveError("manifest checksum mismatch (the file is corrupt)")
    # an upper bound (brackets inside strings count too), taken before parsing builds anything
    containers = raw.count(b"[") + raw.count(b"{")
    if containers > MAX_JSON_CONTAINERS:
        raise ArchiveError(f"manifest has up to {containers} JSON lists and objects, more than {MAX_JSON_CONTAINERS}")
    try:
        manifest = json.loads(raw.decode("utf-8"), object_pairs_hook=_unique_keys, parse_int=_parse_int)
    except RecursionError:
        raise ArchiveError("manifest JSON nested too deeply") from None
    except (ValueError, ArchiveError) as err:  # JSONDecodeError, UnicodeDecodeError, int digit limit
        raise ArchiveError(f"manifest is not valid JSON ({_one_line(err)})") from None
    if not isinstance(manifest, dict):
        raise ArchiveError(f"manifest must be a JSON object, got {type(manifest).__name__}")
    if json_depth(manifest) > MAX_JSON_DEPTH:
        raise ArchiveError(f"manifest JSON nested deeper than {MAX_JSON_DEPTH}")
    return manifest


def _unique_keys(pairs):
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen, dup = set(), set()
        for k, _ in pairs:
            (dup if k in seen else seen).add(k)
        raise ArchiveError(f"duplicate key(s) {sorted(dup)[:5]}")
    return obj


def _parse_int(text: str) -> int:
    # bounded before int() runs: int() of a huge digit string is quadratic when
    # the interpreter's digit limit is off
    if len(text) > 64:
        raise ArchiveError(f"integer of {len(text)} digits")
    return int(text)


def json_depth(value) -> int:
    """Nesting depth of a JSON value, without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)
    return deepest


def _one_line(err: Exception) -> str:
    return " ".join(str(err).split())[:200]


# ---------------------------------------------------------------- schema helpers
def _fail(path: str, message: str):
    raise ArchiveError(f"manifest: {path}: {message}")


_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxlist, _REPR.maxdict, _REPR.maxstring, _REPR.maxother = 3, 4, 4, 40, 40


def _short(value) -> str:
    """A bounded repr: values from a hostile file may be huge."""
    return _REPR.repr(value)


def obj(value, path: str, keys: set[str]) -> dict:
    if not isinstance(value, dict):
        _fail(path, f"expected an object, got {_short(value)}")
    if value.keys() != keys:
        missing, extra = sorted(keys - value.keys()), sorted(value.keys() - keys)
        extra_text = "[" + ", ".join(_short(k) for k in extra[:10]) + "]"
        _fail(path, f"keys differ from the format's: missing {missing}, unexpected {extra_text}")
    return value


def lst(value, path: str, max_len: int, min_len: int = 0) -> list:
    if not isinstance(value, list):
        _fail(path, f"expected a list, got {_short(value)}")
    if not min_len <= len(value) <= max_len:
        _fail(path, f"has {len(value)} entries, allowed {min_len}..{max_len}")
    return value


def integer(value, path: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        _fail(path, f"expected an int, got {_short(value)}")
    if not lo <= value <= hi:
        _fail(path, f"{value} outside {lo}..{hi}")
    return value


def string(value, path: str, max_len: int = MAX_NAME) -> str:
    if not isinstance(value, str):
        _fail(path, f"expected a string, got {_short(value)}")
    if len(value) > max_len:
        _fail(path, f"string of {len(value)} characters, longer than {max_len}")
    return value


def opt_int(value, path: str, lo: int = -MAX_OFFSET, hi: int = MAX_OFFSET):
    return None if value is None else integer(value, path, lo, hi)


def opt_string(value, path: str):
    return None if value is None else string(value, path)


def sha256_hex(value, path: str) -> str:
    if not isinstance(value, str) or not _SHA.fullmatch(value):
        _fail(path, f"expected 64 lowercase hex digits, got {_short(value)}")
    return value


def dtype_of(name, path: str):
    string(name, path, 64)
    try:
        return numpy_dtype(name)
    except RelaxpackError as err:
        _fail(path, str(err))


# ---------------------------------------------------------------- manifest structure
TOP_KEYS = {"format_version", "producer", "source_sha256", "metadata", "entry", "inputs", "outputs",
            "dim_ranges", "functions", "func_table", "kernels", "builtins", "constants", "data"}
DATA_KEYS = {"storage", "alignment", "byte_order", "nbytes", "file", "sha256"}
TENSOR_CONST_KEYS = {"dtype", "shape", "offset", "nbytes", "sha256"}
#: format 3: a constant whose values the data section holds in a narrower dtype
STORED_CONST_KEYS = TENSOR_CONST_KEYS | {"stored"}
STRING_CONST_KEYS = {"dtype", "shape", "encoding", "strings"}
FUNCTION_KEYS_V1 = {"name", "params", "num_registers", "instructions", "outputs", "dim_ranges", "attrs"}
FUNCTION_KEYS = FUNCTION_KEYS_V1 | {"results", "spans"}
MAX_SPAN_SOURCES = 1 << 12          # ONNX nodes one instruction came from
PARAM_KEYS = {"name", "kind", "dtype", "ndim", "shape"}
#: map kinds carry their keys' dtype too
MAP_KINDS = ("map", "sequence_map")
PARAM_KINDS = ("tensor", "shape", "prim", "object", "tuple", "sequence", "optional", "optional_sequence", *MAP_KINDS)
#: what an output may be (``attrs.output_kinds``, present when one is not a tensor)
OUTPUT_KINDS = ("tensor", "sequence", "optional", "optional_sequence", *MAP_KINDS)


def check_manifest(m, header_version: int, external: bool) -> None:
    """Every key and type of the manifest, except the bytecode's operands (:func:`check_bytecode`)."""
    obj(m, "(top)", TOP_KEYS)
    if m["format_version"] != header_version:
        _fail("format_version", f"{_short(m['format_version'])} disagrees with the header's {header_version}")
    producer = obj(m["producer"], "producer", {"name", "version"})
    string(producer["name"], "producer.name", 256)
    string(producer["version"], "producer.version", 256)
    if m["source_sha256"] is not None:
        sha256_hex(m["source_sha256"], "source_sha256")
    if not isinstance(m["metadata"], dict):
        _fail("metadata", f"expected an object, got {_short(m['metadata'])}")
    _check_data(m["data"], external)

    functions = lst(m["functions"], "functions", MAX_FUNCTIONS)
    total = 0
    for i, fn in enumerate(functions):
        total += _check_function_shape(fn, f"functions[{i}]", header_version)
        if total > MAX_INSTRUCTIONS:
            _fail("functions", f"more than {MAX_INSTRUCTIONS} instructions in all")
    names = [fn["name"] for fn in functions]
    if len(set(names)) != len(names):
        _fail("functions", "function names are not unique")
    _check_signature(m, functions)

    for i, entry in enumerate(lst(m["func_table"], "func_table", MAX_TABLE)):
        lst(entry, f"func_table[{i}]", 2, 2)
        kind = string(entry[0], f"func_table[{i}][0]", 16)
        if kind not in FUNC_KINDS:
            _fail(f"func_table[{i}]", f"unknown function kind {_short(kind)} (known: {', '.join(FUNC_KINDS)})")
        string(entry[1], f"func_table[{i}][1]")
    for key in ("kernels", "builtins"):
        for i, name in enumerate(lst(m[key], key, MAX_TABLE)):
            string(name, f"{key}[{i}]")
    used_kernels = sorted({n for k, n in m["func_table"] if k in ("kernel", "packed")})
    used_builtins = sorted({n for k, n in m["func_table"] if k == "builtin"})
    if m["kernels"] != used_kernels or m["builtins"] != used_builtins:
        _fail("kernels", "the kernel and builtin lists disagree with the function table")
    missing = sorted({n for k, n in m["func_table"] if k == "vm"} - set(names))
    if missing:
        _fail("func_table", f"names VM functions the archive lacks: [{', '.join(_short(n) for n in missing[:10])}]")

    for i, c in enumerate(lst(m["constants"], "constants", MAX_CONSTANTS)):
        _check_constant(c, f"constants[{i}]", m["data"]["nbytes"], header_version)


def _check_data(d, external: bool) -> None:
    obj(d, "data", DATA_KEYS)
    storage = "external" if external else "linked"
    if d["storage"] != storage:
        _fail("data.storage", f"{_short(d['storage'])} disagrees with the header flags ({storage})")
    if d["alignment"] != ALIGNMENT or d["byte_order"] != "little":
        _fail("data", f"alignment {_short(d['alignment'])} and byte order {_short(d['byte_order'])}, "
                      f"expected {ALIGNMENT} and 'little'")
    integer(d["nbytes"], "data.nbytes", 0, MAX_OFFSET)
    if external:
        name = string(d["file"], "data.file", 255)
        if not name or name in (".", "..") or any(c in name for c in "/\\\0:"):
            _fail("data.file", f"{_short(name)} is not a plain file name")
        sha256_hex(d["sha256"], "data.sha256")
    elif d["file"] is not None or d["sha256"] is not None:
        _fail("data", "a linked archive names no params file")


def _check_function_shape(fn, path: str, version: int) -> int:
    obj(fn, path, FUNCTION_KEYS if version >= 2 else FUNCTION_KEYS_V1)
    string(fn["name"], f"{path}.name")
    params = lst(fn["params"], f"{path}.params", MAX_PARAMS)
    for j, p in enumerate(params):
        check_param(p, f"{path}.params[{j}]")
    nregs = integer(fn["num_registers"], f"{path}.num_registers", 1, MAX_REGISTERS)
    if nregs < len(params):
        _fail(f"{path}.num_registers", f"{nregs} registers cannot hold {len(params)} parameters")
    for j, name in enumerate(lst(fn["outputs"], f"{path}.outputs", MAX_PARAMS)):
        string(name, f"{path}.outputs[{j}]")
    check_dim_ranges(fn["dim_ranges"], f"{path}.dim_ranges")
    if not isinstance(fn["attrs"], dict):
        _fail(f"{path}.attrs", f"expected an object, got {_short(fn['attrs'])}")
    if "output_kinds" in fn["attrs"]:
        kinds = lst(fn["attrs"]["output_kinds"], f"{path}.attrs.output_kinds", len(fn["outputs"]),
                    len(fn["outputs"]))
        for j, kind in enumerate(kinds):
            if kind not in OUTPUT_KINDS:
                _fail(f"{path}.attrs.output_kinds[{j}]", f"unknown output kind {_short(kind)}")
    count = len(lst(fn["instructions"], f"{path}.instructions", MAX_INSTRUCTIONS, 1))
    if version >= 2:
        _check_results(fn, path)   # spans are checked with the bytecode (check_bytecode): they name its pcs
    return count


def _check_results(fn, path: str) -> None:
    """One signature entry per output, named as the output, of the output's kind."""
    results = lst(fn["results"], f"{path}.results", len(fn["outputs"]), len(fn["outputs"]))
    kinds = fn["attrs"].get("output_kinds") or ["tensor"] * len(results)
    for j, (r, name, kind) in enumerate(zip(results, fn["outputs"], kinds)):
        check_param(r, f"{path}.results[{j}]")
        if r["name"] != name or r["kind"] != kind:
            _fail(f"{path}.results[{j}]", f"describes {_short(r['name'])} of kind {_short(r['kind'])}, "
                                          f"but output {j} is {_short(name)} of kind {_short(kind)}")


def _check_spans(spans, path: str, n_instructions: int) -> None:
    """Runs ``[pc, [node, ...]]`` with increasing pcs inside the function."""
    last = -1
    for j, run in enumerate(lst(spans, path, n_instructions)):
        lst(run, f"{path}[{j}]", 2, 2)
        pc = integer(run[0], f"{path}[{j}][0]", 0, n_instructions - 1)
        if pc <= last:
            _fail(f"{path}[{j}][0]", f"pc {pc} does not follow {last}")
        last = pc
        for k, name in enumerate(lst(run[1], f"{path}[{j}][1]", MAX_SPAN_SOURCES)):
            string(name, f"{path}[{j}][1][{k}]")


def check_param(p, path: str) -> None:
    obj(p, path, PARAM_KEYS | ({"key_dtype"} if isinstance(p, dict) and p.get("kind") in MAP_KINDS else set()))
    string(p["name"], f"{path}.name")
    if p["kind"] not in PARAM_KINDS:
        _fail(f"{path}.kind", f"unknown parameter kind {_short(p['kind'])}")
    if p["kind"] in MAP_KINDS:
        dtype_of(p["key_dtype"], f"{path}.key_dtype")
        if p["key_dtype"] != "string" and not p["key_dtype"].startswith(("int", "uint")):
            _fail(f"{path}.key_dtype", f"map keys are integers or strings, not {_short(p['key_dtype'])}")
    if p["dtype"] is not None:
        dtype_of(p["dtype"], f"{path}.dtype")
    ndim = integer(p["ndim"], f"{path}.ndim", -1, MAX_NDIM)
    if p["shape"] is not None:
        shape = lst(p["shape"], f"{path}.shape", MAX_NDIM)
        if ndim != len(shape):
            _fail(f"{path}.shape", f"has {len(shape)} dims but ndim is {ndim}")
        for k, d in enumerate(shape):
            if isinstance(d, str):
                dim_text(d, f"{path}.shape[{k}]")
            else:
                integer(d, f"{path}.shape[{k}]", 0, MAX_DIM)


#: what a dim written as text may contain: names, integers, + - * // % ( ) , and
#: powers by a literal of at most two digits (the IR's dim text bounds them at 64)
_DIM_TEXT = re.compile(r"[A-Za-z0-9_ +\-*/%(),]*")
_POWER = re.compile(r"\*\*\s*(\S+?)(?=[\s)+\-*/%,]|$)")


def dim_text(value, path: str) -> str:
    """A symbolic dim in an input's shape: tools parse these, so they are bounded here."""
    string(value, path, 1024)
    if not _DIM_TEXT.fullmatch(value):
        _fail(path, f"{_short(value)} is not a dim expression")
    for m in _POWER.finditer(value):
        if not m.group(1).isdigit() or int(m.group(1)) > 64:
            _fail(path, f"{_short(value)} raises to a power other than a literal 0..64")
    return value


def check_dim_ranges(ranges, path: str) -> None:
    for j, r in enumerate(lst(ranges, path, MAX_PARAMS * MAX_NDIM)):
        lst(r, f"{path}[{j}]", 3, 3)
        string(r[0], f"{path}[{j}][0]", 1024)
        opt_int(r[1], f"{path}[{j}][1]")
        opt_int(r[2], f"{path}[{j}][2]")


def _check_signature(m, functions) -> None:
    """The top-level inputs/outputs/dim_ranges summarize the entry function."""
    names = [fn["name"] for fn in functions]
    if m["entry"] is None:
        if functions or m["inputs"] != [] or m["outputs"] != [] or m["dim_ranges"] != []:
            _fail("entry", "is null but the archive has functions or a signature")
        return
    string(m["entry"], "entry")
    if m["entry"] not in names:
        _fail("entry", f"names {_short(m['entry'])}, which is not among the functions")
    fn = functions[names.index(m["entry"])]
    for key, mine in (("inputs", fn["params"]), ("outputs", fn["outputs"]), ("dim_ranges", fn["dim_ranges"])):
        if m[key] != mine:
            _fail(key, f"disagrees with function {fn['name']!r}")


def _check_constant(c, path: str, data_nbytes: int, version: int) -> None:
    if isinstance(c, dict) and c.get("dtype") == "string":
        obj(c, path, STRING_CONST_KEYS)
        count = _shape_size(c["shape"], path)
        strings = lst(c["strings"], f"{path}.strings", MAX_MANIFEST_BYTES)
        if len(strings) != count:
            _fail(f"{path}.strings", f"has {len(strings)} entries for shape {c['shape']}")
        if c["encoding"] not in ("utf-8", "base64"):
            _fail(f"{path}.encoding", f"unknown string encoding {_short(c['encoding'])}")
        for k, s in enumerate(strings):
            string(s, f"{path}.strings[{k}]", MAX_MANIFEST_BYTES)
        return
    obj(c, path, STORED_CONST_KEYS if version >= 3 and isinstance(c, dict) and "stored" in c
        else TENSOR_CONST_KEYS)
    dtype = dtype_of(c["dtype"], f"{path}.dtype")
    count = _shape_size(c["shape"], path)
    offset = integer(c["offset"], f"{path}.offset", 0, MAX_OFFSET)
    nbytes = integer(c["nbytes"], f"{path}.nbytes", 0, MAX_OFFSET)
    sha256_hex(c["sha256"], f"{path}.sha256")
    held, held_name = dtype, c["dtype"]
    if "stored" in c:
        held, held_name = _stored_dtype(c["stored"], dtype, c["dtype"], f"{path}.stored"), c["stored"]
    if count * held.itemsize != nbytes:
        _fail(path, f"shape {c['shape']} of {held_name} needs {count * held.itemsize} bytes, "
                    f"nbytes says {nbytes}")
    if offset % ALIGNMENT:
        _fail(f"{path}.offset", f"{offset} is not aligned to {ALIGNMENT}")
    if offset + nbytes > data_nbytes:
        _fail(path, f"range {offset}..{offset + nbytes} lies outside the {data_nbytes}-byte data section")


def _stored_dtype(name, dtype, dtype_name: str, path: str):
    """The dtype a constant of ``dtype`` says its values are stored in: one of those the writer
    chooses from (:func:`.constant_storage.candidates`)."""
    stored = dtype_of(name, path)
    if stored not in candidates(dtype):
        _fail(path, f"{_short(name)} is not a dtype {dtype_name} constants are stored in")
    return stored


def _shape_size(shape, path: str) -> int:
    count, span = 1, 1   # span: the product numpy checks, zero dims counted as one
    for k, d in enumerate(lst(shape, f"{path}.shape", MAX_NDIM)):
        count *= integer(d, f"{path}.shape[{k}]", 0, MAX_DIM)
        span *= max(d, 1)
        if span > MAX_ELEMENTS:
            _fail(f"{path}.shape", f"{_short(shape)} is larger than numpy arrays can be")
    return count


def check_ranges(constants) -> None:
    """No two constant ranges overlap unless they are the same range (deduplicated content)."""
    ranges = sorted({(c["offset"], c["nbytes"]) for c in constants if c["dtype"] != "string" and c["nbytes"]})
    end = 0
    for offset, nbytes in ranges:
        if offset < end:
            _fail("constants", f"byte ranges overlap at offset {offset}")
        end = offset + nbytes


# ---------------------------------------------------------------- bytecode
def check_bytecode(m) -> None:
    """Every operand in range: registers, constants, function-table entries, jump targets."""
    n_table, n_consts = len(m["func_table"]), len(m["constants"])
    for i, fn in enumerate(m["functions"]):
        path = f"functions[{i}] ({_short(fn['name'])})"
        nregs, instrs = fn["num_registers"], fn["instructions"]
        n = len(instrs)
        for pc, ins in enumerate(instrs):
            _check_instruction(ins, f"{path}.instructions[{pc}]", pc, n, nregs, n_table, n_consts)
            _check_workspace(ins, f"{path}.instructions[{pc}]", m["func_table"])
        if "spans" in fn:
            _check_spans(fn["spans"], f"{path}.spans", n)


def _check_workspace(ins, path: str, table) -> None:
    """A ``workspace`` keyword (planned kernel scratch) is a register and goes to a kernel."""
    if ins[0] != "call":
        return
    for name, operand in ins[4]:
        if name != "workspace":
            continue
        if table[ins[2]][0] != "kernel":
            _fail(f"{path} kwargs", f"workspace is passed to {table[ins[2]][0]} {_short(table[ins[2]][1])}, "
                                    f"not a kernel")
        if operand[0] != REG:
            _fail(f"{path} kwargs", f"workspace must be a register (a planned buffer), got {_short(operand)}")


def _check_instruction(ins, path: str, pc: int, n: int, nregs: int, n_table: int, n_consts: int) -> None:
    if not isinstance(ins, list) or not ins or not isinstance(ins[0], str):
        _fail(path, f"expected [kind, ...], got {_short(ins)}")
    kind = ins[0]
    sizes = {"call": 5, "ret": 2, "goto": 2, "if": 3}
    if kind not in sizes:
        _fail(path, f"unknown instruction {_short(kind)}")
    lst(ins, path, sizes[kind], sizes[kind])
    falls_through = kind in ("call", "if")
    if kind == "call":
        dst = integer(ins[1], f"{path} dst", NO_DST, MAX_REGISTERS)
        if dst != NO_DST:
            _register(dst, f"{path} dst", nregs)
        integer(ins[2], f"{path} function", 0, n_table - 1)
        for j, a in enumerate(lst(ins[3], f"{path} args", MAX_OPERANDS)):
            _operand(a, f"{path} args[{j}]", nregs, n_table, n_consts)
        names = set()
        for j, kw in enumerate(lst(ins[4], f"{path} kwargs", MAX_OPERANDS)):
            lst(kw, f"{path} kwargs[{j}]", 2, 2)
            names.add(string(kw[0], f"{path} kwargs[{j}] name", 256))
            _operand(kw[1], f"{path} kwargs[{j}]", nregs, n_table, n_consts)
        if len(names) != len(ins[4]):
            _fail(f"{path} kwargs", "keyword names repeat")
    elif kind == "ret":
        _register(ins[1], f"{path} src", nregs)
    elif kind == "goto":
        _jump(ins[1], path, pc, n)
    else:
        _register(ins[1], f"{path} cond", nregs)
        _jump(ins[2], path, pc, n)
    if falls_through and pc + 1 >= n:
        _fail(path, "the last instruction must be ret or goto (control would run off the function's end)")


def _register(value, path: str, nregs: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < nregs:
        _fail(path, f"register {_short(value)} out of range 0..{nregs - 1}")


def _jump(offset, path: str, pc: int, n: int) -> None:
    if isinstance(offset, bool) or not isinstance(offset, int) or not 0 < offset < n - pc:
        _fail(path, f"jump by {_short(offset)} from {pc} must go forward to an instruction in 0..{n - 1}")


def _operand(op, path: str, nregs: int, n_table: int, n_consts: int) -> None:
    lst(op, path, 2, 2)
    kind, value = op
    if kind == REG:
        _register(value, path, nregs)
    elif kind == CONST:
        integer(value, f"{path} constant", 0, n_consts - 1)
    elif kind == FUNC:
        integer(value, f"{path} function", 0, n_table - 1)
    elif kind != IMM:
        _fail(path, f"unknown operand kind {_short(kind)}")


def check_names(m, kernels, builtins, producer: str, runtime: str) -> None:
    """Every kernel and builtin the archive calls exists in this runtime; all missing ones in one error."""
    missing_k = [n for n in m["kernels"] if n not in kernels]
    missing_b = [n for n in m["builtins"] if n not in builtins]
    if missing_k or missing_b:
        parts = ([f"kernels {missing_k}"] if missing_k else []) + ([f"builtins {missing_b}"] if missing_b else [])
        raise ArchiveError(f"the archive calls {' and '.join(parts)}, which this runtime "
                           f"(relaxpack {runtime}) lacks; it was built by {producer}")


def check_workspaces(m, kernels) -> None:
    """Every kernel the archive hands a ``workspace`` takes one (``Kernel.takes_workspace``)."""
    table = m["func_table"]
    wrong = sorted({table[ins[2]][1] for fn in m["functions"] for ins in fn["instructions"]
                    if ins[0] == "call" and any(name == "workspace" for name, _ in ins[4])
                    and not kernels[table[ins[2]][1]].takes_workspace})
    if wrong:
        raise ArchiveError(f"the archive passes a workspace to kernels {wrong}, which in this runtime take none")


__all__ = ["ALIGNMENT", "FORMAT_VERSION", "HEADER", "MAGIC", "PARAMS_MAGIC", "Header", "align",
           "check_bytecode", "check_header", "check_manifest", "check_names", "check_workspaces", "check_params_header",
           "check_ranges", "decode_manifest"]
