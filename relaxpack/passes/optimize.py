"""The core optimization passes, in the order of one round.

>>> mod = Sequential(core_passes(), name="Optimize", opt_level=1)(mod)    # doctest: +SKIP

- CanonicalizeBindings first, so the other passes see values, not aliases;
- FoldConstant evaluates what is constant;
- SimplifyShapes decides shape arithmetic and casts with the dim ranges
  (after folding, which may have made dims static);
- EliminateCommonSubexpr merges what is now the same (it leaves aliases);
- CanonicalizeBindings removes those aliases and the redundant tuples;
- DeadCodeElimination drops everything the rewrites left unused.

One round reaches a fixed point on the models in tests/ (a second round
changes nothing); the pipeline may repeat it for IR from other sources.
"""

from __future__ import annotations

from .canonicalize_bindings import canonicalize_bindings
from .dead_code_elimination import dead_code_elimination
from .eliminate_common_subexpr import eliminate_common_subexpr
from .fold_constant import fold_constant
from .infra import Pass
from .simplify_shapes import simplify_shapes


def core_passes() -> list[Pass]:
    """The core optimization passes (opt level 1) for one round, in order."""
    return [
        canonicalize_bindings,
        fold_constant,
        simplify_shapes,
        eliminate_common_subexpr,
        canonicalize_bindings,
        dead_code_elimination,
    ]


__all__ = ["core_passes", "canonicalize_bindings", "dead_code_elimination", "eliminate_common_subexpr",
           "fold_constant", "simplify_shapes"]
