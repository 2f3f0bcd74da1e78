"""Dynamic batching: requests that arrive close together run as one call along the batch dim.

As Triton's dynamic batcher: a batch is formed when a VM of the model's pool is
free, from the oldest waiting request and the later ones that can join it (the
same dtypes and the same dims after the batch dim), until it holds
``max_rows`` rows or the oldest request has waited ``delay`` seconds. The
inputs are concatenated along axis 0, run once, and each output is split back
by the rows each request brought. So under load, while every VM is busy,
batches grow by themselves; an idle server answers after ``delay``.

A request that cannot join others runs alone: one whose inputs disagree on the
batch dim, one whose batch dim is outside its range on its own (the run
reports it), one larger than ``max_rows``. If a batch fails, its requests run
one by one, so a bad request gets its own error and the others their results.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Awaitable, Callable, Mapping

import numpy as np

log = logging.getLogger(__name__)

Run = Callable[[Mapping[str, np.ndarray]], Awaitable[dict]]


@dataclass
class _Item:
    inputs: Mapping[str, np.ndarray]
    rows: int
    key: tuple | None       # requests with equal keys can share a batch; None runs alone
    future: asyncio.Future
    arrived: float


class DynamicBatcher:
    """Batches calls of ``run`` (one execution of the model) along axis 0.

    ``slots``: executions at once (the size of the model's VM pool); ``row_range``: the batch dim's
    allowed values (lo, hi or None), which each request must meet alone and a batch must not exceed.
    """

    def __init__(self, run: Run, *, max_rows: int, delay: float, slots: int, row_range: tuple[int, int | None]):
        lo, hi = row_range
        self.max_rows = max_rows if hi is None else min(max_rows, hi)
        self.delay = delay
        self._run = run
        self._lo, self._hi = lo, hi
        self._slots_count = slots
        self._queue: list[_Item] = []
        self._arrived: asyncio.Event | None = None
        self._slots: asyncio.Semaphore | None = None
        self._dispatcher: asyncio.Task | None = None
        self.batches = 0            # executions of more than one request

    async def submit(self, inputs: Mapping[str, np.ndarray]) -> dict:
        """The outputs for ``inputs``, computed in a batch with other requests where they fit."""
        loop = asyncio.get_running_loop()
        self._start(loop)
        rows, key = self._key(inputs)
        item = _Item(inputs, rows, key, loop.create_future(), loop.time())
        self._queue.append(item)
        self._arrived.set()
        return await item.future

    async def close(self) -> None:
        if self._dispatcher is not None:
            self._dispatcher.cancel()
            try:
                await self._dispatcher
            except asyncio.CancelledError:
                pass
            self._dispatcher = None

    # ------------------------------------------------------------ forming batches
    def _start(self, loop) -> None:
        if self._dispatcher is None or self._dispatcher.done():
            self._arrived = asyncio.Event()
            self._slots = asyncio.Semaphore(self._slots_count)
            self._dispatcher = loop.create_task(self._dispatch(), name="relaxpack-batcher")

    def _key(self, inputs: Mapping[str, np.ndarray]) -> tuple[int, tuple | None]:
        arrays = [np.asarray(a) for a in inputs.values()]
        if not arrays or any(a.ndim == 0 for a in arrays):
            return 0, None
        rows = arrays[0].shape[0]
        alone = (any(a.shape[0] != rows for a in arrays) or rows < self._lo or rows > self.max_rows)
        if alone:
            return rows, None
        return rows, tuple(sorted((name, np.asarray(a).dtype.str, np.asarray(a).shape[1:])
                                  for name, a in inputs.items()))

    async def _dispatch(self) -> None:
        while True:
            await self._slots.acquire()             # a VM is free: form the next batch for it
            try:
                batch = await self._collect()
            except BaseException:
                self._slots.release()
                raise
            task = asyncio.get_running_loop().create_task(self._execute(batch))
            task.add_done_callback(lambda _: self._slots.release())

    async def _collect(self) -> list[_Item]:
        loop = asyncio.get_running_loop()
        while True:
            self._queue = [item for item in self._queue if not item.future.done()]   # clients gone
            if self._queue:
                break
            self._arrived.clear()
            await self._arrived.wait()
        first = self._queue[0]
        deadline = first.arrived + self.delay
        while True:
            batch = self._joining(first)
            remaining = deadline - loop.time()
            if first.key is None or sum(i.rows for i in batch) >= self.max_rows or remaining <= 0:
                break
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), remaining)
            except asyncio.TimeoutError:
                pass
        chosen = {id(item) for item in batch}
        self._queue = [item for item in self._queue if id(item) not in chosen]
        return batch

    def _joining(self, first: _Item) -> list[_Item]:
        """``first`` and the waiting requests after it that fit in its batch, oldest first."""
        if first.key is None:
            return [first]
        batch, rows = [first], first.rows
        for item in self._queue[1:]:
            if item.key == first.key and rows + item.rows <= self.max_rows and not item.future.done():
                batch.append(item)
                rows += item.rows
        return batch

    # ------------------------------------------------------------ running them
    async def _execute(self, batch: list[_Item]) -> None:
        if len(batch) == 1:
            await self._alone(batch[0])
            return
        self.batches += 1
        try:
            joined = {name: np.concatenate([item.inputs[name] for item in batch]) for name in batch[0].inputs}
            outputs = await self._run(joined)
            parts = _split(outputs, [item.rows for item in batch])
        except Exception as err:   # noqa: BLE001 -- each request then runs alone and gets its own answer
            log.info("a batch of %d requests failed (%s); running them one by one", len(batch), err)
            await asyncio.gather(*(self._alone(item) for item in batch))
            return
        for item, part in zip(batch, parts):
            if not item.future.done():
                item.future.set_result(part)

    async def _alone(self, item: _Item) -> None:
        try:
            result = await self._run(item.inputs)
        except Exception as err:   # noqa: BLE001 -- the request's own error, handed to it
            if not item.future.done():
                item.future.set_exception(err)
            return
        if not item.future.done():
            item.future.set_result(result)


def _split(outputs: Mapping[str, np.ndarray], rows: list[int]) -> list[dict]:
    """Each request's share of the batch's ``outputs``: its rows of every output, in order."""
    total = sum(rows)
    for name, value in outputs.items():
        if np.ndim(value) == 0 or np.shape(value)[0] != total:
            raise ValueError(f"output {name!r} has shape {np.shape(value)}, not {total} rows of the batch")
    bounds = np.cumsum([0, *rows])
    return [{name: value[start:end] for name, value in outputs.items()}
            for start, end in zip(bounds[:-1], bounds[1:])]


__all__ = ["DynamicBatcher"]
