"""The served model in this process, without HTTP: the bounded VM pool and the dynamic batcher
(which requests share a batch, how results are split back, what happens when a batch fails)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from relaxpack.errors import ShapeError
from relaxpack.runtime import InferenceSession
from relaxpack.serve.model import Batching, ServedModel
from tests.serve.models import lookup_onnx, pooled_onnx, save

rng = np.random.default_rng(3)


@pytest.fixture(scope="module")
def lookup(tmp_path_factory):
    path = tmp_path_factory.mktemp("batching") / "lookup.rpk"
    save(lookup_onnx(), path, batch=(1, 10), k=(1, 16))
    return path


def ids(batch, k=3):
    return {"ids": rng.integers(0, 50, (batch, k), dtype=np.int64)}


def run_all(model, feeds):
    """Submit every feed at once (as concurrent requests do); each one's outputs, or its error."""
    async def main():
        try:
            return await asyncio.gather(*(model.infer(f) for f in feeds), return_exceptions=True)
        finally:
            await model.close()
    return asyncio.run(main())


def expected(path, feed):
    return InferenceSession(path).run(None, feed)[0]


def test_waiting_requests_run_as_one_batch_and_get_their_own_rows(lookup):
    model = ServedModel("lookup", lookup, batching=Batching(max_size=8, delay_ms=200))
    feeds = [ids(1), ids(3), ids(2), ids(2)]
    results = run_all(model, feeds)
    for feed, got in zip(feeds, results):
        np.testing.assert_array_equal(got["out"], expected(lookup, feed))
    assert model.stats.execution_count == 1 and model.batcher.batches == 1
    assert model.stats.inference_count == 8 and model.stats.success.count == 4


def test_a_batch_holds_at_most_max_size_rows_and_the_dim_range(lookup):
    model = ServedModel("lookup", lookup, batching=Batching(max_size=64, delay_ms=200))
    assert model.batcher.max_rows == 10      # the batch dim ranges over 1..10
    feeds = [ids(4) for _ in range(5)]       # 20 rows: batches of 4 + 4, 4 + 4, then 4 alone
    results = run_all(model, feeds)
    for feed, got in zip(feeds, results):
        np.testing.assert_array_equal(got["out"], expected(lookup, feed))
    assert model.stats.execution_count == 3 and model.batcher.batches == 2


def test_requests_that_differ_after_the_batch_dim_do_not_mix(lookup):
    model = ServedModel("lookup", lookup, batching=Batching(max_size=8, delay_ms=200))
    feeds = [ids(1, k=3), ids(1, k=5), ids(1, k=3), ids(1, k=5)]
    results = run_all(model, feeds)
    for feed, got in zip(feeds, results):
        np.testing.assert_array_equal(got["out"], expected(lookup, feed))
    assert model.stats.execution_count == 2 and model.batcher.batches == 2


def test_a_failing_batch_runs_its_requests_alone(lookup):
    model = ServedModel("lookup", lookup, batching=Batching(max_size=8, delay_ms=200))
    feeds = [ids(2), ids(2), ids(2)]
    feeds[1]["ids"][0, 0] = 50               # past the table: the batch fails, then this request alone
    results = run_all(model, feeds)
    assert isinstance(results[1], ShapeError) and "index 50 is out of range" in str(results[1])
    for i in (0, 2):
        np.testing.assert_array_equal(results[i]["out"], expected(lookup, feeds[i]))
    # the batch was tried once; the executions that finished are the two good requests alone
    assert model.batcher.batches == 1 and model.stats.execution_count == 2
    assert model.stats.fail.count == 1 and model.stats.success.count == 2


def test_a_request_outside_the_dim_range_alone_is_not_hidden_by_a_batch(lookup):
    model = ServedModel("lookup", lookup, batching=Batching(max_size=8, delay_ms=200))
    feeds = [ids(2), {"ids": np.zeros((0, 3), np.int64)}]    # batch 0 is outside 1..10
    results = run_all(model, feeds)
    np.testing.assert_array_equal(results[0]["out"], expected(lookup, feeds[0]))
    assert "outside its range 1..10" in str(results[1])


def test_at_most_max_concurrency_vms(lookup):
    model = ServedModel("lookup", lookup, max_concurrency=2)
    feeds = [ids(2) for _ in range(12)]
    results = run_all(model, feeds)
    for feed, got in zip(feeds, results):
        np.testing.assert_array_equal(got["out"], expected(lookup, feed))
    assert 1 <= len(model.session._idle) <= 2 and model.stats.execution_count == 12


def test_a_model_whose_rows_are_not_independent_is_not_batched(tmp_path):
    path = tmp_path / "pooled.rpk"
    save(pooled_onnx(), path, batch=(1, 10))
    model = ServedModel("pooled", path, batching=Batching(max_size=8))
    assert model.batcher is None and "no symbolic dim leads every input and output" in model.no_batching_reason
