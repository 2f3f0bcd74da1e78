"""Fit and check the float32 GELU of ``relaxpack/runtime/kernels/_math.py``.

    python scripts/gelu32_fit.py            # the fits' errors and coefficients
    python scripts/gelu32_fit.py --check 16 # max ulp per region on every 16th float32 of [-8, 8]

GELU is ``relu(x) - a * Phi(-a)`` with ``a = |x|``. The kernel takes
``Phi(-a) = 1/2 - a * (S0 + u * S(u))`` (``u = a^2``) below 1 and
``exp(-u / 2) * P(a) / R(a)`` above; ``S`` is a relative minimax fit (a
linear program) of ``(erf(a / sqrt 2) / (2 a) - S0) / u`` on ``[0, 1]``,
``P / R`` a (3, 4) rational minimax fit (differential correction) of the
Mills ratio ``Phi(-a) exp(a^2 / 2)`` on ``[1, 8]``, normalized so that R's
leading coefficient is 1. The check compares the kernel (and, when
installed, onnxruntime's Gelu) with ``x * erfc(-x / sqrt 2) / 2`` in
float64. Needs scipy (a development tool, not a runtime dependency).
"""

from __future__ import annotations

import argparse

import numpy as np
import scipy.optimize
import scipy.special

S0 = float(np.float32(1 / np.sqrt(2 * np.pi)))


def _minimax(columns: np.ndarray, target: np.ndarray) -> tuple[np.ndarray, float]:
    """Coefficients c minimizing max |columns @ c - target| (a linear program)."""
    n, k = columns.shape
    cost = np.zeros(k + 1)
    cost[-1] = 1
    ub = np.block([[columns, -np.ones((n, 1))], [-columns, -np.ones((n, 1))]])
    res = scipy.optimize.linprog(cost, A_ub=ub, b_ub=np.concatenate([target, -target]),
                                 bounds=[(None, None)] * k + [(0, None)], method="highs")
    return res.x[:-1], res.x[-1]


def mills(a: np.ndarray) -> np.ndarray:
    return 0.5 * scipy.special.erfcx(a / np.sqrt(2))


def fit_near(degree: int = 3, top: float = 1.0) -> tuple[np.ndarray, float]:
    a = np.linspace(1e-4, top, 6000)
    u = a * a
    want = 0.5 * scipy.special.erf(a / np.sqrt(2)) / a
    columns = np.stack([u ** (j + 1) for j in range(degree + 1)], 1) / want[:, None]
    return _minimax(columns, 1 - S0 / want)


def fit_tail(m: int = 3, n: int = 4, low: float = 1.0, high: float = 8.0, rounds: int = 30):
    a = np.unique(np.concatenate([np.linspace(low, high, 4000),
                                  low + (high - low) * (1 - np.cos(np.linspace(0, np.pi / 2, 4000)))]))
    want = mills(a)
    previous, best = np.ones_like(a), (np.inf, None)
    for _ in range(rounds):
        columns = np.stack([a ** k for k in range(m + 1)] + [-want * a ** k for k in range(1, n + 1)], 1)
        coefs, _ = _minimax(columns / (want * previous)[:, None], 1 / previous)
        p, r = coefs[:m + 1], np.concatenate([[1], coefs[m + 1:]])
        denominator = np.polyval(r[::-1], a)
        if np.any(denominator <= 0):
            break
        err = np.max(np.abs(np.polyval(p[::-1], a) / denominator / want - 1))
        if err < best[0]:
            best = (err, (p / r[-1], r / r[-1]))
        previous = denominator
    return best


def check(step: int) -> None:
    from relaxpack.runtime.kernels import get_kernel

    kernel = get_kernel("nn.gelu").fn
    top = np.float32(8).view(np.uint32)
    half = np.arange(0, top, step, dtype=np.uint32).view(np.float32)
    x = np.concatenate([-half[::-1], half])
    edges = (-8, -5.5, -3, -1, -0.1, 8)
    runtimes = {"relaxpack": None}          # the kernel, called below
    try:
        import onnxruntime as ort
        from onnx import TensorProto, helper

        graph = helper.make_graph([helper.make_node("Gelu", ["x"], ["y"], domain="com.microsoft")], "g",
                                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None])])
        model = helper.make_model(graph, ir_version=9, opset_imports=[helper.make_opsetid("", 17),
                                                                      helper.make_opsetid("com.microsoft", 1)])
        options = ort.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = 1
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        runtimes["onnxruntime Gelu"] = lambda v: session.run(None, {"x": v})[0]
    except ImportError:
        pass
    worst = {name: [0.0] * (len(edges) - 1) for name in runtimes}
    for start in range(0, x.size, 1 << 22):
        xs = x[start:start + (1 << 22)]
        want = xs.astype(np.float64) * 0.5 * scipy.special.erfc(-xs.astype(np.float64) / np.sqrt(2))
        spacing = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
        for name, run in runtimes.items():
            if run is None:
                got = np.empty_like(xs)
                kernel(xs, out=got)
            else:
                got = run(xs)
            err = np.abs(got.astype(np.float64) - want) / spacing
            for i, (lo, hi) in enumerate(zip(edges, edges[1:])):
                inside = (xs >= lo) & (xs < hi)
                if inside.any():
                    worst[name][i] = max(worst[name][i], float(err[inside].max()))
    for name, values in worst.items():
        print(name, ", ".join(f"[{lo}, {hi}): {v:.3g} ulp" for (lo, hi), v in zip(zip(edges, edges[1:]), values)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", type=int, metavar="STEP", help="check the kernel on every STEP-th float32")
    args = parser.parse_args()
    if args.check:
        check(args.check)
        return
    near, err = fit_near()
    print(f"near: S0 {S0!r}, S {tuple(map(float, near))}, relative error {err:.2e}")
    err, (p, r) = fit_tail()
    print(f"tail: P {tuple(map(float, p))}, R {tuple(map(float, r))}, relative error {err:.2e}")


if __name__ == "__main__":
    main()
