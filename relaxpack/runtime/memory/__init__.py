"""Static memory planning: place buffers with known sizes and lifetimes in arenas.

Independent of the IR: the lowering computes :class:`Buffer` s (liveness) and
calls :func:`plan_memory`, which returns a verified :class:`Plan`.

>>> from relaxpack.runtime.memory import Buffer, plan_memory
>>> plan = plan_memory([Buffer("a", 100, 0, 1), Buffer("b", 64, 1, 2), Buffer("c", 64, 2, 3)])
>>> plan.offsets, plan.pool_sizes, plan.ratio()
({'a': 0, 'b': 128, 'c': 0}, {'global': 192}, 1.0)
"""

from .placement import (ALGORITHMS, DEFAULT_ALGORITHMS, best_fit, exact, greedy_by_conflicts,
                        greedy_by_size, hill_climb, plan_memory)
from .verify import ALIGNMENT, GLOBAL, Buffer, Plan, PlanError, align_up, lower_bound, naive_bytes, verify_plan

__all__ = ["ALIGNMENT", "ALGORITHMS", "DEFAULT_ALGORITHMS", "GLOBAL", "Buffer", "Plan", "PlanError", "align_up",
           "best_fit", "exact", "greedy_by_conflicts", "greedy_by_size", "hill_climb",
           "lower_bound", "naive_bytes", "plan_memory", "verify_plan"]
