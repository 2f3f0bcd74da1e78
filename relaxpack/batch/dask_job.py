"""Scoring a directory of input files on a Dask distributed cluster (the ``dask`` extra).

One task per ``INPUT_DIR/*.npz`` file: the worker runs the archive (a
:class:`~relaxpack.batch.predictor.Predictor`, opened once per worker
process) and writes ``OUTPUT_DIR/<same name>.npz``. What a retry cannot mend
-- a file that is not an ``.npz``, inputs of the wrong name, dtype or shape,
a value the model refuses -- is the task's answer, reported in the summary at
the end; anything else (an OS error, a worker lost) is raised, and Dask runs
the task again, ``retries`` times. A failed file never stops the others.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..errors import InputError, RelaxpackError
from .predictor import Predictor

log = logging.getLogger(__name__)

#: progress(done, total, failed) after each file
Progress = Callable[[int, int, int], None]


@dataclass
class BatchReport:
    """What a batch did: the files scored, those that failed with why, and how long it took."""

    total: int
    scored: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)      # input file name -> one-line reason
    seconds: float = 0.0
    workers: int = 0


def input_files(input_dir: Path) -> list[Path]:
    """The ``*.npz`` files of ``input_dir``, in name order."""
    if not input_dir.is_dir():
        raise InputError(f"input directory not found: {input_dir}")
    return sorted(p for p in input_dir.glob("*.npz") if p.is_file())


def score_directory(predictor: Predictor, input_dir: Path, output_dir: Path, client, *, retries: int = 2,
                    progress: Progress | None = None) -> BatchReport:
    """Score every ``input_dir/*.npz`` into ``output_dir`` on the cluster of the Dask ``client``."""
    from distributed import as_completed

    files = input_files(Path(input_dir))
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    report = BatchReport(total=len(files), workers=len(client.scheduler_info().get("workers", {})))
    start = time.perf_counter()
    futures = {client.submit(score_one, predictor, str(path), str(output_dir / path.name), retries=retries,
                             pure=False, key=f"relaxpack-score-{path.name}-{time.time_ns()}"): path.name
               for path in files}
    for future in as_completed(futures):
        name = futures[future]
        try:
            error = future.result()
        except Exception as err:   # noqa: BLE001 -- the retries are spent: this file failed, the rest go on
            error = _one_line(err)
        if error is None:
            report.scored.append(name)
        else:
            report.failed[name] = error
        if progress is not None:
            progress(len(report.scored) + len(report.failed), report.total, len(report.failed))
    report.scored.sort()
    report.seconds = time.perf_counter() - start
    return report


def score_one(predictor: Predictor, source: str, target: str) -> str | None:
    """The task: score one file. A reason (str) when the file itself is at fault, None when done;
    any other exception propagates, and Dask retries the task."""
    try:
        predictor.score_file(source, target)
    except RelaxpackError as err:
        return _one_line(err)
    return None


def local_cluster(workers: int, threads: int = 1):
    """A Dask client over a LocalCluster of ``workers`` processes of ``threads`` threads each."""
    from distributed import Client, LocalCluster

    cluster = LocalCluster(n_workers=workers, threads_per_worker=threads, processes=True,
                           dashboard_address=None, silence_logs=logging.ERROR)
    return Client(cluster)


def remote_client(address: str):
    """A Dask client of the scheduler at ``address`` (an unreachable one is a RelaxpackError)."""
    from distributed import Client

    try:
        return Client(address, timeout="10s")
    except (OSError, TimeoutError) as err:
        raise RelaxpackError(f"cannot reach the Dask scheduler at {address}: {_one_line(err)}") from None


def _one_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


__all__ = ["BatchReport", "input_files", "local_cluster", "remote_client", "score_directory", "score_one"]
