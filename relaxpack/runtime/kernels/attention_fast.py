"""The specialized ``nn.attention`` call on kept whole scores, as generated source.

At a few tokens an attention's four calls (the scores' product, its steps, the softmax, the
second product) cost ~9 us, and the Python around them (operands packed into a tuple, a loop
over the steps, attribute loads) ~1 us more: more than the unfused instructions cost in the
compiled VM. So each instruction gets a function written for its steps: its operands by name,
one line per step, the kept arrays in closure cells, as ``fused_elementwise`` does
(:mod:`.fused_specialized`). The source is made from the steps' kinds and operand indices only
(ints, checked, at most :data:`MAX_OPERANDS` and :data:`MAX_STEPS`); values reach it through
the closure, so an archive cannot inject code. Steps of another form get no such function (the
kernel's generic call runs them).
"""

from __future__ import annotations

import numpy as np

#: the most operands (after q, k and v) and steps a generated call takes (exports write 1-3)
MAX_OPERANDS = 8
MAX_STEPS = 8

_MISSING = object()     # a kept array no call is given: the first call and after a reset


def _step_lines(steps) -> tuple[list[str], int, int] | None:
    """The steps' source lines, their operand count and scale count; None for steps of another
    form (or too many)."""
    if not isinstance(steps, tuple) or len(steps) > MAX_STEPS:
        return None
    lines, indices, scales = [], [], 0
    for step in steps:
        kind = step[0] if isinstance(step, tuple) and step else None
        refs = [i for i in step[1:3] if kind in ("add", "where")] if kind else []
        if any(not (type(i) is int and 3 <= i < 3 + MAX_OPERANDS) for i in refs):
            return None
        indices.extend(refs)
        if kind == "scale" and len(step) == 3 and type(step[2]) is bool:
            lines.append(f"{'DIV' if step[2] else 'MUL'}(S, F{scales}, S)")
            scales += 1
        elif kind == "add" and len(step) == 2:
            lines.append(f"ADD(S, a{step[1] - 3}, S)")
        elif kind == "where" and len(step) == 4 and type(step[3]) is bool:
            cond, fill = step[1] - 3, step[2] - 3
            lines.append(f"COPYTO(S, a{fill}, where=NOT(a{cond}))" if step[3] else f"COPYTO(S, a{fill}, where=a{cond})")
        else:
            return None
    return lines, max(indices, default=2) - 2, scales


def fast_call(steps, first, soft, second, slow):
    """``(call, bind)`` for these steps, or None. ``call(q, k, v, *operands, out, workspace)``
    runs ``first``, the steps, ``soft`` and ``second`` on the kept scores and probabilities when
    ``out`` is the kept one (or, where the kept one owned its memory, a new array of its shape:
    a result allocated every run), ``workspace`` the kept one (any, where None is kept: the
    scores are the instruction's own) and the operands the kept objects (or of the kept
    shapes); else ``slow(q, k, v, operands, out, workspace)``. ``bind(state)`` keeps ``(out,
    workspace or None, (q, k, v, *operands) or None each, scores, probs, form, factors)``;
    ``bind(None)``, or a state of another operand count, forgets them."""
    made = _step_lines(steps)
    if made is None:
        return None
    lines, n, scales = made
    operands = [f"a{j}" for j in range(n)]
    kept = ["Q", "K", "V"] + [f"A{j}" for j in range(n)]
    factors = [f"F{j}" for j in range(scales)]
    state = ["O", "W", "S", "P", "FORM", "OWNS", "OUT"] + kept + factors
    given = ["q", "k", "v"] + operands
    same = " and ".join(f"{a} is {b}" for a, b in zip(given, kept))
    form = f"({', '.join(f'{a}.shape' for a in given)}, out.dtype)"
    source = "\n".join([
        "def factory(first, soft, second, slow, MUL, DIV, ADD, COPYTO, NOT, ndarray):",
        f"    {' = '.join(state)} = MISSING",
        f"    def call(q, k, v, {''.join(a + ', ' for a in operands)}*rest, out, workspace=None):",
        f"        if (out is O or OWNS and out.__class__ is ndarray and out.base is None and (out.shape, out.dtype) == OUT) and "
        f"(workspace is W or W is None) and not rest and ({same} or {form} == FORM):",
        "            first(q, k, out=S)",
        *(f"            {line}" for line in lines),
        "            soft(S, out=P)",
        "            second(P, v, out=out)",
        "            return",
        f"        slow(q, k, v, ({''.join(a + ', ' for a in operands)}*rest,), out, workspace)",
        "    def bind(state):",
        f"        nonlocal {', '.join(state)}",
        f"        if state is None or len(state[2]) != {3 + n}:",
        f"            {' = '.join(state)} = MISSING",
        "            return",
        f"        O, W, ({''.join(a + ', ' for a in kept)}), S, P, FORM, ({''.join(f + ', ' for f in factors)}) = state",
        "        OWNS, OUT = O.base is None, (O.shape, O.dtype)",
        "        if OWNS:",
        "            O = MISSING        # (a result owning its memory is not held past the call)",
        "    return call, bind"])
    namespace = {"MISSING": _MISSING}
    exec(compile(source, f"<attention {len(lines)} steps>", "exec"), namespace)  # noqa: S102 (see the docstring)
    return namespace["factory"](first, soft, second, slow, np.multiply, np.divide, np.add, np.copyto,
                                np.logical_not, np.ndarray)
