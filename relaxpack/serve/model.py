"""A served model: one loaded archive, a bounded pool of VMs over it, optional dynamic batching,
and the statistics Triton's statistics extension reports.

The archive is memory-mapped once; its :class:`~relaxpack.runtime.InferenceSession`
keeps a VM per concurrent call, and a thread pool of ``max_concurrency``
threads bounds the calls (numpy's kernels release the GIL, so they overlap).
Requests beyond that wait in the pool's queue. Options that reach the VM (BLAS
threads today, run budgets when the runtime has them) ride in the
:class:`~relaxpack.runtime.SessionOptions` given here.
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import numpy as np

from ..runtime import InferenceSession, SessionOptions, load
from .batching import DynamicBatcher
from .signature import Signature, signature_of

log = logging.getLogger(__name__)

VERSION = "1"   # an archive is one version of its model


@dataclass(frozen=True)
class Batching:
    """Dynamic batching: at most ``max_size`` rows per execution, a request waiting at most ``delay_ms``."""

    max_size: int
    delay_ms: float = 0.0


@dataclass
class _Duration:
    count: int = 0
    ns: int = 0

    def add(self, seconds: float, count: int = 1) -> None:
        self.count += count
        self.ns += int(seconds * 1e9)

    def as_json(self) -> dict:
        return {"count": self.count, "ns": self.ns}


@dataclass
class Statistics:
    """What Triton's statistics extension reports of a model (the parts that have a meaning here)."""

    inference_count: int = 0       # inferences done: rows along the batch dim for a batching model, else requests
    execution_count: int = 0       # model executions that finished (a batch of requests is one)
    last_inference: int = 0        # ms since the epoch
    success: _Duration = field(default_factory=_Duration)
    fail: _Duration = field(default_factory=_Duration)
    queue: _Duration = field(default_factory=_Duration)
    compute_infer: _Duration = field(default_factory=_Duration)

    def as_json(self, name: str) -> dict:
        zero = {"count": 0, "ns": 0}
        return {"name": name, "version": VERSION, "last_inference": self.last_inference,
                "inference_count": self.inference_count, "execution_count": self.execution_count,
                "inference_stats": {"success": self.success.as_json(), "fail": self.fail.as_json(),
                                    "queue": self.queue.as_json(), "compute_input": dict(zero),
                                    "compute_infer": self.compute_infer.as_json(), "compute_output": dict(zero),
                                    "cache_hit": dict(zero), "cache_miss": dict(zero)},
                "batch_stats": [], "memory_usage": []}


class ServedModel:
    """A model the server answers for, by ``name``, from the archive at ``path``."""

    def __init__(self, name: str, path: Path | str, *, max_concurrency: int = 1,
                 options: SessionOptions | None = None, batching: Batching | None = None):
        self.name = name
        self.path = Path(path)
        self.exe = load(self.path, mmap=bool(getattr(options, "use_mmap", True)))
        self.signature: Signature = signature_of(self.exe, name)
        self.session = InferenceSession(self.exe, options)
        self.max_concurrency = max_concurrency
        self.stats = Statistics()
        self._outputs = [o.name for o in self.signature.outputs]
        self._pool = ThreadPoolExecutor(max_concurrency, thread_name_prefix=f"relaxpack-{name}")
        self.batch_dim = self.signature.batch_dim()
        #: why dynamic batching, asked for, is off for this model (None when it is on or not asked for)
        self.no_batching_reason: str | None = None
        self.batcher = self._batcher(batching) if batching is not None else None

    def _batcher(self, batching: Batching) -> DynamicBatcher | None:
        """The batcher, where the model's signature allows batching (else None and the reason noted):
        rows of a batch must be independent, which the model's author asserts by asking for it."""
        if self.batch_dim is None:
            self.no_batching_reason = (
                f"no symbolic dim leads every input and output (and appears nowhere else in them): inputs "
                f"{_dims_text(self.signature.inputs)}, outputs {_dims_text(self.signature.outputs)}")
            return None
        lo, hi = self.signature.ranges.get(self.batch_dim, (0, None))
        if hi is not None and hi < 2:
            self.no_batching_reason = f"its batch dim {self.batch_dim} ranges over {lo}..{hi}"
            return None
        return DynamicBatcher(self.execute, max_rows=batching.max_size, delay=batching.delay_ms / 1000,
                              slots=self.max_concurrency, row_range=(lo, hi))

    # ------------------------------------------------------------ answering
    def metadata(self) -> dict:
        """The model metadata endpoint's answer."""
        return {"name": self.name, "versions": [VERSION], "platform": "relaxpack",
                "inputs": [t.metadata() for t in self.signature.inputs],
                "outputs": [t.metadata() for t in self.signature.outputs]}

    async def infer(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Every output for ``inputs`` (by name), through the batcher when there is one."""
        start = time.perf_counter()
        try:
            if self.batcher is not None:
                outputs = await self.batcher.submit(inputs)
            else:
                outputs = await self.execute(inputs)
        except Exception:
            self.stats.fail.add(time.perf_counter() - start)
            raise
        self.stats.success.add(time.perf_counter() - start)
        self.stats.inference_count += self._inferences(inputs)
        self.stats.last_inference = int(time.time() * 1000)
        return outputs

    async def execute(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """One execution of the model on a free VM of the pool (waiting for one if all are busy)."""
        submitted = time.perf_counter()
        loop = asyncio.get_running_loop()
        started, outputs = await loop.run_in_executor(self._pool, self._run, inputs)
        self.stats.queue.add(started - submitted)
        self.stats.compute_infer.add(time.perf_counter() - started)
        self.stats.execution_count += 1
        return outputs

    def _run(self, inputs: Mapping[str, np.ndarray]) -> tuple[float, dict[str, np.ndarray]]:
        started = time.perf_counter()
        return started, dict(zip(self._outputs, self.session.run(self._outputs, inputs)))

    def _inferences(self, inputs: Mapping[str, np.ndarray]) -> int:
        if self.batch_dim is None:
            return 1
        first = np.asarray(inputs[self.signature.inputs[0].name])
        return int(first.shape[0]) if first.ndim else 1

    async def close(self) -> None:
        if self.batcher is not None:
            await self.batcher.close()
        self._pool.shutdown(wait=False, cancel_futures=True)


def _dims_text(specs) -> str:
    return ", ".join(f"{t.name}[{', '.join(str(d) for d in t.dims)}]" for t in specs)


__all__ = ["Batching", "ServedModel", "Statistics", "VERSION"]
