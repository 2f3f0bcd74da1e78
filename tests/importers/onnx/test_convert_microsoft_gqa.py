"""com.microsoft GroupQueryAttention against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

import relaxpack
from relaxpack.errors import UnsupportedOpError

from .test_convert_microsoft import check, ms_model, rand

HEADS, KV_HEADS, HEAD = 4, 2, 32
MAX_POSITIONS = 32
INPUTS = ["query", "key", "value", "past_key", "past_value", "seqlens_k", "total_sequence_length", "cos_cache",
          "sin_cache", "position_ids", "attention_bias", "head_sink"]
OUTPUTS = ["out", "present_key", "present_value"]
SYM = {"query": ["b", "s", HEADS * HEAD], "key": ["b", "s", KV_HEADS * HEAD], "value": ["b", "s", KV_HEADS * HEAD],
       "past_key": ["b", KV_HEADS, "p", HEAD], "past_value": ["b", KV_HEADS, "p", HEAD], "seqlens_k": ["b"],
       "position_ids": ["b", "s"], "attention_bias": ["b", HEADS, "s", "t"]}


def _caches(width=HEAD // 2):
    angles = rand(MAX_POSITIONS, width, seed=11)
    return {"cos_cache": np.cos(angles), "sin_cache": np.sin(angles)}


def _feeds(batch, seq, totals=None, *, buffer=None, packed=False, seed=0):
    """``seq`` new tokens per row; row b holds ``totals[b]`` tokens in all (default ``seq``, a
    prompt). With ``buffer`` (slots), a past cache whose first ``totals[b] - seq`` slots row b
    uses (a decode step); a first prompt shorter than ``seq`` is right-padded."""
    totals = [seq] * batch if totals is None else totals
    feeds = {}
    if packed:
        feeds["query"] = rand(batch, seq, (HEADS + 2 * KV_HEADS) * HEAD, seed=seed)
    else:
        feeds["query"] = rand(batch, seq, HEADS * HEAD, seed=seed)
        feeds["key"], feeds["value"] = (rand(batch, seq, KV_HEADS * HEAD, seed=seed + i) for i in (1, 2))
    if buffer is not None:
        feeds["past_key"], feeds["past_value"] = (rand(batch, KV_HEADS, buffer, HEAD, seed=seed + i) for i in (3, 4))
    feeds["seqlens_k"] = np.array(totals, np.int32) - 1
    feeds["total_sequence_length"] = np.array(max(totals), np.int32)
    return feeds


def _model(feeds, consts=None, **attrs):
    names = [n if n in feeds or n in (consts or {}) else "" for n in INPUTS]
    while names[-1] == "":
        names.pop()
    sym = {**SYM, "query": ["b", "s", feeds["query"].shape[2]]}   # packed QKV is wider
    return ms_model("GroupQueryAttention", feeds, consts, inputs=names, outputs=OUTPUTS, sym=sym,
                    attrs={"num_heads": HEADS, "kv_num_heads": KV_HEADS, **attrs})


@pytest.mark.parametrize("packed", [False, True], ids=["qkv", "packed"])
@pytest.mark.parametrize("rotary", [None, "halves", "interleaved"])
def test_prompt(packed, rotary):
    """A first prompt: no past; at batch 3 the rows are right-padded to 6, 4 and 1 tokens."""
    consts, attrs = {}, {}
    if rotary:
        consts, attrs = _caches(), {"do_rotary": 1, "rotary_interleaved": int(rotary == "interleaved")}
    model = _model(_feeds(2, 5, packed=packed), consts, **attrs)
    check(model, _feeds(1, 3, packed=packed, seed=1), _feeds(3, 6, [6, 4, 1], packed=packed, seed=2))


@pytest.mark.parametrize("packed", [False, True], ids=["qkv", "packed"])
@pytest.mark.parametrize("rotary", [False, True], ids=["plain", "rotary"])
def test_decode(packed, rotary):
    """One new token after a past: the past exactly as long as the longest row (onnxruntime-genai
    on CPU; shorter rows leave slots), or a longer shared buffer (present keeps its length)."""
    consts, attrs = (_caches(), {"do_rotary": 1}) if rotary else ({}, {})
    model = _model(_feeds(2, 1, [5, 5], buffer=4, packed=packed), consts, **attrs)
    check(model, _feeds(1, 1, [5], buffer=4, packed=packed, seed=1),
          _feeds(3, 1, [8, 3, 6], buffer=7, packed=packed, seed=2),
          _feeds(2, 1, [4, 7], buffer=9, packed=packed, seed=3))


def test_a_later_prompt_after_a_past():
    """Several new tokens after a past (batch 1 only, as onnxruntime requires): causal from the
    past's end, rotary positions counting on from it."""
    model = _model(_feeds(1, 3, [7], buffer=4), _caches(), do_rotary=1)
    check(model, _feeds(1, 3, [7], buffer=4, seed=1), _feeds(1, 5, [11], buffer=6, seed=2),
          _feeds(1, 2, [9], buffer=9, seed=3))


def test_an_empty_past_before_the_first_prompt():
    """onnxruntime-genai feeds a past of length 0 with the prompt."""
    model = _model(_feeds(2, 5, buffer=0), _caches(), do_rotary=1)
    check(model, _feeds(1, 3, buffer=0, seed=1), _feeds(3, 6, [6, 2, 5], buffer=0, seed=2))


@pytest.mark.parametrize("window", [0, 1, 3])
def test_local_window(window):
    """Mistral's sliding window: each query sees its last ``window`` keys (itself included); 0
    keys give zeros, as in onnxruntime."""
    model = _model(_feeds(2, 5), local_window_size=window)
    check(model, _feeds(1, 7, seed=1), _feeds(3, 6, [6, 3, 5], seed=2))
    model = _model(_feeds(2, 1, [5, 5], buffer=4), local_window_size=window)
    check(model, _feeds(1, 1, [4], buffer=3, seed=4), _feeds(3, 1, [8, 3, 6], buffer=7, seed=3))


@pytest.mark.parametrize("attrs", [{"scale": 0.3}, {"softcap": 1.5}, {"smooth_softmax": 1}, {"causal": 0}],
                         ids=["scale", "softcap", "smooth_softmax", "bidirectional"])
def test_attributes(attrs):
    model = _model(_feeds(2, 5), **attrs)
    check(model, _feeds(1, 3, seed=1), _feeds(3, 6, [6, 4, 1], seed=2))
    model = _model(_feeds(2, 1, [5, 5], buffer=4), **attrs)
    check(model, _feeds(1, 1, [4], buffer=3, seed=4), _feeds(3, 1, [8, 3, 6], buffer=7, seed=3))


def test_local_window_with_softcap_and_smooth_softmax():
    """Without right padding: for a padding query whose window reaches past its row's end,
    onnxruntime's result depends on its code path (with softcap or smooth_softmax it is not the
    plain softmax's, which relaxpack matches in test_local_window)."""
    attrs = {"softcap": 2.0, "local_window_size": 2, "smooth_softmax": 1}
    model = _model(_feeds(2, 5), **attrs)
    check(model, _feeds(1, 3, seed=1), _feeds(3, 6, seed=2))
    model = _model(_feeds(2, 1, [5, 5], buffer=4), **attrs)
    check(model, _feeds(1, 1, [4], buffer=3, seed=4), _feeds(3, 1, [8, 3, 6], buffer=7, seed=3))


def test_head_sink():
    """gpt-oss's per-head sink logit in the softmax's denominator."""
    model = _model(_feeds(2, 5), {"head_sink": rand(HEADS, seed=7)})
    check(model, _feeds(1, 3, seed=1), _feeds(3, 6, [6, 4, 1], seed=2))
    model = _model(_feeds(2, 1, [5, 5], buffer=4), {"head_sink": rand(HEADS, seed=7)})
    check(model, _feeds(1, 1, [4], buffer=3, seed=4), _feeds(3, 1, [8, 3, 6], buffer=7, seed=3))


def test_attention_bias():
    """attention_bias's columns are absolute key positions (total_sequence_length of them), also
    when a longer shared buffer makes the present longer."""
    def with_bias(feeds, seed):
        batch, seq = feeds["query"].shape[:2]
        return {**feeds, "attention_bias": rand(batch, HEADS, seq, int(feeds["total_sequence_length"]), seed=seed)}
    model = _model(with_bias(_feeds(2, 5), 5))
    check(model, with_bias(_feeds(1, 3, seed=1), 6), with_bias(_feeds(3, 6, [6, 4, 1], seed=2), 7))
    model = _model(with_bias(_feeds(2, 1, [5, 5], buffer=4), 8))
    check(model, with_bias(_feeds(3, 1, [8, 3, 6], buffer=7, seed=3), 9),
          with_bias(_feeds(2, 1, [4, 7], buffer=9, seed=4), 10))


def test_position_ids():
    """Rotary positions from position_ids: per token when decoding; a first prompt counts on from
    the first element in every row (onnxruntime reads only that one)."""
    def with_ids(feeds, ids):
        return {**feeds, "position_ids": np.array(ids, np.int64)}
    model = _model(with_ids(_feeds(2, 5), [[0] * 5] * 2), _caches(), do_rotary=1)
    check(model, with_ids(_feeds(1, 3, seed=1), [[4, 9, 1]]), with_ids(_feeds(2, 4, seed=2), [[2] * 4, [7] * 4]))
    model = _model(with_ids(_feeds(2, 1, [5, 5], buffer=4), [[4]] * 2), _caches(), do_rotary=1)
    check(model, with_ids(_feeds(3, 1, [8, 3, 6], buffer=7, seed=3), [[9], [2], [20]]))


def test_rotary_of_part_of_each_head():
    """A cos_cache narrower than half a head rotates only the first features (phi's partial rotary)."""
    model = _model(_feeds(2, 5), _caches(width=HEAD // 4), do_rotary=1)
    check(model, _feeds(1, 3, seed=1), _feeds(3, 6, [6, 4, 1], seed=2))


def test_float16():
    """float16 scores and softmax in float32, as onnxruntime computes them."""
    def half(feeds):
        return {n: a.astype(np.float16) if a.dtype == np.float32 else a for n, a in feeds.items()}
    caches = {n: a.astype(np.float16) for n, a in _caches().items()}
    model = _model(half(_feeds(2, 5)), caches, do_rotary=1)
    check(model, half(_feeds(1, 3, seed=1)), half(_feeds(3, 6, [6, 4, 1], seed=2)), tol=(2e-3, 2e-3))
    model = _model(half(_feeds(2, 1, [5, 5], buffer=4)), caches, do_rotary=1)
    check(model, half(_feeds(3, 1, [8, 3, 6], buffer=7, seed=3)), tol=(2e-3, 2e-3))


@pytest.mark.parametrize("form, match", [
    ({"attrs": {"sliding_window_cache": 1, "local_window_size": 4}}, "sliding_window_cache=1"),
    ({"attrs": {"qk_output": 1}}, "the output_qk output"),
    ({"int8_past": True}, "a quantized KV cache"),
    ({"norms": True}, "q_norm_weight/k_norm_weight"),
])
def test_unsupported_forms_are_refused_by_name(form, match):
    feeds, consts = _feeds(2, 1, [5, 5], buffer=4), {}
    names = INPUTS[:7]
    if form.get("int8_past"):
        feeds["past_key"], feeds["past_value"] = (np.zeros((2, KV_HEADS, 4, HEAD), np.int8) for _ in range(2))
        consts = {"k_scale": np.float32(0.1), "v_scale": np.float32(0.1)}
        names += ["", "", "", "", "", "k_scale", "v_scale"]
    if form.get("norms"):
        consts = {"q_norm": np.ones(HEAD, np.float32), "k_norm": np.ones(HEAD, np.float32)}
        names += ["", "", "", "", "", "", "", "q_norm", "k_norm"]
    model = ms_model("GroupQueryAttention", feeds, consts, inputs=names, outputs=OUTPUTS, sym=SYM,
                     attrs={"num_heads": HEADS, "kv_num_heads": KV_HEADS, **form.get("attrs", {})})
    with pytest.raises(UnsupportedOpError, match=rf"GroupQueryAttention node \(domain com.microsoft, opset 1\): "
                                                 rf".*{match}"):
        relaxpack.from_onnx(model)
