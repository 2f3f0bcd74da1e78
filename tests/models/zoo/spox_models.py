"""A silero-VAD-like model built with spox, as the real silero_vad.onnx is.

The real one is a spox graph whose top-level If on ``sr == 16000`` inlines
two TorchScript exports (16 kHz and 8 kHz weights). Each computes an STFT
magnitude by a fixed Conv1d over the reflect-padded chunk, four Conv1d +
ReLU encoder layers, then the pieces that scripted torch code leaves in the
graph: ``x.squeeze(2)`` exported as ``If(dim 2 == 1, Squeeze, Identity)`` (so
the rank of what follows depends on a dim's value), an LSTMCell whose
``is_batched`` test is ``Size(Shape(x)) == 2`` with an ``If`` that unsqueezes
(an ONNX LSTM of one step on the cell's state) and one that squeezes its
results back, the new state concatenated from them, a 1x1 Conv1d, Sigmoid,
another squeeze-If and a mean over time. A chunk has one length per rate (one frame after the
encoder), as in silero. Inputs and outputs have unknown dims ("?"), as spox writes
them. Weights are random (seeded), sizes small (16 channels, state 16).
"""

from __future__ import annotations

import numpy as np
import onnx

from .generate import HERE, seed_of

HIDDEN = 16
RATES = {16000: dict(window=16, hop=8, pad=8), 8000: dict(window=8, hop=4, pad=4)}


def stft_basis(window: int) -> np.ndarray:
    """(2 * (window // 2 + 1), 1, window): the real and imaginary Fourier rows with a Hann window."""
    bins = window // 2 + 1
    t = np.arange(window)
    hann = 0.5 - 0.5 * np.cos(2 * np.pi * t / window)
    angle = 2 * np.pi * np.outer(np.arange(bins), t) / window
    return np.concatenate([np.cos(angle) * hann, -np.sin(angle) * hann])[:, None, :].astype(np.float32)


def vad_branch(op, x, state, rate: int, rng: np.random.Generator):
    """One sample rate's network: (batch, samples) and state (2, batch, HIDDEN) -> (batch, 1), new state."""
    cfg = RATES[rate]

    def const(value):
        return op.constant(value=np.asarray(value))

    def weight(*shape):
        return const((rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32))

    padded = op.pad(op.unsqueeze(x, const([1])), const([0, 0, 0, 0, 0, cfg["pad"]]), mode="reflect")
    spec = op.conv(padded, const(stft_basis(cfg["window"])), strides=[cfg["hop"]])
    bins = cfg["window"] // 2 + 1
    real = op.slice(spec, const([0]), const([bins]), const([1]))
    imag = op.slice(spec, const([bins]), const([2 * bins]), const([1]))
    h = op.sqrt(op.add(op.pow(real, const(np.float32(2))), op.pow(imag, const(np.float32(2)))))
    for c_in, stride in ((bins, 1), (HIDDEN, 2), (HIDDEN, 2), (HIDDEN, 2)):
        h = op.relu(op.conv(h, weight(HIDDEN, c_in, 3), weight(HIDDEN), pads=[1, 1], strides=[stride]))
    h = squeeze_if(op, h, 2)
    # LSTMCell(h, (state[0], state[1])), scripted: unbatched input gets a batch axis first
    batched = op.equal(op.size(op.shape(h)), const(np.int64(2)))
    (h,) = op.if_(op.not_(batched), then_branch=lambda: [op.unsqueeze(h, const([0]))],
                  else_branch=lambda: [op.identity(h)])
    h0 = op.slice(state, const([0]), const([1]), const([0]))
    c0 = op.slice(state, const([1]), const([2]), const([0]))
    _, h1, c1 = op.lstm(op.unsqueeze(h, const([0])), weight(1, 4 * HIDDEN, HIDDEN), weight(1, 4 * HIDDEN, HIDDEN),
                        weight(1, 8 * HIDDEN), initial_h=h0, initial_c=c0, hidden_size=HIDDEN)
    h1, c1 = op.squeeze(h1, const([0])), op.squeeze(c1, const([0]))
    # the cell's result loses the batch axis again when its input had none (each a squeeze-If)
    h1, c1 = op.if_(op.not_(batched), then_branch=lambda: [squeeze_if(op, h1, 0), squeeze_if(op, c1, 0)],
                    else_branch=lambda: [op.identity(h1), op.identity(c1)])
    new_state = op.concat([op.unsqueeze(h1, const([0])), op.unsqueeze(c1, const([0]))], axis=0)
    y = op.relu(op.unsqueeze(h1, const([2])))
    y = op.sigmoid(op.conv(y, weight(1, HIDDEN, 1), weight(1)))
    y = squeeze_if(op, y, 1)
    output = op.unsqueeze(op.reduce_mean(y, axes=[1], keepdims=0), const([1]))
    # the ranks the real model's TorchScript exports declare for their outputs (spox's own inference
    # cannot see through the squeeze-Ifs); the real silero_vad.onnx says (?, 1) and (?, ?, ?)
    from spox._internal_op import unsafe_reshape
    return unsafe_reshape(output, (None, 1)), unsafe_reshape(new_state, (None, None, None))


def squeeze_if(op, x, axis: int):
    """torch's ``x.squeeze(axis)`` on a dim of unknown size, as the TorchScript exporter writes it."""
    def const(value):
        return op.constant(value=np.asarray(value))
    is_one = op.equal(op.gather(op.shape(x), const(axis), axis=0), const(np.int64(1)))
    (out,) = op.if_(is_one, then_branch=lambda: [op.squeeze(x, const([axis]))], else_branch=lambda: [op.identity(x)])
    return out


class SileroLike:
    """The recipe: one spox-built model, judged against onnxruntime at both sample rates."""

    name = "silero_vad_like"

    def names(self):
        return [self.name]

    def make(self):
        import spox
        import spox.opset.ai.onnx.v17 as op
        rng = np.random.default_rng(seed_of(self.name))
        x = spox.argument(spox.Tensor(np.float32, (None, None)))
        state = spox.argument(spox.Tensor(np.float32, (2, None, HIDDEN)))
        sr = spox.argument(spox.Tensor(np.int64, ()))
        fast = vad_branch(op, x, state, 16000, rng)
        slow = vad_branch(op, x, state, 8000, rng)
        is_16k = op.equal(sr, op.constant(value=np.int64(16000)))
        output, new_state = op.if_(is_16k, then_branch=lambda: fast, else_branch=lambda: slow)
        model = spox.build({"input": x, "state": state, "sr": sr}, {"output": output, "stateN": new_state})
        onnx.save(model, str(HERE / f"{self.name}.onnx"))
        shape = {"batch": 1, "samples": 64, "sample_rate": 16000}
        return [{"name": self.name, "file": f"{self.name}.onnx", "family": "silero",
                 "source": "silero-VAD-like (written here): STFT Conv1d, Conv1d encoder, squeeze-If, LSTMCell with "
                           "its is_batched If, If on the sample rate",
                 "exporter": "spox.build (inputs and outputs of unknown dims, as silero_vad.onnx)",
                 "inputs": [{"name": "input", "dtype": "float32", "shape": ["batch", "samples"], "scale": 0.1},
                            {"name": "state", "dtype": "float32", "shape": [2, "batch", HIDDEN], "scale": 0.5},
                            {"name": "sr", "dtype": "int64", "shape": [], "values": "dim", "dim": "sample_rate"}],
                 "outputs": ["output", "stateN"], "dynamic_dims": ["batch", "samples"], "fixed_dims": {},
                 "shapes": [shape, {"batch": 3, "samples": 32, "sample_rate": 8000},
                            {"batch": 2, "samples": 64, "sample_rate": 16000}],
                 "shape_note": "as silero's, a chunk has one length per sample rate (64 at 16 kHz, 32 at 8 kHz: "
                               "eight STFT frames, one after the encoder's strides)",
                 "judge": "float32"}], []


def spox_recipes() -> list:
    return [SileroLike()]
