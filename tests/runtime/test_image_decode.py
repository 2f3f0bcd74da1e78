"""ImageDecoder's codecs (dyn.image_decoder): exact decoding of files
encoded here from known pixels, clear errors on corrupt input, and the
converter end to end."""

from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest
from onnx import TensorProto, helper

import relaxpack
from relaxpack.errors import ExecutionError, RelaxpackError, UnsupportedOpError
from relaxpack.runtime import VirtualMachine
from relaxpack.runtime.kernels import KERNELS
from relaxpack.runtime.kernels.image_decode import decode_image, to_pixel_format
from relaxpack.runtime.kernels.image_decode.jpeg import parse_jpeg
from relaxpack.runtime.kernels.image_decode.jpeg_pixels import dense_coefficients, idct_islow, upsample

from .image_encoders import (
    DCT, ZIGZAG, chunk, encode_bmp, encode_jpeg, encode_png, encode_pnm, encode_tiff, fix_crcs, lzw_encode,
)

decode = KERNELS["dyn.image_decoder"].fn


def as_input(data: bytes) -> np.ndarray:
    return np.frombuffer(data, np.uint8)


def pillow_gray(rgb: np.ndarray) -> np.ndarray:
    """Pillow's convert("L"), computed independently in floating point
    (299/587/114 per mille, rounded half up)."""
    r, g, b = (rgb[:, :, i].astype(np.float64) for i in range(3))
    return np.floor((r * 19595 + g * 38470 + b * 7471) / 65536 + 0.5).astype(np.uint8)[:, :, None]


@pytest.fixture
def rng():
    return np.random.default_rng(20)


# ---------------------------------------------------------------- PNG


@pytest.mark.parametrize("kind", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("color_type,channels", [(2, 3), (6, 4), (0, 1), (4, 2)])
def test_png_each_filter_type_decodes_exactly(rng, kind, color_type, channels):
    image = rng.integers(0, 256, (7, 11, channels), dtype=np.uint8)
    pixels = decode_image(encode_png(image, color_type, filters=(kind,)))
    np.testing.assert_array_equal(pixels, image)


def test_png_mixed_filters_split_idat_and_pixel_formats(rng):
    image = rng.integers(0, 256, (13, 9, 3), dtype=np.uint8)
    data = as_input(encode_png(image, 2, filters=(4, 3, 1, 0, 2), chunk_size=17))
    np.testing.assert_array_equal(decode(data, pixel_format="RGB"), image)
    np.testing.assert_array_equal(decode(data, pixel_format="BGR"), image[:, :, ::-1])
    np.testing.assert_array_equal(decode(data, pixel_format="Grayscale"), pillow_gray(image))


@pytest.mark.parametrize("depth", [1, 2, 4, 8, 16])
def test_png_grey_bit_depths(rng, depth):
    image = rng.integers(0, 1 << depth, (6, 13, 1))
    pixels = decode_image(encode_png(image, 0, depth=depth, filters=(0, 1, 2, 3, 4)))
    expected = image >> 8 if depth == 16 else image * (255 // ((1 << depth) - 1))
    np.testing.assert_array_equal(pixels, expected.astype(np.uint8))


def test_png_rgb16_keeps_the_high_byte(rng):
    image = rng.integers(0, 65536, (5, 4, 3))
    np.testing.assert_array_equal(decode_image(encode_png(image, 2, depth=16, filters=(4, 3))),
                                  (image >> 8).astype(np.uint8))


@pytest.mark.parametrize("depth", [1, 4, 8])
def test_png_palette(rng, depth):
    palette = rng.integers(0, 256, (1 << depth, 3), dtype=np.uint8)
    indices = rng.integers(0, 1 << depth, (9, 10, 1))
    np.testing.assert_array_equal(decode_image(encode_png(indices, 3, depth=depth, palette=palette)),
                                  palette[indices[:, :, 0]])


@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (8, 8), (17, 10)])
def test_png_adam7_interlaced(rng, shape):
    image = rng.integers(0, 256, shape + (3,), dtype=np.uint8)
    np.testing.assert_array_equal(decode_image(encode_png(image, 2, filters=(1, 4, 3), interlace=True)), image)
    grey = rng.integers(0, 4, shape + (1,))
    np.testing.assert_array_equal(decode_image(encode_png(grey, 0, depth=2, filters=(4,), interlace=True)),
                                  (grey * 85).astype(np.uint8))


def test_png_errors_name_the_problem(rng):
    good = encode_png(rng.integers(0, 256, (4, 4, 3), dtype=np.uint8), 2, filters=(4,))
    with pytest.raises(ExecutionError, match="CRC"):
        decode_image(good[:40] + bytes([good[40] ^ 1]) + good[41:])
    with pytest.raises(ExecutionError, match="PNG: truncated"):
        decode_image(good[:50])
    header = struct.pack(">IIBBBBB", 2, 2, 8, 2, 0, 0, 0)
    rows = b"\x00" + bytes(6) + b"\x09" + bytes(6)
    head, end = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header), chunk(b"IEND", b"")
    bad_filter = head + chunk(b"IDAT", zlib.compress(rows)) + end
    with pytest.raises(ExecutionError, match="row 1 has filter type 9"):
        decode_image(bad_filter)
    short = head + chunk(b"IDAT", zlib.compress(rows[:-1])) + end
    with pytest.raises(ExecutionError, match="inflates to 13 bytes, the image needs 14"):
        decode_image(short)
    with pytest.raises(ExecutionError, match="zlib stream is corrupt"):
        decode_image(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", b"\x78\x9c\xff\xff")
                     + chunk(b"IEND", b""))


# ---------------------------------------------------------------- BMP


@pytest.mark.parametrize("bpp", [24, 32])
@pytest.mark.parametrize("top_down", [False, True])
@pytest.mark.parametrize("width", [1, 2, 3, 5])
def test_bmp_truecolour(rng, bpp, top_down, width):
    image = rng.integers(0, 256, (4, width, 3), dtype=np.uint8)
    np.testing.assert_array_equal(decode_image(encode_bmp(image, bpp, top_down=top_down)), image)


@pytest.mark.parametrize("bpp", [1, 4, 8])
def test_bmp_palette(rng, bpp):
    palette = rng.integers(0, 256, (1 << bpp, 3), dtype=np.uint8)
    indices = rng.integers(0, 1 << bpp, (5, 7))
    np.testing.assert_array_equal(decode_image(encode_bmp(indices, bpp, palette=palette)), palette[indices])


def test_bmp_bit_fields_565_and_bgra(rng):
    raw = rng.integers(0, 1 << 16, (3, 5))
    expected = np.stack([(raw >> 11) * 255 // 31, ((raw >> 5) & 63) * 255 // 63, (raw & 31) * 255 // 31], axis=2)
    np.testing.assert_array_equal(decode_image(encode_bmp(raw, 16, masks=(0xF800, 0x07E0, 0x001F))),
                                  expected.astype(np.uint8))
    rgba = rng.integers(0, 256, (3, 5, 4), dtype=np.uint8)
    packed = (rgba[:, :, 3].astype(np.int64) << 24 | rgba[:, :, 0].astype(np.int64) << 16
              | rgba[:, :, 1].astype(np.int64) << 8 | rgba[:, :, 2])
    data = encode_bmp(packed, 32, masks=(0xFF0000, 0xFF00, 0xFF, 0xFF000000), header_size=108)
    np.testing.assert_array_equal(decode_image(data), rgba)
    np.testing.assert_array_equal(decode(as_input(data), pixel_format="RGB"), rgba[:, :, :3])


def test_bmp_errors(rng):
    good = encode_bmp(rng.integers(0, 256, (4, 4, 3), dtype=np.uint8))
    with pytest.raises(ExecutionError, match="BMP: truncated pixel data"):
        decode_image(good[:-1])
    rle = good[:30] + b"\x01\x00\x00\x00" + good[34:]
    with pytest.raises(UnsupportedOpError, match="BMP: RLE8 compression is not supported"):
        decode_image(rle)


# ---------------------------------------------------------------- PNM


@pytest.mark.parametrize("kind,channels", [(2, 1), (3, 3), (5, 1), (6, 3)])
@pytest.mark.parametrize("maxval", [255, 15, 1000])
def test_pnm_grey_and_colour(rng, kind, channels, maxval):
    samples = rng.integers(0, maxval + 1, (4, 6, channels))
    expected = np.array([round(v / maxval * 255) for v in samples.ravel()], np.uint8).reshape(samples.shape)
    np.testing.assert_array_equal(decode_image(encode_pnm(samples, kind, maxval)), expected)


@pytest.mark.parametrize("kind", [1, 4])
@pytest.mark.parametrize("width", [1, 8, 11])
def test_pnm_bitmaps_set_bits_are_black(rng, kind, width):
    bits = rng.integers(0, 2, (3, width, 1))
    np.testing.assert_array_equal(decode_image(encode_pnm(bits, kind)), np.where(bits == 1, 0, 255))


def test_pnm_errors(rng):
    good = encode_pnm(rng.integers(0, 256, (3, 3, 3)), 6, comment=False)
    with pytest.raises(ExecutionError, match="PNM: truncated pixel data"):
        decode_image(good[:-1])
    with pytest.raises(ExecutionError, match="expected a number"):
        decode_image(b"P6\n3 x\n255\n")
    with pytest.raises(ExecutionError, match="exceeds maxval"):
        decode_image(b"P2 1 1 15 16\n")


# ---------------------------------------------------------------- TIFF


@pytest.mark.parametrize("compression", [1, 5, 8, 32773])
@pytest.mark.parametrize("predictor", [1, 2])
@pytest.mark.parametrize("planar", [1, 2])
def test_tiff_rgb_compressions(rng, compression, predictor, planar):
    image = rng.integers(0, 256, (40, 37, 3), dtype=np.uint8)
    image[5:20] = image[5, 0]       # runs, so LZW and PackBits repeat and the LZW table widens
    data = encode_tiff(image, 2, compression=compression, predictor=predictor, planar=planar, rows_per_strip=7)
    np.testing.assert_array_equal(decode_image(data), image)


def test_tiff_lzw_table_fills_and_clears(rng):
    image = rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)   # incompressible: thousands of codes
    np.testing.assert_array_equal(decode_image(encode_tiff(image, 2, compression=5, rows_per_strip=64)), image)


@pytest.mark.parametrize("order", ["<", ">"])
@pytest.mark.parametrize("bits", [1, 4, 8, 16])
def test_tiff_grey_both_byte_orders(rng, order, bits):
    samples = rng.integers(0, 1 << bits, (5, 9, 1))
    expected = samples >> 8 if bits == 16 else samples * (255 // ((1 << bits) - 1))
    data = encode_tiff(samples, 1, bits=bits, order=order, predictor=2 if bits >= 8 else 1)
    np.testing.assert_array_equal(decode_image(data), expected.astype(np.uint8))
    white_is_zero = encode_tiff(samples, 0, bits=bits, order=order, compression=5)
    np.testing.assert_array_equal(decode_image(white_is_zero), 255 - expected.astype(np.uint8))


def test_tiff_palette_and_alpha(rng):
    colormap = rng.integers(0, 65536, (16, 3))
    indices = rng.integers(0, 16, (4, 6, 1))
    np.testing.assert_array_equal(decode_image(encode_tiff(indices, 3, bits=4, colormap=colormap)),
                                  (colormap[indices[:, :, 0]] >> 8).astype(np.uint8))
    rgba = rng.integers(0, 256, (4, 6, 4), dtype=np.uint8)
    data = as_input(encode_tiff(rgba, 2, extra_samples=(2,), compression=32773))
    np.testing.assert_array_equal(decode(data, pixel_format="RGB"), rgba[:, :, :3])
    np.testing.assert_array_equal(decode(data, pixel_format="Grayscale"), pillow_gray(rgba))


def test_tiff_errors(rng):
    good = encode_tiff(rng.integers(0, 256, (4, 4, 3), dtype=np.uint8), 2, compression=5)
    with pytest.raises(ExecutionError, match="TIFF: strip 0 decompresses to"):
        decode_image(encode_tiff(np.zeros((4, 4, 3), np.uint8), 2, compression=5)
                     .replace(lzw_encode(bytes(36)), lzw_encode(bytes(30))))
    with pytest.raises(ExecutionError, match="TIFF: truncated"):
        decode_image(good[:-30])
    with pytest.raises(UnsupportedOpError, match="TIFF: JPEG compression is not supported"):
        decode_image(encode_tiff(np.zeros((2, 2, 3), np.uint8), 2).replace(
            struct.pack("<HHIHH", 259, 3, 1, 1, 0), struct.pack("<HHIHH", 259, 3, 1, 7, 0)))


# ---------------------------------------------------------------- JPEG


def _own_region(frame, comp, array):
    """The blocks that cover the component's own samples (a non-interleaved
    scan codes only these)."""
    cols = -(-frame.width * comp.h // frame.hmax)
    rows = -(-frame.height * comp.v // frame.vmax)
    return array[:-(-rows // 8), :-(-cols // 8)]


@pytest.mark.parametrize("options", [{}, {"sampling": (2, 2)}, {"sampling": (2, 1), "restart": 3},
                                     {"sampling": (1, 2), "interleaved": False}, {"ycc": False, "restart": 1},
                                     {"sampling": (2, 2), "quality_scale": 0.05}])
def test_jpeg_coefficients_decode_exactly(rng, options):
    image = rng.integers(0, 256, (21, 35, 3), dtype=np.uint8)
    data, coefs, _ = encode_jpeg(image, **options)
    frame, ycc = parse_jpeg(data)
    assert ycc == options.get("ycc", True)
    for comp, expected in zip(frame.components, coefs):
        np.testing.assert_array_equal(_own_region(frame, comp, dense_coefficients(frame, comp)),
                                      _own_region(frame, comp, expected))
    assert decode_image(data).shape == (21, 35, 3)


def _float_idct(coefs: np.ndarray, quant: np.ndarray) -> np.ndarray:
    table = np.zeros(64)
    table[ZIGZAG] = quant
    return DCT.T @ (coefs * table.reshape(8, 8)) @ DCT + 128


def test_jpeg_grey_pixels_within_one_of_the_exact_idct(rng):
    image = rng.integers(0, 256, (19, 26, 1), dtype=np.uint8)
    data, (coefs,), (quant, _) = encode_jpeg(image, quality_scale=0.2)
    expected = _float_idct(coefs, quant).transpose(0, 2, 1, 3).reshape(coefs.shape[0] * 8, -1)[:19, :26]
    diff = decode_image(data)[:, :, 0].astype(np.float64) - np.clip(expected, 0, 255)
    assert np.abs(diff).max() <= 1, np.abs(diff).max()


def test_islow_idct_is_within_one_of_the_exact_idct(rng):
    blocks = rng.integers(-200, 200, (1000, 8, 8)) * (rng.random((1000, 8, 8)) < 0.3)
    blocks[:, 0, 0] = rng.integers(-1000, 1000, 1000)
    exact = DCT.T @ blocks @ DCT + 128
    # libjpeg wraps results beyond 10 bits (only corrupt data gets there): compare the others
    sane = np.abs(exact - 128).max(axis=(1, 2)) < 500
    assert sane.sum() > 500
    got = idct_islow(blocks[sane].astype(np.int64)).astype(np.float64)
    assert np.abs(got - np.clip(np.round(exact[sane]), 0, 255)).max() <= 1


def test_fancy_upsampling_follows_the_onnx_spec(rng):
    """B0 = round_half_down(A/4 + 3B/4), B1 = round_half_up(3B/4 + C/4), edges repeated."""
    row = rng.integers(0, 256, (3, 9))
    a = np.concatenate([row[:, :1], row[:, :-1]], axis=1)
    c = np.concatenate([row[:, 1:], row[:, -1:]], axis=1)
    b0 = np.ceil((a + 3 * row) / 4 - 0.5)
    b1 = np.floor((3 * row + c) / 4 + 0.5)
    expected = np.stack([b0, b1], axis=2).reshape(3, 18)
    np.testing.assert_array_equal(upsample(row.astype(np.uint8), 2, 1), expected)
    np.testing.assert_array_equal(upsample(row.T.astype(np.uint8), 1, 2), expected.T)
    # the 2x2 filter is the two 1-D ones in 16ths: weights 9, 3, 3, 1
    np.testing.assert_array_equal(upsample(np.full((4, 4), 77, np.uint8), 2, 2), np.full((8, 8), 77))


@pytest.mark.parametrize("name", ["rgb", "bgr", "grayscale"])
def test_jpeg_matches_libjpeg_turbo_exactly(name):
    """onnx's frozen test data was decoded by Pillow (libjpeg-turbo)."""
    from onnx.backend.test.case.node import _image_decoder_data as frozen
    case = getattr(frozen, f"image_decoder_decode_jpeg_{name}")
    pixel_format = {"rgb": "RGB", "bgr": "BGR", "grayscale": "Grayscale"}[name]
    np.testing.assert_array_equal(decode(case.data, pixel_format=pixel_format), case.output)


def test_jpeg_errors(rng):
    data, _, _ = encode_jpeg(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8), sampling=(2, 2))
    sof = data.index(b"\xff\xc0")
    with pytest.raises(UnsupportedOpError, match="JPEG: progressive JPEG is not supported"):
        decode_image(data[:sof] + b"\xff\xc2" + data[sof + 2:])
    with pytest.raises(ExecutionError, match="JPEG: .*truncated file"):
        decode_image(data[:-40])
    with pytest.raises(ExecutionError, match="JPEG: a scan .* before the frame header"):
        decode_image(data[:sof] + data[data.index(b"\xff\xc4"):])


# ---------------------------------------------------------------- dispatch, fuzz, converter


@pytest.mark.parametrize("data,fmt", [(b"\x00\x00\x00\x0cjP  \r\n\x87\n\x00\x00", "JPEG 2000"),
                                      (b"RIFF\x20\x02\x00\x00WEBPVP8 ", "WebP")])
def test_unsupported_formats_are_named(data, fmt):
    with pytest.raises(UnsupportedOpError, match=f"ImageDecoder.*{fmt}: decoding is not supported"):
        decode(as_input(data), pixel_format="RGB")


def test_unknown_bytes_and_wrong_operands():
    with pytest.raises(ExecutionError, match="unrecognised image format"):
        decode(as_input(b"GIF89a......"), pixel_format="RGB")
    with pytest.raises(RelaxpackError, match="1-D uint8"):
        decode(np.zeros((2, 2), np.uint8), pixel_format="RGB")
    with pytest.raises(RelaxpackError, match="pixel_format"):
        decode(as_input(b"BM"), pixel_format="RGBA")


def _fuzz_samples(rng):
    image = rng.integers(0, 256, (6, 5, 3), dtype=np.uint8)
    palette = rng.integers(0, 256, (16, 3), dtype=np.uint8)
    return [encode_png(image, 2, filters=(0, 1, 2, 3, 4)), encode_png(image, 2, interlace=True),
            encode_bmp(image), encode_bmp(image[:, :, 0] % 16, 4, palette=palette),
            encode_pnm(image, 6), encode_pnm(image, 3), encode_tiff(image, 2, compression=5, predictor=2),
            encode_tiff(image, 2, compression=32773, planar=2),
            encode_tiff(image[:, :, :1], 1, bits=4),
            encode_jpeg(image, sampling=(2, 2))[0], encode_jpeg(image, restart=1, interleaved=False)[0]]


def mutations(data: bytes, rng: np.random.Generator, count: int):
    """Truncations, flipped bytes, inserted and deleted runs of ``data``."""
    for _ in range(count):
        kind = rng.integers(4)
        at = int(rng.integers(len(data)))
        if kind == 0:
            yield data[:at]
        elif kind == 1:
            yield data[:at] + bytes([int(rng.integers(256))]) + data[at + 1:]
        elif kind == 2:
            yield data[:at] + rng.integers(0, 256, int(rng.integers(1, 9)), dtype=np.uint8).tobytes() + data[at:]
        else:
            yield data[:at] + data[at + int(rng.integers(1, 9)):]


def test_fuzzed_files_decode_or_fail_cleanly(rng):
    """Any mutation either decodes to uint8 (H, W, 3) or raises a RelaxpackError."""
    for good in _fuzz_samples(rng):
        for data in mutations(good, rng, 150):
            if good.startswith(b"\x89PNG"):
                data = fix_crcs(data)
            try:
                out = decode(as_input(data), pixel_format="RGB")
            except RelaxpackError:
                continue
            assert out.dtype == np.uint8 and out.ndim == 3 and out.shape[2] == 3


def _model(pixel_format: str):
    graph = helper.make_graph(
        [helper.make_node("ImageDecoder", ["data"], ["image"], pixel_format=pixel_format),
         helper.make_node("Shape", ["image"], ["shape"])], "g",
        [helper.make_tensor_value_info("data", TensorProto.UINT8, ["n"])],
        [helper.make_tensor_value_info("image", TensorProto.UINT8, None),
         helper.make_tensor_value_info("shape", TensorProto.INT64, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


@pytest.mark.parametrize("pixel_format,channels", [("RGB", 3), ("Grayscale", 1)])
def test_converter_runs_with_fresh_dims(rng, pixel_format, channels):
    mod = relaxpack.from_onnx(_model(pixel_format))
    assert 'R.call_packed("dyn.image_decoder"' in mod.script()
    vm = VirtualMachine(relaxpack.build(mod))
    for shape in [(3, 4), (9, 2)]:
        image = rng.integers(0, 256, shape + (3,), dtype=np.uint8)
        out = vm.run({"data": as_input(encode_png(image, 2, filters=(4,)))})
        np.testing.assert_array_equal(out["image"], to_pixel_format(image, pixel_format))
        assert out["shape"].tolist() == [*shape, channels]
