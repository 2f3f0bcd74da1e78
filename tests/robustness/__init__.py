"""Robustness: differential testing against onnxruntime, malformed models,
run-time inputs and concurrency."""
