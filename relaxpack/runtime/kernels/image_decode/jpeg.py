"""JPEG: baseline and extended sequential Huffman-coded JPEG, 8-bit.

Markers are parsed with bounded reads; each scan's entropy-coded data is
split at its restart markers, unstuffed and Huffman-decoded into sparse
coefficient lists. Pixel reconstruction (libjpeg's integer IDCT, fancy
chroma upsampling, YCbCr -> RGB) is in :mod:`.jpeg_pixels`, bit-exact with
libjpeg-turbo's defaults, which is what Pillow (onnx's reference) uses.
Interleaved and single-component scans, any sampling factors, restart
intervals, grey, YCbCr and Adobe RGB. Progressive, arithmetic-coded,
lossless, 12-bit and CMYK JPEGs are refused as unsupported.

    decode_jpeg(b"\\xff\\xd8...")  ->  (H, W, 1) or (H, W, 3) uint8
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ._common import Reader, check_size, corrupt, unsupported
from .jpeg_pixels import reconstruct

FMT = "JPEG"
#: zig-zag index -> natural (row-major) index
ZIGZAG = (0, 1, 8, 16, 9, 2, 3, 10, 17, 24, 32, 25, 18, 11, 4, 5, 12, 19, 26, 33, 40, 48, 41, 34, 27, 20, 13, 6, 7,
          14, 21, 28, 35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23, 30, 37, 44, 51, 58, 59, 52, 45, 38, 31, 39, 46,
          53, 60, 61, 54, 47, 55, 62, 63)
_SOF_UNSUPPORTED = {0xC2: "progressive JPEG", 0xC3: "lossless JPEG", 0xC5: "differential sequential JPEG",
                    0xC6: "differential progressive JPEG", 0xC7: "differential lossless JPEG",
                    0xC9: "arithmetic-coded JPEG", 0xCA: "arithmetic-coded progressive JPEG",
                    0xCB: "arithmetic-coded lossless JPEG", 0xCD: "arithmetic-coded JPEG",
                    0xCE: "arithmetic-coded JPEG", 0xCF: "arithmetic-coded JPEG"}
#: Huffman fast lookup width: codes up to this many bits decode with one dict lookup
_FAST_BITS = 9


@dataclass
class Component:
    ident: int
    h: int
    v: int
    table: int
    #: dequantisation table (natural order), latched at the component's first scan
    quant: np.ndarray | None = None
    #: sparse coefficients: block index, natural position, value
    blocks: list[int] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)
    values: list[int] = field(default_factory=list)


@dataclass
class Frame:
    width: int
    height: int
    components: list[Component]

    @property
    def hmax(self) -> int:
        return max(c.h for c in self.components)

    @property
    def vmax(self) -> int:
        return max(c.v for c in self.components)

    def mcus(self) -> tuple[int, int]:
        """MCU columns and rows of an interleaved scan."""
        return -(-self.width // (8 * self.hmax)), -(-self.height // (8 * self.vmax))

    def blocks_wide(self, comp: Component) -> int:
        """Blocks per row of ``comp`` in its coefficient array (MCU-padded)."""
        return self.mcus()[0] * comp.h

    def blocks_high(self, comp: Component) -> int:
        return self.mcus()[1] * comp.v


class HuffmanTable:
    """One DHT table: a code string -> symbol map, plus a fast map from every
    :data:`_FAST_BITS`-bit string to (symbol, code length) for short codes."""

    def __init__(self, counts: bytes, symbols: bytes):
        self.codes: dict[str, int] = {}
        self.fast: dict[str, tuple[int, int]] = {}
        code, k = 0, 0
        for length in range(1, 17):
            for _ in range(counts[length - 1]):
                if code >= 1 << length:
                    raise corrupt(FMT, "a Huffman table has more codes than its code lengths allow")
                text = format(code, f"0{length}b")
                self.codes[text] = symbols[k]
                if length <= _FAST_BITS:
                    for tail in range(1 << (_FAST_BITS - length)):
                        suffix = format(tail, f"0{_FAST_BITS - length}b") if length < _FAST_BITS else ""
                        self.fast[text + suffix] = (symbols[k], length)
                code += 1
                k += 1
            code <<= 1

    def decode(self, bits: str, pos: int) -> tuple[int, int]:
        """(symbol, position after its code) of the code at ``pos``."""
        hit = self.fast.get(bits[pos:pos + _FAST_BITS])
        if hit is not None:
            return hit[0], pos + hit[1]
        for length in range(1, 17):
            symbol = self.codes.get(bits[pos:pos + length])
            if symbol is not None:
                if pos + length > len(bits):
                    break
                return symbol, pos + length
        if pos >= len(bits) - 7:
            raise corrupt(FMT, "the entropy-coded data ends inside a block (truncated file)")
        raise corrupt(FMT, f"invalid Huffman code at bit {pos} of an entropy-coded segment")


def decode_jpeg(data: bytes) -> np.ndarray:
    """The pixels of a baseline JPEG file, (H, W, 1 or 3) uint8."""
    frame, ycc = parse_jpeg(data)
    return reconstruct(frame, ycc)


def parse_jpeg(data: bytes) -> tuple[Frame, bool]:
    """The frame with every component's quantised coefficients decoded, and
    whether its three components are YCbCr (else RGB or grey)."""
    state = {"quant": {}, "dc": {}, "ac": {}, "restart": 0, "frame": None, "adobe": None, "jfif": False,
             "scans": 0}
    reader = Reader(data, FMT, 2)
    while True:
        marker = _next_marker(reader)
        if marker == 0xD9:      # EOI
            break
        if 0xD0 <= marker <= 0xD7 or marker == 0x01:
            continue            # stray RSTn / TEM carry no length
        (length,) = reader.unpack(">H", f"marker {marker:#04x} length")
        if length < 2:
            raise corrupt(FMT, f"marker {marker:#04x} has length {length}")
        body = Reader(reader.take(length - 2, f"marker {marker:#04x} segment"), FMT)
        if marker == 0xDA:
            _scan(body, reader, state)
        else:
            _segment(marker, body, state)
    frame = state["frame"]
    if frame is None or not state["scans"]:
        raise corrupt(FMT, "the file ends before any image data (no frame or no scan)")
    missing = [c.ident for c in frame.components if c.quant is None]
    if missing:
        raise corrupt(FMT, f"components {missing} are in no scan (truncated file)")
    return frame, _color_transform(frame, state)


def _next_marker(reader: Reader) -> int:
    """The next marker code; fill bytes (0xFF runs) are skipped."""
    (byte,) = reader.take(1, "marker")
    if byte != 0xFF:
        raise corrupt(FMT, f"expected a marker at offset {reader.pos - 1}, found byte {byte:#04x}")
    while True:
        (code,) = reader.take(1, "marker")
        if code != 0xFF:
            return code


def _segment(marker: int, body: Reader, state: dict) -> None:
    """Tables and frame headers: DQT, DHT, DRI, SOFn, APP14 (Adobe), APP0 (JFIF)."""
    if marker == 0xDB:
        while body.remaining():
            (pq_tq,) = body.take(1, "DQT")
            precision, ident = pq_tq >> 4, pq_tq & 15
            if precision > 1 or ident > 3:
                raise corrupt(FMT, f"quantisation table {ident} has precision {precision}")
            values = body.unpack(">64H" if precision else "64B", "DQT values")
            table = np.zeros(64, np.int64)
            table[list(ZIGZAG)] = values
            state["quant"][ident] = table
    elif marker == 0xC4:
        while body.remaining():
            (tc_th,) = body.take(1, "DHT")
            kind, ident = tc_th >> 4, tc_th & 15
            if kind > 1 or ident > 3:
                raise corrupt(FMT, f"Huffman table class {kind} id {ident} is invalid")
            counts = body.take(16, "DHT code counts")
            symbols = body.take(sum(counts), "DHT symbols")
            state["ac" if kind else "dc"][ident] = HuffmanTable(counts, symbols)
    elif marker == 0xDD:
        (state["restart"],) = body.unpack(">H", "DRI")
    elif marker in (0xC0, 0xC1):
        if state["frame"] is not None:
            raise corrupt(FMT, "a second frame header (SOF)")
        state["frame"] = _frame(body)
    elif marker in _SOF_UNSUPPORTED:
        raise unsupported(FMT, _SOF_UNSUPPORTED[marker])
    elif marker == 0xEE and body.data[:5] == b"Adobe" and len(body.data) >= 12:
        state["adobe"] = body.data[11]
    elif marker == 0xE0 and body.data[:5] == b"JFIF\x00":
        state["jfif"] = True
    # other APPn, COM and unknown segments carry nothing the pixels need


def _frame(body: Reader) -> Frame:
    precision, height, width, count = body.unpack(">BHHB", "SOF")
    if precision != 8:
        raise unsupported(FMT, f"{precision}-bit samples")
    if height == 0:
        raise unsupported(FMT, "a height given by a DNL marker (height 0 in the frame header)")
    if count not in (1, 3):
        raise unsupported(FMT, f"{count} colour components (only grey and 3-component colour)")
    components = []
    for _ in range(count):
        ident, hv, table = body.unpack(">BBB", "SOF component")
        h, v = hv >> 4, hv & 15
        if not (1 <= h <= 4 and 1 <= v <= 4 and table <= 3):
            raise corrupt(FMT, f"component {ident} has sampling {h}x{v} and table {table}")
        components.append(Component(ident, h, v, table))
    frame = Frame(width, height, components)
    check_size(FMT, height, width, count)
    if any(frame.hmax % c.h or frame.vmax % c.v for c in components):
        raise unsupported(FMT, f"sampling factors {[(c.h, c.v) for c in components]} that are not integer ratios")
    return frame


def _color_transform(frame: Frame, state: dict) -> bool:
    """True when the three components are YCbCr (libjpeg's guess: JFIF, then
    the Adobe marker's transform flag, then component ids 'R', 'G', 'B')."""
    if len(frame.components) == 1:
        return False
    if state["jfif"]:
        return True
    if state["adobe"] is not None:
        return state["adobe"] != 0
    return [c.ident for c in frame.components] != [82, 71, 66]


def _scan(body: Reader, reader: Reader, state: dict) -> None:
    """One scan: its header, then its entropy-coded data (read from ``reader``)."""
    frame = state["frame"]
    if frame is None:
        raise corrupt(FMT, "a scan (SOS) before the frame header (SOF)")
    (count,) = body.take(1, "SOS")
    by_id = {c.ident: c for c in frame.components}
    members = []
    for _ in range(count):
        ident, tables = body.unpack(">BB", "SOS component")
        comp = by_id.get(ident)
        dc, ac = state["dc"].get(tables >> 4), state["ac"].get(tables & 15)
        if comp is None or dc is None or ac is None:
            raise corrupt(FMT, f"scan component {ident} or its Huffman tables {tables >> 4}/{tables & 15} "
                               f"are not defined")
        if comp.quant is None:
            if comp.table not in state["quant"]:
                raise corrupt(FMT, f"component {ident} uses quantisation table {comp.table}, which is not defined")
            comp.quant = state["quant"][comp.table]
        members.append((comp, dc, ac))
    if not members or len({id(m[0]) for m in members}) != len(members):
        raise corrupt(FMT, "a scan with no or repeated components")
    segments = _entropy_segments(reader)
    _decode_scan(frame, members, segments, state["restart"])
    state["scans"] += 1


def _entropy_segments(reader: Reader) -> list[str]:
    """The scan's entropy-coded data as bit strings, one per restart interval,
    byte stuffing removed; ``reader`` is left at the marker that ends the scan."""
    data, pos, start = reader.data, reader.pos, reader.pos
    segments, parts = [], []
    while True:
        at = data.find(b"\xff", pos)
        if at < 0 or at + 1 >= len(data):
            raise corrupt(FMT, "the file ends inside the entropy-coded data (truncated file)")
        follower = data[at + 1]
        if follower == 0x00:
            parts.append(data[start:at + 1])
            pos = start = at + 2
        elif follower == 0xFF:      # a fill byte before a marker
            parts.append(data[start:at])
            pos = start = at + 1
        elif 0xD0 <= follower <= 0xD7:
            parts.append(data[start:at])
            segments.append(b"".join(parts))
            parts = []
            pos = start = at + 2
        else:
            parts.append(data[start:at])
            segments.append(b"".join(parts))
            reader.pos = at
            return [format(int.from_bytes(s, "big"), f"0{8 * len(s)}b") if s else "" for s in segments]


def _decode_scan(frame: Frame, members: list, segments: list[str], restart: int) -> None:
    """Huffman-decode every block of the scan into its component's coefficient lists."""
    comps = [m[0] for m in members]
    blocks = _scan_blocks(frame, comps)
    available = sum(len(bits) for bits in segments)
    if 2 * blocks > available:     # every block codes at least a DC size and an end of block
        raise corrupt(FMT, f"the scan's {available} bits of data cannot hold its {blocks} blocks (truncated file)")
    order = _block_order(frame, comps)
    mcu_count = len(order)
    per_segment = restart or mcu_count
    if len(segments) < -(-mcu_count // per_segment):
        raise corrupt(FMT, f"the scan has {len(segments)} restart intervals, its {mcu_count} MCUs need "
                           f"{-(-mcu_count // per_segment)} (truncated file)")
    for s, bits in enumerate(segments[:-(-mcu_count // per_segment)]):
        predictors = [0] * len(members)
        pos = 0
        for mcu in order[s * per_segment:(s + 1) * per_segment]:
            for m, block in mcu:
                comp, dc, ac = members[m]
                pos, predictors[m] = _decode_block(bits, pos, dc, ac, predictors[m], comp, block)


def _scan_blocks(frame: Frame, comps: list[Component]) -> int:
    """How many blocks the scan codes."""
    if len(comps) == 1:
        return _own_blocks(frame, comps[0])[0] * _own_blocks(frame, comps[0])[1]
    mcus_x, mcus_y = frame.mcus()
    return mcus_x * mcus_y * sum(c.h * c.v for c in comps)


def _own_blocks(frame: Frame, comp: Component) -> tuple[int, int]:
    """(blocks across, blocks down) covering the component's own samples."""
    cols = -(-frame.width * comp.h // frame.hmax)
    rows = -(-frame.height * comp.v // frame.vmax)
    return -(-cols // 8), -(-rows // 8)


def _block_order(frame: Frame, comps: list[Component]) -> list[list[tuple[int, int]]]:
    """Per MCU of the scan, its (member index, block index) pairs in coding order."""
    if len(comps) == 1:     # non-interleaved: the component's own blocks, row by row
        comp = comps[0]
        wide, high = _own_blocks(frame, comp)
        stride = frame.blocks_wide(comp)
        return [[(0, r * stride + c)] for r in range(high) for c in range(wide)]
    mcus_x, mcus_y = frame.mcus()
    order = []
    for my in range(mcus_y):
        for mx in range(mcus_x):
            mcu = []
            for m, comp in enumerate(comps):
                stride = frame.blocks_wide(comp)
                for v in range(comp.v):
                    for h in range(comp.h):
                        mcu.append((m, (my * comp.v + v) * stride + mx * comp.h + h))
            order.append(mcu)
    return order


def _decode_block(bits: str, pos: int, dc: HuffmanTable, ac: HuffmanTable, predictor: int,
                  comp: Component, block: int) -> tuple[int, int]:
    """Decode one block at bit ``pos``; (new position, new DC predictor)."""
    size, pos = dc.decode(bits, pos)
    if size > 11:
        raise corrupt(FMT, f"a DC difference of {size} bits (at most 11)")
    diff, pos = _receive(bits, pos, size)
    predictor += diff
    blocks, positions, values = comp.blocks, comp.positions, comp.values
    if predictor:
        blocks.append(block)
        positions.append(0)
        values.append(predictor)
    k = 1
    while k < 64:
        symbol, pos = ac.decode(bits, pos)
        run, size = symbol >> 4, symbol & 15
        if size:
            k += run
            value, pos = _receive(bits, pos, size)
            # libjpeg writes a run past the block's end to its last coefficient
            blocks.append(block)
            positions.append(ZIGZAG[min(k, 63)])
            values.append(value)
            k += 1
        elif run == 15:
            k += 16
        else:
            break
    return pos, predictor


def _receive(bits: str, pos: int, size: int) -> tuple[int, int]:
    """The ``size``-bit signed value at ``pos`` (JPEG's RECEIVE and EXTEND)."""
    if not size:
        return 0, pos
    end = pos + size
    if end > len(bits):
        raise corrupt(FMT, "the entropy-coded data ends inside a block (truncated file)")
    value = int(bits[pos:end], 2)
    if value < 1 << (size - 1):
        value -= (1 << size) - 1
    return value, end
