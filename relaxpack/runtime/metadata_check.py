"""The archive's build metadata: the keys tools read have the types they expect.

``metadata`` is free-form JSON, but ``inspect``, ``convert`` and the plan
plot read some of it (``ir``, ``stage``, ``source``, ``source_sha256`` and
the ``memory_plan`` figures). A hand-made archive with a list where the plan
figures belong must be refused at load with a message naming the key, not
crash a tool later with an AttributeError. Other keys are left alone.
"""

from __future__ import annotations

from ..errors import ArchiveError

_TEXT_KEYS = ("ir", "stage", "source")
_PLAN_INTS = ("buffers", "intermediates", "workspaces", "arena_bytes", "lower_bound_bytes", "naive_bytes",
              "workspace_bytes", "largest_workspace_bytes")
_PLAN_TEXTS = ("planned_at", "algorithm")
_MAX = 1 << 62


def check_metadata(meta: dict) -> None:
    """Raise ArchiveError if a key the tools read has the wrong type."""
    for key in _TEXT_KEYS:
        if key in meta and not isinstance(meta[key], str):
            _fail(key, "a string", meta[key])
    sha = meta.get("source_sha256")
    if sha is not None and not isinstance(sha, str):
        _fail("source_sha256", "a string or null", sha)
    plan = meta.get("memory_plan")
    if plan is None:
        return
    if not isinstance(plan, dict):
        _fail("memory_plan", "an object", plan)
    for key in _PLAN_INTS:
        if key in plan and plan[key] is not None and not _count(plan[key]):
            _fail(f"memory_plan.{key}", f"an int in 0..{_MAX} or null", plan[key])
    for key in _PLAN_TEXTS:
        if key in plan and plan[key] is not None and not isinstance(plan[key], str):
            _fail(f"memory_plan.{key}", "a string or null", plan[key])
    for key, needs in (("arena_bytes", ("lower_bound_bytes", "naive_bytes")),
                       ("workspace_bytes", ("largest_workspace_bytes", "workspaces"))):
        if plan.get(key) is not None:
            for other in needs:
                if plan.get(other) is None:
                    _fail(f"memory_plan.{other}", f"an int (memory_plan.{key} is given)", plan.get(other))
    pools = plan.get("pool_bytes", {})
    if not isinstance(pools, dict) or not all(isinstance(k, str) and _count(v) for k, v in pools.items()):
        _fail("memory_plan.pool_bytes", "an object of pool names to byte counts", pools)


def _count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _MAX


def _fail(key: str, expected: str, value) -> None:
    text = repr(value)
    raise ArchiveError(f"manifest: metadata.{key}: expected {expected}, got "
                       f"{text[:60] + '...' if len(text) > 60 else text}")


__all__ = ["check_metadata"]
