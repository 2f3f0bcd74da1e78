"""Constants stored narrower (``constants="compact"``, archive format 3): which dtype each
constant is stored in, that loading gives back the same bytes, the mapped default unchanged,
and the loader's refusal of a ``stored`` dtype the writer never chooses."""

import mmap
import struct
import sys

import numpy as np
import pytest

import relaxpack
from relaxpack.errors import ArchiveError
from relaxpack.runtime import VirtualMachine, load, load_bytes, mapped_pages
from relaxpack.runtime.archive import archive_bytes
from relaxpack.runtime.constant_storage import MIN_BYTES, candidates, narrowest, widened
from tests.runtime.test_archive import mapping_of, parts, reseal, tuple_of_constants

rng = np.random.default_rng(3)
N = 4096      # values: every test array but the small one has at least MIN_BYTES bytes


def bits(value: int) -> np.float32:
    return np.array([value], np.uint32).view(np.float32)[0]


def test_candidates_are_narrower_and_keep_integers_integers():
    assert candidates(np.float32) == tuple(map(np.dtype, ("int8", "uint8", "int16", "uint16", "float16")))
    assert candidates(np.float64)[-2:] == (np.dtype(np.int32), np.dtype(np.float32))
    assert candidates(np.int64) == tuple(map(np.dtype, ("int8", "uint8", "int16", "uint16", "int32", "uint32")))
    assert candidates(np.uint32) == (np.dtype(np.uint8), np.dtype(np.uint16))
    assert candidates(np.float16) == (np.dtype(np.int8), np.dtype(np.uint8))
    for kept in (np.bool_, np.int8, np.uint8, np.complex64, np.dtype("U3")):
        assert candidates(kept) == ()


@pytest.mark.parametrize("values, dtype, stored", [
    (rng.integers(-128, 128, N), np.float32, np.int8),          # a QOperator weight, zero point 0
    (rng.integers(0, 256, N), np.float32, np.uint8),
    (rng.integers(-255, 256, N), np.float32, np.int16),          # w - w_zero_point of uint8 weights
    (rng.integers(0, 65536, N), np.float32, np.uint16),
    (rng.standard_normal(N).astype(np.float16), np.float32, np.float16),   # a float16 model's weight
    (rng.standard_normal(N).astype(np.float16), np.float64, np.float16),
    (rng.standard_normal(N).astype(np.float32), np.float64, np.float32),
    (rng.integers(-2**31, 2**31, N), np.int64, np.int32),
    (rng.integers(0, 2**32, N), np.int64, np.uint32),
    (rng.integers(0, 200, N), np.uint64, np.uint8),
    (rng.standard_normal(N), np.float32, None),                  # float32 values: nothing narrower
    (rng.integers(-2**40, 2**40, N), np.int64, None),
])
def test_the_narrowest_exact_dtype_is_chosen(values, dtype, stored):
    array = np.asarray(values).astype(dtype)
    assert narrowest(array) == (None if stored is None else np.dtype(stored))


@pytest.mark.parametrize("odd, stored", [
    (-0.0, np.float16),         # no integer type holds the sign of zero
    (np.inf, np.float16),
    (np.nan, np.float16),       # the quiet NaN float16 gives back bit for bit
    (bits(0x7FC00001), None),   # a NaN payload float16 would lose
    (70000.0, None),            # past float16's range and int16's
    (0.5, np.float16),
    (1e-8, None),               # below float16's subnormals
])
def test_a_value_an_integer_type_cannot_hold_bit_for_bit_decides(odd, stored):
    array = rng.integers(-100, 100, N).astype(np.float32)
    array[N // 2] = odd
    assert narrowest(array) == (None if stored is None else np.dtype(stored))


def test_small_constants_and_other_dtypes_are_kept():
    assert narrowest(np.zeros(MIN_BYTES // 4 - 1, np.float32)) is None
    assert narrowest(np.zeros(MIN_BYTES // 4, np.float32)) == np.int8
    assert narrowest(np.zeros(N, np.bool_)) is None
    assert narrowest(np.zeros(N, np.complex64)) is None


def constants_for_storage():
    """A constant for each stored dtype, one kept as it is, a shared range, a small one, strings."""
    int8_weight = rng.integers(-127, 128, (64, 3, 3, 3)).astype(np.float32)
    return [int8_weight, rng.standard_normal((40, 30)).astype(np.float16).astype(np.float32),
            rng.standard_normal((32, 32)).astype(np.float32), int8_weight.copy().reshape(64, 27),
            rng.integers(0, 1000, 1024).astype(np.int64), np.arange(3, dtype=np.float32),
            np.array(["a", "bc"], dtype=object), np.zeros((0, 7), np.float32)]


@pytest.fixture(autouse=True)
def mapped_files(monkeypatch):
    """Every archive is mapped, however small (not read into memory)."""
    from relaxpack.runtime import archive
    monkeypatch.setattr(archive, "PRIVATE_MAX_BYTES", 0)


@pytest.mark.parametrize("params", ["linked", "external"])
def test_compact_archives_give_back_the_same_bytes(params, tmp_path):
    consts = constants_for_storage()
    exe = tuple_of_constants(consts)
    exe.save(tmp_path / "mapped.rpk", params=params)
    exe.save(tmp_path / "compact.rpk", params=params, constants="compact")
    _, manifest, header = parts(tmp_path / "compact.rpk")
    assert header[1] == manifest["format_version"] == 3
    assert [c.get("stored") for c in manifest["constants"]] == ["int8", "float16", None, "int8", "int16", None, None,
                                                                None]
    assert manifest["constants"][0]["offset"] == manifest["constants"][3]["offset"]   # equal bytes: one range
    # 1728 + 2400 + 4096 + 2048 + 12 bytes, each range 64-aligned, against 6912 + 4800 + 4096 + 8192 + 12
    assert (manifest["data"]["nbytes"], parts(tmp_path / "mapped.rpk")[1]["data"]["nbytes"]) == (10316, 24012)
    loaded = load(tmp_path / "compact.rpk")
    assert loaded.archive["stored_narrower"] == 4
    for original, c in zip(consts, loaded.constants):
        assert c.dtype == original.dtype and c.shape == original.shape and not c.flags.writeable
        if c.dtype != object:
            assert c.tobytes() == original.tobytes()
    assert np.shares_memory(loaded.constants[0], loaded.constants[3])      # widened once
    assert not isinstance(mapping_of(loaded.constants[0]), mmap.mmap)     # private memory
    assert isinstance(mapping_of(loaded.constants[2]), mmap.mmap)         # kept as is: still mapped
    (out,) = VirtualMachine(loaded).run({}).values()
    for original, c in zip(consts, out):
        np.testing.assert_array_equal(c, original)


def test_the_default_stays_mapped_and_format_2(tmp_path):
    exe = tuple_of_constants(constants_for_storage())
    exe.save(tmp_path / "m.rpk")
    _, manifest, header = parts(tmp_path / "m.rpk")
    assert header[1] == manifest["format_version"] == 2
    assert not any("stored" in c for c in manifest["constants"])
    assert all(isinstance(mapping_of(c), mmap.mmap) for c in load(tmp_path / "m.rpk").constants
               if c.dtype != object and c.size)
    # nothing stored narrower: no format 3 either way
    plain = tuple_of_constants([rng.standard_normal(N).astype(np.float32)])
    assert parts_of_bytes(archive_bytes(plain, constants="compact"))[1] == 2


def parts_of_bytes(data: bytes) -> tuple:
    return struct.unpack("<8sI", data[:12])


def test_an_archive_whose_constants_are_all_widened_keeps_no_mapping(tmp_path):
    exe = tuple_of_constants([rng.integers(-5, 5, N).astype(np.float32)])
    exe.save(tmp_path / "m.rpk", constants="compact")
    loaded = load(tmp_path / "m.rpk")
    assert loaded.source_check is None
    assert load_bytes(archive_bytes(exe, constants="compact")).constants[0].tobytes() == exe.constants[0].tobytes()


def test_a_quantized_model_runs_as_its_mapped_archive(tmp_path):
    """A QOperator MobileNetV2 of the zoo: its weights (``w - w_zero_point``) are stored in a byte."""
    from tests.models.zoo.judge import HERE
    exe = relaxpack.build(relaxpack.from_onnx(str(HERE / "mobilenet_v2_qop_channel.onnx")))
    exe.save(tmp_path / "mapped.rpk")
    exe.save(tmp_path / "compact.rpk", constants="compact")
    compact, mapped = (parts(tmp_path / name)[1]["data"]["nbytes"] for name in ("compact.rpk", "mapped.rpk"))
    assert compact < mapped / 2
    x = rng.standard_normal((2, 3, 33, 40)).astype(np.float32)
    a = VirtualMachine(load(tmp_path / "mapped.rpk")).run({"pixel_values": x})
    b = VirtualMachine(load(tmp_path / "compact.rpk")).run({"pixel_values": x})
    assert a.keys() == b.keys() and all(a[k].tobytes() == b[k].tobytes() for k in a)


def test_an_unknown_mode_is_refused(tmp_path):
    with pytest.raises(ArchiveError, match=r"constants must be one of \('mapped', 'compact'\), got 'small'"):
        tuple_of_constants([np.zeros(3, np.float32)]).save(tmp_path / "m.rpk", constants="small")
    assert not (tmp_path / "m.rpk").exists()


def set_stored(index, value):
    return lambda m: m["constants"][index].__setitem__("stored", value)


@pytest.mark.parametrize("edit, message", [
    (set_stored(0, "float64"), r"constants\[0\].stored: 'float64' is not a dtype float32 constants are stored in"),
    (set_stored(0, "float32"), r"constants\[0\].stored: 'float32' is not a dtype float32 constants are stored in"),
    (set_stored(0, "string"), r"constants\[0\].stored: 'string' is not a dtype float32"),
    (set_stored(0, "int128"), r"constants\[0\].stored: unknown dtype 'int128'"),
    (set_stored(0, 8), r"constants\[0\].stored: expected a string"),
    (set_stored(0, "int16"), r"constants\[0\]: shape \[64, 3, 3, 3\] of int16 needs 3456 bytes, nbytes says 1728"),
    (set_stored(1, "int8"), r"constants\[1\]: shape \[40, 30\] of int8 needs 1200 bytes, nbytes says 2400"),
    (lambda m: m["constants"][0].pop("stored"), r"constants\[0\]: shape \[64, 3, 3, 3\] of float32 needs 6912"),
    (lambda m: m["constants"][6].__setitem__("stored", "int8"), r"constants\[6\]: keys differ"),
    (lambda m: m.__setitem__("format_version", 2), "format_version: 2 disagrees with the header's 3"),
])
def test_a_stored_dtype_the_writer_never_chooses_is_refused(edit, message, tmp_path):
    tuple_of_constants(constants_for_storage()).save(tmp_path / "m.rpk", constants="compact")
    reseal(tmp_path / "m.rpk", edit)
    with pytest.raises(ArchiveError, match=message) as info:
        load(tmp_path / "m.rpk")
    assert "\n" not in str(info.value)


def test_format_2_has_no_stored_key(tmp_path):
    tuple_of_constants(constants_for_storage()).save(tmp_path / "m.rpk")
    reseal(tmp_path / "m.rpk", set_stored(2, "float16"))
    with pytest.raises(ArchiveError, match=r"constants\[2\]: keys differ from the format's: missing \[\], "
                                           r"unexpected \['stored'\]"):
        load(tmp_path / "m.rpk")


@pytest.mark.skipif(not sys.platform.startswith("linux") or mapped_pages._DONTNEED is None,
                    reason="madvise and /proc/self/status RssFile are Linux's")
def test_widening_gives_back_the_stored_pages(tmp_path):
    """Once widened, the stored bytes are not read again: their mapped pages leave the process."""
    from tests.runtime.test_mapped_pages import _rss_file_kib
    stored = rng.integers(-128, 128, 1 << 22).astype(np.int8)
    (tmp_path / "stored.bin").write_bytes(stored.tobytes())
    with open(tmp_path / "stored.bin", "rb") as f:
        mapping = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        assert int(np.frombuffer(mapping, np.int8).sum(dtype=np.int64)) == int(stored.sum(dtype=np.int64))
        before = _rss_file_kib()
        array = widened(mapping, np.dtype(np.int8), np.dtype(np.float32), (1024, 4096), 0)
        assert before - _rss_file_kib() >= (stored.nbytes >> 10) - 64
        assert array.base is None and not array.flags.writeable
        np.testing.assert_array_equal(array.reshape(-1), stored.astype(np.float32))
    finally:
        mapping.close()
