"""Pass infrastructure, apart from the passes: the pass classes and the
Sequential manager (infra.py), PassContext (context.py), instruments
(instruments.py), and the rule engine (rules.py: one ``Rule`` for rewrite
tables, binding rules and layout rules) with its pattern language
(patterns.py). Nothing here imports a pass."""
