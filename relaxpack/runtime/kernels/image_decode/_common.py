"""What the image codecs share: bounded reads and one error per problem.

Every codec reads its input through :class:`Reader`, whose reads check the
remaining length first, so a truncated or corrupt file fails with an
:class:`~relaxpack.errors.ExecutionError` naming the format and the problem,
never with an ``IndexError`` from deep inside a decoder.
"""

from __future__ import annotations

import struct

import numpy as np

from ....errors import ExecutionError, UnsupportedOpError

#: decoded pixels never exceed this many samples (about 1 GiB as uint8): a
#: header may claim any size, and the decoders allocate before they decode
MAX_SAMPLES = 1 << 30


def corrupt(fmt: str, message: str) -> ExecutionError:
    """The error for a malformed or truncated ``fmt`` file."""
    return ExecutionError(f"ImageDecoder: {fmt}: {message}")


def unsupported(fmt: str, message: str) -> UnsupportedOpError:
    """The error for a valid ``fmt`` feature this decoder does not implement."""
    return UnsupportedOpError(f"ImageDecoder (opset 20): {fmt}: {message} is not supported")


def check_size(fmt: str, height: int, width: int, channels: int) -> None:
    """Reject empty images and sizes beyond :data:`MAX_SAMPLES` before allocating."""
    if height <= 0 or width <= 0:
        raise corrupt(fmt, f"image size {width}x{height} is empty or negative")
    if height * width * channels > MAX_SAMPLES:
        raise corrupt(fmt, f"image size {width}x{height}x{channels} exceeds {MAX_SAMPLES} samples")


class Reader:
    """Bounded sequential reads from the encoded bytes of one ``fmt`` file."""

    def __init__(self, data: bytes, fmt: str, pos: int = 0):
        self.data = data
        self.fmt = fmt
        self.pos = pos

    def remaining(self) -> int:
        return len(self.data) - self.pos

    def take(self, count: int, what: str) -> bytes:
        """The next ``count`` bytes; an error naming ``what`` if the file ends first."""
        if count < 0 or count > self.remaining():
            raise corrupt(self.fmt, f"truncated {what}: needs {count} bytes at offset {self.pos}, "
                                    f"{max(self.remaining(), 0)} left")
        chunk = self.data[self.pos:self.pos + count]
        self.pos += count
        return chunk

    def unpack(self, fmt: str, what: str) -> tuple:
        """``struct.unpack(fmt, ...)`` of the next bytes."""
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))

    def seek(self, pos: int, what: str) -> None:
        if not 0 <= pos <= len(self.data):
            raise corrupt(self.fmt, f"{what} offset {pos} is outside the {len(self.data)}-byte file")
        self.pos = pos


def expand_bits(packed: np.ndarray, bits: int, count: int) -> np.ndarray:
    """Rows of ``bits``-bit samples (MSB first, rows padded to whole bytes)
    unpacked to one uint8 per sample: ``packed`` is (rows, row_bytes), the
    result (rows, count)."""
    if bits == 8:
        return packed[:, :count]
    if bits == 16:
        return packed[:, 0:2 * count:2]     # the high byte, as Pillow keeps
    unpacked = np.unpackbits(packed, axis=1)
    if bits == 1:
        return unpacked[:, :count]
    weights = (1 << np.arange(bits - 1, -1, -1)).astype(np.uint8)
    groups = unpacked[:, :count * bits].reshape(packed.shape[0], count, bits)
    return (groups * weights).sum(axis=2).astype(np.uint8)


def scale_to_8_bits(samples: np.ndarray, bits: int) -> np.ndarray:
    """Samples of ``bits`` < 8 bits stretched to 0..255 (1 -> 255, 4 -> *17)."""
    if bits >= 8:
        return samples
    return (samples.astype(np.uint16) * (255 // ((1 << bits) - 1))).astype(np.uint8)
