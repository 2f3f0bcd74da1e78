"""The benchmark suite: relaxpack against onnxruntime and onnx's reference evaluator.

    python -m benchmarks.run --size full -n 15       # writes benchmarks/results/results.{md,json}
    python -m benchmarks.zoo                         # the zoo against onnxruntime and tract: zoo.{md,json}

:mod:`benchmarks.models` builds the models (seeded random weights, ``onnx.helper`` only, so no
torch and no downloads); :mod:`benchmarks.run` times them. Benchmarks never assert on speed.
"""
