"""Pass infrastructure, apart from the passes: the pass classes and the
Sequential manager (infra.py), PassContext (context.py), instruments
(instruments.py), the local-rewrite engine with its rule tables (rules.py)
and pattern language (patterns.py), and the binding rules of the passes that
rewrite one value with their own state (binding_rules.py). Nothing here
imports a pass."""
