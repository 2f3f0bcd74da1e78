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


def parse_steps(steps) -> tuple:
    """``nn.attention``'s ``steps`` attribute (ops/definitions/attention.py) as the kernel runs
    them: ``("multiply" or "divide", factor)``, ``("add", i)`` or ``("where", cond, fill,
    scores_first)``, operand indices counted from the first operand after q, k and v. A step of
    another form (an archive's) is a ValueError."""
    if not isinstance(steps, tuple):
        raise ValueError(f"nn.attention: steps must be a tuple, got {steps!r}")
    parsed = []
    for step in steps:
        kind = step[0] if isinstance(step, tuple) and step else None
        refs = step[1:3] if kind in ("add", "where") else ()
        if any(type(i) is not int or i < 3 for i in refs):
            raise ValueError(f"nn.attention: step {step!r} names no operand after q, k and v")
        if kind == "scale" and len(step) == 3 and isinstance(step[1], float) and type(step[2]) is bool:
            parsed.append(("divide" if step[2] else "multiply", step[1]))
        elif kind == "add" and len(step) == 2:
            parsed.append(("add", step[1] - 3))
        elif kind == "where" and len(step) == 4 and type(step[3]) is bool:
            parsed.append(("where", step[1] - 3, step[2] - 3, step[3]))
        else:
            raise ValueError(f"nn.attention: unknown step {step!r}")
    return tuple(parsed)


def _step_lines(steps: tuple) -> tuple[list[str], int, int] | None:
    """The source lines of steps :func:`parse_steps` gave, their operand count and scale count;
    None for too many steps or operands."""
    if len(steps) > MAX_STEPS:
        return None
    lines, indices, scales = [], [], 0
    for step in steps:
        kind = step[0]
        if kind in ("multiply", "divide"):
            lines.append(f"{'MUL' if kind == 'multiply' else 'DIV'}(S, F{scales}, S)")
            scales += 1
        elif kind == "add":
            indices.append(step[1])
            lines.append(f"ADD(S, a{step[1]}, S)")
        else:
            cond, fill, scores_first = step[1:]
            indices += [cond, fill]
            lines.append(f"COPYTO(S, a{fill}, where=NOT(a{cond}))" if scores_first else f"COPYTO(S, a{fill}, where=a{cond})")
    if any(i >= MAX_OPERANDS for i in indices):
        return None
    return lines, max(indices, default=-1) + 1, scales


def fast_call(steps, first, soft, second, slow):
    """``(call, bind)`` for these steps (as :func:`parse_steps` gives them), or None. ``call(q, k, v, *operands, out, workspace)``
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
