"""The deployment archive: round trips (in this process and in a fresh one
that imports only the runtime), byte-identical saves, zero-copy read-only
constants, external params, and the loader's rejection of damaged files."""

import hashlib
import json
import mmap
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import relaxpack
from relaxpack.errors import ArchiveError
from relaxpack.runtime import Executable, FuncEntry, VirtualMachine, load
from relaxpack.runtime.bytecode import Call, Goto, Ret, VMFunction

HEADER = struct.Struct("<8sIIQ32sQ")
rng = np.random.default_rng(0)


@pytest.fixture(scope="module")
def cnn():
    from relaxpack.examples.onnx_models import small_cnn
    exe = relaxpack.build(relaxpack.from_onnx(small_cnn()), opt_level=0)  # a stable layout for the format tests
    return exe, {"input": rng.standard_normal((2, 3, 32, 32)).astype(np.float32)}


@pytest.fixture(scope="module")
def transformer():
    from relaxpack.examples.onnx_models import transformer_block_onnx
    exe = relaxpack.build(relaxpack.from_onnx(transformer_block_onnx()), opt_level=0)
    return exe, {"x": rng.standard_normal((2, 7, 32)).astype(np.float32)}


@pytest.fixture(scope="module")
def models(cnn, transformer):
    return {"cnn": cnn, "transformer": transformer}


def tuple_of_constants(consts, metadata=None) -> Executable:
    """An executable whose main returns its constants as a tuple."""
    fn = VMFunction("main", (), 1, (Call(0, 0, tuple(("c", i) for i in range(len(consts)))), Ret(0)),
                    outputs=("consts",))
    return Executable({"main": fn}, [FuncEntry("builtin", "vm.builtin.make_tuple")], list(consts),
                      metadata or {"stage": "lower"})


def parts(path):
    data = Path(path).read_bytes()
    magic, version, flags, length, digest, offset = HEADER.unpack(data[:64])
    return data, json.loads(data[64:64 + length]), (magic, version, flags, length, digest, offset)


def params_of(path) -> Path:
    """The params file the archive at ``path`` names (``<name>.<digest>.params``)."""
    return Path(path).parent / parts(path)[1]["data"]["file"]


def reseal(path, edit):
    """Rewrite the archive's manifest with ``edit`` (of the parsed manifest, or of its bytes when
    ``edit`` takes bytes), recomputing its length, checksum and the data offset."""
    data, manifest, (magic, version, flags, length, _, offset) = parts(path)
    raw = data[64:64 + length]
    if getattr(edit, "raw", False):
        new = edit(raw)
    else:
        edit(manifest)
        new = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
    new_offset = -(-(64 + len(new)) // 64) * 64
    header = HEADER.pack(magic, version, flags, len(new), hashlib.sha256(new).digest(), new_offset)
    Path(path).write_bytes(header + new + bytes(new_offset - 64 - len(new)) + data[offset:])


def raw_edit(fn):
    fn.raw = True
    return fn


def patch(path, offset, new: bytes):
    data = bytearray(Path(path).read_bytes())
    data[offset:offset + len(new)] = new
    Path(path).write_bytes(bytes(data))


def bytecode(exe):
    # JSON, not as_text(): an immediate's lists read back as tuples (bytecode.py's convention)
    return json.dumps([fn.to_json() for fn in exe.functions.values()]), exe.func_table


def assert_outputs_equal(a, b):
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
        assert a[k].dtype == b[k].dtype


# ---------------------------------------------------------------- round trips
@pytest.mark.parametrize("params", ["linked", "external"])
@pytest.mark.parametrize("model", ["cnn", "transformer"])
def test_round_trip_runs_identically(models, model, params, tmp_path):
    exe, inputs = models[model]
    exe.save(tmp_path / "m.rpk", params=params)
    loaded = load(tmp_path / "m.rpk")
    assert bytecode(loaded) == bytecode(exe)
    assert loaded.metadata == exe.metadata
    assert loaded.signature() == exe.signature()
    assert_outputs_equal(VirtualMachine(loaded).run(inputs), VirtualMachine(exe).run(inputs))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.rpk"] + ([params_of(tmp_path / "m.rpk").name]
                                                                      if params == "external" else [])


FRESH = """
import sys
import numpy as np
from relaxpack.runtime import VirtualMachine, load
exe = load(sys.argv[1])
outputs = VirtualMachine(exe).run(dict(np.load(sys.argv[2])))
np.savez(sys.argv[3], **outputs)
heavy = ("onnx", "onnxruntime", "typer", "relaxpack.ir", "relaxpack.ops", "relaxpack.passes",
         "relaxpack.importers", "relaxpack.packager", "relaxpack.vm_build")
print(sorted(m for m in heavy if m in sys.modules))
"""


@pytest.mark.parametrize("model, params", [("cnn", "linked"), ("transformer", "external")])
def test_round_trip_in_a_fresh_process_that_imports_only_the_runtime(models, model, params, tmp_path):
    exe, inputs = models[model]
    exe.save(tmp_path / "m.rpk", params=params)
    np.savez(tmp_path / "in.npz", **inputs)
    out = subprocess.run([sys.executable, "-c", FRESH, str(tmp_path / "m.rpk"), str(tmp_path / "in.npz"),
                          str(tmp_path / "out.npz")], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    assert_outputs_equal(dict(np.load(tmp_path / "out.npz")), VirtualMachine(exe).run(inputs))


@pytest.mark.parametrize("params", ["linked", "external"])
def test_the_same_executable_gives_byte_identical_archives(transformer, params, tmp_path):
    exe, _ = transformer
    for sub in ("a", "b"):
        (tmp_path / sub).mkdir()
        exe.save(tmp_path / sub / "m.rpk", params=params)
    load(tmp_path / "a" / "m.rpk").save(tmp_path / "c.rpk", params=params)   # and after a round trip
    assert (tmp_path / "a" / "m.rpk").read_bytes() == (tmp_path / "b" / "m.rpk").read_bytes()
    if params == "external":
        a = params_of(tmp_path / "a" / "m.rpk").read_bytes()
        assert a == params_of(tmp_path / "b" / "m.rpk").read_bytes() == params_of(tmp_path / "c.rpk").read_bytes()
    if params == "linked":
        assert (tmp_path / "c.rpk").read_bytes() == (tmp_path / "a" / "m.rpk").read_bytes()


def mapping_of(array):
    """The object at the end of ``array``'s base chain (through a memoryview to what it views)."""
    base = array
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    return base.obj if isinstance(base, memoryview) else base


@pytest.mark.parametrize("params", ["linked", "external"])
@pytest.mark.parametrize("private_max", [0, None], ids=["mapped", "small_read"])
def test_constants_are_read_only_views_of_the_mapped_file(cnn, params, private_max, tmp_path, monkeypatch):
    # (a file of at most PRIVATE_MAX_BYTES is read, not mapped: its constants view the bytes read)
    from relaxpack.runtime import archive
    if private_max is not None:
        monkeypatch.setattr(archive, "PRIVATE_MAX_BYTES", private_max)
    exe, _ = cnn
    exe.save(tmp_path / "m.rpk", params=params)
    loaded = load(tmp_path / "m.rpk")
    assert loaded.archive["mmap"] is (private_max is not None)
    for original, c in zip(exe.constants, loaded.constants):
        assert isinstance(mapping_of(c), mmap.mmap if private_max is not None else bytes)
        assert not c.flags.writeable
        with pytest.raises(ValueError):
            c[...] = 0
        np.testing.assert_array_equal(c, original)


def test_file_layout(cnn, tmp_path):
    exe, _ = cnn
    exe.save(tmp_path / "m.rpk")
    data, manifest, (magic, version, flags, length, digest, offset) = parts(tmp_path / "m.rpk")
    assert (magic, version, flags) == (b"\x89RPK\r\n\x1a\n", 2, 0)
    raw = data[64:64 + length]
    assert hashlib.sha256(raw).digest() == digest and offset == -(-(64 + length) // 64) * 64
    assert raw == json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
    assert set(manifest) == {"format_version", "producer", "source_sha256", "metadata", "entry", "inputs",
                             "outputs", "dim_ranges", "functions", "func_table", "kernels", "builtins",
                             "constants", "data"}
    assert manifest["producer"] == {"name": "relaxpack", "version": relaxpack.__version__}
    assert manifest["inputs"] == [{"name": "input", "kind": "tensor", "dtype": "float32", "ndim": 4,
                                   "shape": ["batch", 3, 32, 32]}]
    assert manifest["outputs"] == ["logits"] and "nn.conv" in manifest["kernels"]
    main = manifest["functions"][0]
    assert main["results"] == [{"name": "logits", "kind": "tensor", "dtype": "float32", "ndim": 2,
                                "shape": ["batch", 10]}]
    assert ["/conv_3/Conv"] in [sources for _, sources in main["spans"]]   # the ONNX node of each instruction
    assert len(data) == offset + manifest["data"]["nbytes"]
    for c, array in zip(manifest["constants"], exe.constants):
        assert c["offset"] % 64 == 0 and (offset + c["offset"]) % 64 == 0
        assert data[offset + c["offset"]:][:c["nbytes"]] == array.tobytes()
        assert c["sha256"] == hashlib.sha256(array.tobytes()).hexdigest()


def test_source_hash_and_metadata_are_kept(tmp_path):
    meta = {"stage": "lower", "source_sha256": "ab" * 32, "options": {"opt_level": 2}}
    tuple_of_constants([np.ones(2, np.float32)], meta).save(tmp_path / "m.rpk")
    _, manifest, _ = parts(tmp_path / "m.rpk")
    assert manifest["source_sha256"] == "ab" * 32
    assert load(tmp_path / "m.rpk").metadata == meta


def test_equal_constants_share_one_range(tmp_path):
    w = rng.standard_normal((16, 16)).astype(np.float32)
    exe = tuple_of_constants([w, np.float32(1.5) * np.ones(3, np.float32), w.copy(), w.view(np.int32)])
    exe.save(tmp_path / "m.rpk")
    _, manifest, _ = parts(tmp_path / "m.rpk")
    offsets = [c["offset"] for c in manifest["constants"]]
    assert offsets[0] == offsets[2] == offsets[3] != offsets[1]    # equal bytes, whatever the dtype
    assert manifest["data"]["nbytes"] == 1024 + 12
    consts = load(tmp_path / "m.rpk").constants
    assert np.shares_memory(consts[0], consts[2]) and consts[3].dtype == np.int32
    np.testing.assert_array_equal(consts[3], w.view(np.int32))


def test_constants_of_every_dtype_round_trip(tmp_path):
    import ml_dtypes
    consts = [np.arange(6, dtype=d).reshape(2, 3) for d in
              ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32",
               "float64", "complex64", "complex128")]
    consts += [np.array([True, False]), np.array(3.5, np.float32), np.zeros((0, 5), np.float32),
               np.arange(4, dtype=">f4"), np.arange(12, dtype=np.float32).reshape(3, 4).T,
               np.arange(4).astype(ml_dtypes.bfloat16), np.arange(4).astype(ml_dtypes.float8_e4m3fn),
               np.arange(4).astype(ml_dtypes.int4),
               np.array([["a", "b\u00e9"], ["", "\U0001f600"]], dtype=object),
               np.array([b"\x00\xff", b""], dtype=object), np.array(["x", "yz"])]
    exe = tuple_of_constants(consts)
    exe.save(tmp_path / "m.rpk")
    loaded = load(tmp_path / "m.rpk")
    (out,) = VirtualMachine(loaded).run({}).values()
    for original, array, constant in zip(consts, out, loaded.constants):
        assert array.shape == original.shape
        assert array.dtype == (object if original.dtype.kind == "U" else original.dtype.newbyteorder("="))
        assert array.tolist() == original.tolist()
        assert not constant.flags.writeable     # the output is the caller's copy, the constant stays read-only


# ---------------------------------------------------------------- external params
def test_external_params_keep_the_archive_small(transformer, tmp_path):
    exe, _ = transformer
    exe.save(tmp_path / "m.rpk", params="external")
    data, manifest, (_, _, flags, _, _, offset) = parts(tmp_path / "m.rpk")
    side = params_of(tmp_path / "m.rpk").read_bytes()
    assert flags == 1 and len(data) == offset
    assert manifest["data"]["sha256"] == hashlib.sha256(side).hexdigest()
    assert manifest["data"]["file"] == f"m.rpk.{manifest['data']['sha256'][:16]}.params"
    assert side[:8] == b"\x89RPP\r\n\x1a\n" and len(side) == 64 + manifest["data"]["nbytes"]


def test_external_params_errors(transformer, cnn, tmp_path):
    exe, _ = transformer
    exe.save(tmp_path / "m.rpk", params="external")
    params = params_of(tmp_path / "m.rpk")
    good = params.read_bytes()
    params.unlink()
    with pytest.raises(ArchiveError, match=r"params file .*m\.rpk\.[0-9a-f]{16}\.params: cannot read the file"):
        load(tmp_path / "m.rpk")
    cnn[0].save(tmp_path / "other.rpk", params="external")
    params.write_bytes(params_of(tmp_path / "other.rpk").read_bytes())
    with pytest.raises(ArchiveError, match="data bytes|does not belong to the archive"):
        load(tmp_path / "m.rpk")
    params.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))
    with pytest.raises(ArchiveError, match="does not belong to the archive"):
        load(tmp_path / "m.rpk")
    params.write_bytes(good[:100])
    with pytest.raises(ArchiveError, match="data bytes"):
        load(tmp_path / "m.rpk")


# ---------------------------------------------------------------- header and checksum errors
@pytest.fixture
def archive(cnn, tmp_path):
    cnn[0].save(tmp_path / "m.rpk")
    return tmp_path / "m.rpk"


def test_a_newer_format_names_both_versions(archive):
    patch(archive, 8, struct.pack("<I", 4))
    with pytest.raises(ArchiveError, match=r"archive format 4 is newer than this runtime's 3; upgrade relaxpack$"):
        load(archive)
    patch(archive, 8, struct.pack("<I", 0))
    with pytest.raises(ArchiveError, match="archive format 0 is not supported"):
        load(archive)


@pytest.mark.parametrize("offset, new, message", [
    (0, b"PK\x03\x04", r"not a relaxpack archive \(magic b'PK\\x03\\x04"),
    (12, struct.pack("<I", 4), "unknown header flags 0x4"),
    (16, struct.pack("<Q", 2**63), "manifest length 9223372036854775808 outside"),
    (16, struct.pack("<Q", 0), "manifest length 0 outside"),
    (24, bytes(32), "manifest checksum mismatch"),
    (56, struct.pack("<Q", 2**64 - 1), "data section offset 18446744073709551615, expected"),
    (100, b"!", "manifest checksum mismatch"),
])
def test_damaged_headers_are_rejected(archive, offset, new, message):
    patch(archive, offset, new)
    with pytest.raises(ArchiveError, match=message) as info:
        load(archive)
    assert str(info.value).startswith(str(archive)) and "\n" not in str(info.value)


def test_truncated_padded_and_corrupt_files_are_rejected(archive, tmp_path):
    data = archive.read_bytes()
    for size, message in [(0, "0 bytes, shorter than the 64-byte archive header"),
                          (63, "63 bytes, shorter"), (64, "runs past the end"),
                          (len(data) - 1, "truncated or padded")]:
        archive.write_bytes(data[:size])
        with pytest.raises(ArchiveError, match=message):
            load(archive)
    archive.write_bytes(data + b"\0")
    with pytest.raises(ArchiveError, match="truncated or padded"):
        load(archive)
    archive.write_bytes(data[:-1] + bytes([data[-1] ^ 0x40]))
    with pytest.raises(ArchiveError, match=r"constant 13: checksum mismatch"):
        load(archive)


def test_only_regular_files_are_read(tmp_path):
    with pytest.raises(ArchiveError, match="cannot read the file"):
        load(tmp_path / "missing.rpk")
    with pytest.raises(ArchiveError, match="not a regular file"):
        load(tmp_path)
    if hasattr(os, "mkfifo"):   # opening a FIFO would block until a writer came
        os.mkfifo(tmp_path / "fifo")
        with pytest.raises(ArchiveError, match="not a regular file"):
            load(tmp_path / "fifo")


def test_every_header_bit_flip_is_rejected(archive):
    data = archive.read_bytes()
    for bit in range(64 * 8):
        flipped = bytearray(data)
        flipped[bit // 8] ^= 1 << (bit % 8)
        archive.write_bytes(bytes(flipped))
        with pytest.raises(ArchiveError):
            load(archive)


# ---------------------------------------------------------------- manifest validation
def rename_kernels(m):
    for entry in m["func_table"]:
        if entry[1] in ("nn.conv", "nn.relu"):
            entry[1] = "fancy." + entry[1]
    m["kernels"] = sorted({n for k, n in m["func_table"] if k in ("kernel", "packed")})


def first_call(m, kind="call"):
    return next(i for i in m["functions"][0]["instructions"] if i[0] == kind)


def set_in(path, value):
    def edit(m):
        node = m
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    return edit


MAIN = ("functions", 0)
MANIFEST_ERRORS = [
    (rename_kernels, r"the archive calls kernels \['fancy\.nn\.conv', 'fancy\.nn\.relu'\], which this runtime"),
    (lambda m: m["func_table"].__setitem__(0, ["builtin", "vm.builtin.nope"]),
     "the kernel and builtin lists disagree with the function table"),
    (set_in(MAIN + ("num_registers",), 5), r"register \d+ out of range 0\.\.4"),
    (set_in(MAIN + ("num_registers",), "23"), "num_registers: expected an int, got '23'"),
    (set_in(MAIN + ("num_registers",), 0), "num_registers: 0 outside 1"),
    (lambda m: first_call(m)[3].append(["c", 99]), "constant: 99 outside 0..13"),
    (lambda m: first_call(m)[3].append(["f", -1]), r"function: -1 outside 0\.\.\d+"),
    (lambda m: first_call(m)[3].append(["x", 1]), "unknown operand kind 'x'"),
    (lambda m: first_call(m).__setitem__(2, 999), r"function: 999 outside 0\.\.\d+"),
    (lambda m: first_call(m).__setitem__(0, "jump"), "unknown instruction 'jump'"),
    (lambda m: m["functions"][0]["instructions"].pop(), "the last instruction must be ret or goto"),
    (lambda m: m["functions"][0]["instructions"].insert(3, ["goto", -2]), "jump by -2 from 3 must go forward"),
    (lambda m: m["functions"][0]["instructions"].insert(3, ["goto", 0]), "jump by 0 from 3 must go forward"),
    (lambda m: m["functions"][0]["instructions"].insert(3, ["if", 0, 1000]), "jump by 1000 from 3"),
    (set_in(("constants", 1, "offset"), 0), "byte ranges overlap at offset 0"),
    (set_in(("constants", 1, "offset"), 4), "offset: 4 is not aligned to 64"),
    (set_in(("constants", 13, "offset"), 10**6), "lies outside the"),
    (set_in(("constants", 0, "dtype"), "float33"), r"dtype: unknown dtype 'float33'"),
    (set_in(("constants", 0, "shape"), [8, 3, 3, 4]), r"needs 1152 bytes, nbytes says 864"),
    (set_in(("constants", 0, "shape"), [8, 3, 3, -3]), r"shape\[3\]: -3 outside"),
    (set_in(("constants", 0, "shape"), [0] + [2**40] * 4), "larger than numpy arrays can be"),
    (set_in(("constants", 0, "sha256"), "0" * 64), "constant 0: checksum mismatch"),
    (lambda m: m["constants"][0].pop("sha256"), r"keys differ from the format's: missing \['sha256'\]"),
    (lambda m: m.__setitem__("extra", 1), r"unexpected \['extra'\]"),
    (set_in(("format_version",), 3), "format_version: 3 disagrees with the header's 2"),
    (lambda m: m["functions"][0].pop("results"), r"keys differ from the format's: missing \['results'\]"),
    (set_in(MAIN + ("results", 0, "name"), "other"), r"results\[0\]: describes 'other' of kind 'tensor', but output 0 is 'logits'"),
    (set_in(MAIN + ("results", 0, "shape"), ["batch"]), r"results\[0\].shape: has 1 dims but ndim is 2"),
    (lambda m: m["functions"][0]["results"].append(m["functions"][0]["results"][0]), r"results: has 2 entries"),
    (set_in(MAIN + ("spans", 0, 0), 10**6), r"spans\[0\]\[0\]: 1000000 outside"),
    (lambda m: m["functions"][0]["spans"].insert(1, m["functions"][0]["spans"][0]), r"spans\[1\]\[0\]: pc \d+ does not follow"),
    (set_in(MAIN + ("spans", 0, 1), [7]), r"spans\[0\]\[1\]\[0\]: expected a string"),
    (set_in(("func_table", 3), ["closure", "x"]), "unknown function kind 'closure'"),
    (lambda m: m["func_table"].append(["vm", "helper"]), r"names VM functions the archive lacks: \['helper'\]"),
    (set_in(("entry",), "other"), "entry: names 'other', which is not among the functions"),
    (set_in(("inputs",), []), "inputs: disagrees with function 'main'"),
    (set_in(("data", "storage"), "external"), r"disagrees with the header flags \(linked\)"),
    (set_in(MAIN + ("params", 0, "shape"), ["batch", 3]), "has 2 dims but ndim is 4"),
    (set_in(MAIN + ("params", 0, "dtype"), ["float32"]), r"dtype: expected a string"),
    (set_in(MAIN + ("params", 0, "kind"), "map"), r"keys differ from the format's: missing \['key_dtype'\]"),
    (lambda m: m["functions"][0]["params"][0].update(kind="map", key_dtype="float32"),
     r"key_dtype: map keys are integers or strings, not 'float32'"),
    (set_in(MAIN + ("params", 0, "key_dtype"), "int64"), r"unexpected \['key_dtype'\]"),
    (set_in(("metadata",), []), "metadata: expected an object"),
    (set_in(("source_sha256",), "xyz"), "source_sha256: expected 64 lowercase hex digits"),
    (raw_edit(lambda raw: raw.replace(b'{"builtins"', b'{"entry":"main","builtins"', 1)),
     r"duplicate key\(s\) \['entry'\]"),
    (raw_edit(lambda raw: raw[:-1]), "manifest is not valid JSON"),
    (raw_edit(lambda raw: b"\xff" + raw), "manifest is not valid JSON"),
    (raw_edit(lambda raw: b"[]"), "manifest must be a JSON object"),
    # (Python 3.11's json parser runs out of recursion here, 3.13's does not: then the depth check says it)
    (raw_edit(lambda raw: raw.replace(b'"metadata":{', b'"metadata":{"deep":' + b"[" * 5000 + b"]" * 5000 + b",", 1)),
     "nested too deeply|nested deeper than 96"),
    (raw_edit(lambda raw: raw.replace(b'"metadata":{', b'"metadata":{"deep":' + b"[" * 200 + b"]" * 200 + b",", 1)),
     "nested deeper than 96"),
    (raw_edit(lambda raw: raw.replace(b'"metadata":{', b'"metadata":{"big":' + b"7" * 10000 + b",", 1)),
     "integer of 10000 digits"),
    (raw_edit(lambda raw: raw.replace(b'"metadata":{', b'"metadata":{"many":[' + b"[]," * 2**22 + b"[]],", 1)),
     "more than 4194304"),
]


@pytest.mark.parametrize("edit, message", MANIFEST_ERRORS)
def test_malformed_manifests_are_rejected_with_the_field_named(archive, edit, message):
    reseal(archive, edit)
    with pytest.raises(ArchiveError, match=message) as info:
        load(archive)
    assert "\n" not in str(info.value)


def test_a_linked_archive_names_no_params_file_and_an_external_one_only_a_plain_name(archive, transformer, tmp_path):
    reseal(archive, set_in(("data", "file"), "m.rpk.params"))
    with pytest.raises(ArchiveError, match="a linked archive names no params file"):
        load(archive)
    transformer[0].save(tmp_path / "t.rpk", params="external")
    for name in ("../t.rpk.params", "/etc/passwd", "..", ""):
        reseal(tmp_path / "t.rpk", set_in(("data", "file"), name))
        with pytest.raises(ArchiveError, match="is not a plain file name"):
            load(tmp_path / "t.rpk")


def test_a_forward_jump_program_round_trips(tmp_path):
    # ``if`` and ``goto`` as codegen emits them for a branch
    from relaxpack.ir import BlockBuilder, If, TensorStructInfo, Var, sym
    from relaxpack.ops import make_call
    n = sym("n")
    cond, x = Var("c", TensorStructInfo((), "bool")), Var("x", TensorStructInfo((n,), "float32"))
    bb = BlockBuilder()
    with bb.function("main", [cond, x]):
        bb.begin_scope()
        then = bb.end_scope(bb.emit(make_call("exp", x)))
        bb.begin_scope()
        other = bb.end_scope(bb.emit(make_call("negative", x)))
        bb.emit_func_output(bb.emit(If(cond, then, other), "out"))
    exe = relaxpack.build(bb.get())
    exe.save(tmp_path / "if.rpk")
    vm = VirtualMachine(load(tmp_path / "if.rpk"))
    xs = np.arange(3, dtype=np.float32)
    np.testing.assert_allclose(vm.run({"c": np.array(True), "x": xs})["out"], np.exp(xs))
    np.testing.assert_array_equal(vm.run({"c": np.array(False), "x": xs})["out"], -xs)


# ---------------------------------------------------------------- saving errors
def test_what_cannot_be_stored_is_refused_at_save(cnn, tmp_path):
    with pytest.raises(ArchiveError, match=r"params must be one of \('linked', 'external'\)"):
        cnn[0].save(tmp_path / "m.rpk", params="inline")
    with pytest.raises(ArchiveError, match="not plain JSON data"):
        tuple_of_constants([], {"when": object()}).save(tmp_path / "m.rpk")
    with pytest.raises(ArchiveError, match="object array that does not hold only strings"):
        tuple_of_constants([np.array([1, "a"], dtype=object)]).save(tmp_path / "m.rpk")
    with pytest.raises(ArchiveError, match="has dtype datetime64"):
        tuple_of_constants([np.array(["2020-01-01"], dtype="datetime64[D]")]).save(tmp_path / "m.rpk")
    loop = VMFunction("main", (), 1, (Call(0, 0, ()), Goto(-1)))
    with pytest.raises(ArchiveError, match="cannot save: .*jump by -1 from 1 must go forward"):
        Executable({"main": loop}, [FuncEntry("builtin", "vm.builtin.make_tuple")], [np.ones(3)]).save(
            tmp_path / "m.rpk", params="external")
    assert not list(tmp_path.iterdir())   # no partial file left behind


# ---------------------------------------------------------------- format 1
FORMAT1 = Path(__file__).parent / "data" / "format1_block.rpk"


def test_a_format_1_archive_still_loads_and_runs():
    """data/format1_block.rpk: the bundled transformer block (seq in 1..64) as relaxpack 0.1.0 wrote it
    before format 2 (commit 58190eb); it runs as the model does, its outputs without dtype or shape."""
    from relaxpack.check import onnxruntime_session
    from relaxpack.examples.onnx_models import transformer_block_onnx

    exe = load(FORMAT1)
    assert exe.archive["format_version"] == 1
    main = exe.function("main")
    assert main.results == () and main.spans == ()
    (info,) = main.output_info()
    assert (info.name, info.kind, info.dtype, info.shape) == ("y", "tensor", None, None)
    x = rng.standard_normal((2, 9, 32)).astype(np.float32)
    (want,) = onnxruntime_session(transformer_block_onnx()).run(None, {"x": x})
    np.testing.assert_allclose(VirtualMachine(exe).run({"x": x})["y"], want, rtol=1e-4, atol=1e-5)


def test_a_format_1_archive_saved_again_is_format_2(tmp_path):
    load(FORMAT1).save(tmp_path / "again.rpk")
    again = load(tmp_path / "again.rpk")
    assert again.archive["format_version"] == 2
    assert again.function("main").output_info()[0].name == "y"
