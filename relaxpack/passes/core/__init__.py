"""Pass infrastructure, apart from the passes: the pass classes and the
Sequential manager (infra.py), PassContext (context.py), instruments
(instruments.py), and the local-rewrite engine, its rule tables (rules.py)
and pattern language (patterns.py). Nothing here imports a pass."""
