"""com.microsoft Attention, QAttention and MultiHeadAttention against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

import relaxpack
from relaxpack.errors import UnsupportedOpError
from relaxpack.runtime import VirtualMachine

from .backend_case import assert_close
from .test_convert_microsoft import FLOAT_TOL, check, ms_model, rand

B, S, HIDDEN, HEADS = 2, 5, 16, 4
HEAD = HIDDEN // HEADS


def _lengths(batch, seq):
    return np.array([seq - (i % seq) for i in range(batch)], np.int32)


def _raw_mask(batch, seq):
    m = np.ones((batch, seq), np.int32)
    m[0, -2:] = 0
    if batch > 1:
        m[1, 1] = 0
    return m


@pytest.mark.parametrize("mask, unidirectional, sizes", [
    (None, 0, None), ("lengths", 0, None), ("raw", 0, None), (None, 1, None), ("raw", 1, None),
    (None, 0, (16, 16, 8)),
])
def test_attention(mask, unidirectional, sizes):
    width = sum(sizes) if sizes else 3 * HIDDEN
    consts = {"w": rand(HIDDEN, width, seed=1) * 0.5, "bias": rand(width, seed=2)}
    feeds = {"x": rand(B, S, HIDDEN)}
    inputs = ["x", "w", "bias"]
    attrs = {"num_heads": HEADS, "unidirectional": unidirectional}
    if sizes:
        attrs["qkv_hidden_sizes"] = list(sizes)
    make_mask = {"lengths": _lengths, "raw": _raw_mask}.get(mask)
    if make_mask:
        feeds["mask"] = make_mask(B, S)
        inputs.append("mask")
    sym = {"x": ["b", "s", HIDDEN], "mask": ["b"] if mask == "lengths" else ["b", "s"]}
    model = ms_model("Attention", feeds, consts, inputs=inputs, attrs=attrs, sym=sym)

    def feeds_at(b, s, seed):
        f = {"x": rand(b, s, HIDDEN, seed=seed)}
        if make_mask:
            f["mask"] = make_mask(b, s)
        return f
    check(model, feeds_at(1, 3, 0), feeds_at(3, 6, 1))


@pytest.mark.parametrize("per_column, mask", [(False, None), (True, "raw"), (False, "lengths")])
def test_quantized_attention(per_column, mask):
    """QAttention (onnxruntime's dynamic quantization of a fused Attention) against onnxruntime's
    float Attention of the dequantized input and weights (its exact semantics on any CPU), and
    against onnxruntime's QAttention on inputs below 128 (no u8 x s8 pair leaves int16)."""
    rng = np.random.default_rng(0)
    w = rng.integers(-127, 128, (HIDDEN, 3 * HIDDEN)).astype(np.int8)
    w_scale = (rng.random(3 * HIDDEN) * 0.01 + 0.002).astype(np.float32) if per_column else np.float32(0.005)
    w_zero = np.zeros(3 * HIDDEN, np.int8) if per_column else np.int8(0)
    consts = {"w": w, "bias": rand(3 * HIDDEN, seed=2), "x_scale": np.float32(0.02), "w_scale": w_scale,
              "x_zero": np.uint8(131), "w_zero": w_zero}
    make_mask = {"lengths": _lengths, "raw": _raw_mask}.get(mask)
    sym = {"x": ["b", "s", HIDDEN], "mask": ["b"] if mask == "lengths" else ["b", "s"]}

    def feeds_at(b, s, seed, high=255):
        f = {"x": np.random.default_rng(seed).integers(0, high + 1, (b, s, HIDDEN)).astype(np.uint8)}
        if make_mask:
            f["mask"] = make_mask(b, s)
        return f
    inputs = ["x", "w", "bias", "x_scale", "w_scale", "mask" if mask else "", "x_zero", "w_zero"]
    model = ms_model("QAttention", feeds_at(B, S, 0), consts, inputs=inputs, attrs={"num_heads": HEADS}, sym=sym)
    vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(model)))
    floats = {"w": (w.astype(np.float32) * w_scale), "bias": consts["bias"]}
    for feeds in (feeds_at(1, 3, 1), feeds_at(3, 6, 2)):
        dequantized = {**feeds, "x": (feeds["x"].astype(np.float32) - 131) * np.float32(0.02)}
        reference = ms_model("Attention", dequantized, floats, inputs=["x", "w", "bias"] + (["mask"] if mask else []),
                             attrs={"num_heads": HEADS}, sym=sym)
        want = ort.InferenceSession(reference.SerializeToString(), providers=["CPUExecutionProvider"]).run(
            None, dequantized)[0]
        assert_close(vm.run(feeds)["y0"], want, *FLOAT_TOL, "y0")
    check(model, feeds_at(1, 3, 3, high=127), feeds_at(3, 6, 4, high=127))


def test_attention_with_past_gives_the_present():
    consts = {"w": rand(HIDDEN, 3 * HIDDEN, seed=1) * 0.5, "bias": rand(3 * HIDDEN, seed=2)}
    feeds = {"x": rand(B, S, HIDDEN), "past": rand(2, B, HEADS, 3, HEAD, seed=3)}
    model = ms_model("Attention", feeds, consts, inputs=["x", "w", "bias", "", "past"],
                     attrs={"num_heads": HEADS, "unidirectional": 1}, outputs=["out", "present"])
    check(model, feeds)


def test_attention_with_attention_bias():
    consts = {"w": rand(HIDDEN, 3 * HIDDEN, seed=1) * 0.5, "bias": rand(3 * HIDDEN, seed=2)}
    feeds = {"x": rand(B, S, HIDDEN), "attn_bias": rand(1, HEADS, S, S, seed=4)}
    model = ms_model("Attention", feeds, consts, inputs=["x", "w", "bias", "", "", "attn_bias"],
                     attrs={"num_heads": HEADS, "scale": 0.3})
    check(model, feeds)


def test_a_float16_attention_masking_a_whole_row_with_float32s_lowest():
    """optimum's -O4 (float16) keeps mask_filter_value -3.4e38, -inf in float16: a row whose keys
    are all masked softmaxed to NaN; onnxruntime's is uniform. The mask takes float16's lowest."""
    consts = {"w": (rand(HIDDEN, 3 * HIDDEN, seed=1) * 0.5).astype(np.float16),
              "bias": rand(3 * HIDDEN, seed=2).astype(np.float16)}
    mask = np.ones((B, S), np.int32)
    mask[1] = 0
    feeds = {"x": rand(B, S, HIDDEN).astype(np.float16), "mask": mask}
    model = ms_model("Attention", feeds, consts, inputs=["x", "w", "bias", "mask"],
                     attrs={"num_heads": HEADS, "mask_filter_value": float(np.finfo(np.float32).min)})
    check(model, feeds, tol=(2e-3, 2e-3))


def test_attention_with_start_positions_is_unsupported_by_name():
    model = ms_model("Attention", {"x": rand(B, S, HIDDEN), "mask": np.zeros(2 * B, np.int32)},
                     {"w": rand(HIDDEN, 3 * HIDDEN), "bias": rand(3 * HIDDEN)}, inputs=["x", "w", "bias", "mask"],
                     attrs={"num_heads": HEADS})
    with pytest.raises(UnsupportedOpError, match=r"Attention node \(domain com.microsoft, opset 1\): a 1-D mask"):
        relaxpack.from_onnx(model)


@pytest.mark.parametrize("with_bias, mask, past", [(False, None, False), (True, "raw", False), (True, None, True),
                                                   (False, "lengths", False)])
def test_multi_head_attention(with_bias, mask, past):
    kv_len = 7
    feeds = {"q": rand(B, S, HIDDEN), "k": rand(B, kv_len, HIDDEN, seed=1), "v": rand(B, kv_len, HIDDEN, seed=2)}
    consts = {"bias": rand(3 * HIDDEN, seed=3)} if with_bias else {}
    inputs = ["q", "k", "v", "bias" if with_bias else "", "", "", "", ""]
    if mask:
        feeds["mask"] = _lengths(B, kv_len) if mask == "lengths" else _raw_mask(B, kv_len)
        inputs[4] = "mask"
    outputs = ["out"]
    if past:
        feeds["past_k"], feeds["past_v"] = rand(B, HEADS, 3, HEAD, seed=4), rand(B, HEADS, 3, HEAD, seed=5)
        inputs[6:8] = ["past_k", "past_v"]
        outputs += ["present_k", "present_v"]
    while inputs[-1] == "":
        inputs.pop()
    model = ms_model("MultiHeadAttention", feeds, consts, inputs=inputs, attrs={"num_heads": HEADS},
                     outputs=outputs)
    check(model, feeds)


@pytest.mark.parametrize("layout", ["bnsh", "bsd", "bsd_no_heads"])
@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("start", [False, True], ids=["position_ids", "start_position"])
def test_rotary_embedding(layout, interleaved, start):
    """onnxruntime's transformer optimizer (optimum -O4 on Llama): (batch, heads, seq, size) or
    (batch, seq, heads * size) inputs, position ids per token or one start position."""
    max_pos, seq = 12, 5
    consts = {"cos": np.cos(rand(max_pos, HEAD // 2, seed=5)), "sin": np.sin(rand(max_pos, HEAD // 2, seed=6))}
    shape = {"bnsh": (B, HEADS, seq, HEAD)}.get(layout, (B, seq, HIDDEN))
    positions = np.array([3], np.int64) if start else np.array([[0, 1, 2, 3, 4], [6, 7, 8, 9, 10]], np.int64)
    feeds = {"x": rand(*shape), "pos": positions}
    attrs = {"interleaved": interleaved, **({"num_heads": HEADS} if layout == "bsd" else {})}
    sym = {"x": ["b", HEADS, "s", HEAD] if layout == "bnsh" else ["b", "s", HIDDEN],
           "pos": [1] if start else ["b", "s"]}
    model = ms_model("RotaryEmbedding", feeds, consts, inputs=["x", "pos", "cos", "sin"], attrs=attrs, sym=sym)
    check(model, feeds)


def test_rotary_embedding_of_part_of_each_head():
    consts = {"cos": np.cos(rand(8, 1, seed=5)), "sin": np.sin(rand(8, 1, seed=6))}
    feeds = {"x": rand(B, HEADS, 3, HEAD), "pos": np.array([[0, 1, 2], [5, 6, 7]], np.int64)}
    model = ms_model("RotaryEmbedding", feeds, consts, inputs=["x", "pos", "cos", "sin"],
                     attrs={"num_heads": HEADS, "rotary_embedding_dim": 2})
    check(model, feeds)
