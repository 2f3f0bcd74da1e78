"""Binding rules: local rewrites of one value that need their pass's state
(the values vars are bound to, known constants, unified dims), used by
CanonicalizeBindings, FoldConstant and SimplifyShapes. A rule is data --
``(name, pattern, check, rewrite)`` -- and a failed check returns its reason,
as with the rewrite tables of :mod:`.rules` (which match trees of calls).

>>> apply_rules(RULES, node, env)       # the first rule that applies, or None  # doctest: +SKIP
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BindingRule:
    """A local rewrite of one value that needs its pass's state (the values
    vars are bound to, known constants, unified dims): ``pattern`` says where
    it may apply, ``check(node, env)`` returns ``None`` when it does or the
    reason why not, ``rewrite(node, env)`` makes the new node. The reasons
    make "why did this not simplify" printable (:func:`explain`).

    Rules that match trees of calls use :mod:`relaxpack.passes.core.rules`.
    """

    name: str
    pattern: Callable[[Any], bool]
    check: Callable[[Any, Any], str | None]
    rewrite: Callable[[Any, Any], Any]


def apply_rules(rules, node, env):
    """The rewrite of the first rule whose pattern matches and whose check
    passes, or None; failed checks are logged at debug level."""
    for rule in rules:
        if not rule.pattern(node):
            continue
        reason = rule.check(node, env)
        if reason is None:
            return rule.rewrite(node, env)
        log.debug("%s does not apply: %s", rule.name, reason)
    return None


def explain(rules, node, env) -> dict[str, str | None]:
    """For each rule whose pattern matches ``node``: None if it applies, else why not."""
    return {rule.name: rule.check(node, env) for rule in rules if rule.pattern(node)}
