"""A picklable predictor for data-parallel engines: Dask (bags, dataframes, futures) and Ray Data.

A :class:`Predictor` holds an archive's path and its manifest's sha256, not
the archive: shipped to a worker process it opens the archive there, once
per process (memory-mapped, so the workers of a machine share the weights
through the page cache), and refuses a file that changed meanwhile. The
workers must see the archive at the same path (a shared or copied file).

>>> predict = Predictor("model.rpk")                                    # doctest: +SKIP
>>> bag.map(predict)                                   # dask.bag of {"x": array} dicts
>>> ds.map_batches(Predictor, fn_constructor_args=("model.rpk",), batch_format="numpy",
...                concurrency=2)                      # Ray Data: dict of arrays per batch
>>> ddf.map_partitions(Predictor("model.rpk", columns={"X": features}))   # pandas partitions

Numpy and the runtime only: this module imports neither Dask nor Ray.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from ..errors import InputError
from ..runtime import InferenceSession, SessionOptions, load
from ..runtime.executable import reopen

#: sessions opened in this process, by (path, manifest sha256): each task reuses its worker's
_SESSIONS: dict[tuple[str, str], InferenceSession] = {}
_SESSIONS_LOCK = threading.Lock()


class Predictor:
    """Runs the archive at ``path`` on batches of inputs; pickles as the path (see the module).

    ``outputs``: the output names to return (default all). ``threads``: BLAS threads while it runs
    (default: as they are; one per worker process is the usual choice when workers share a machine).
    ``columns``: for data frames, an input made of several columns, stacked along its last axis
    (``{"X": ["sepal_length", "sepal_width", ...]}``); other inputs take the column of their name.
    """

    def __init__(self, path: str | os.PathLike, outputs: Sequence[str] | None = None, threads: int | None = None,
                 columns: Mapping[str, Sequence[str]] | None = None):
        exe = load(path)                   # checked here, where a mistake is the caller's to see
        self.path = exe.archive["path"]
        self.manifest_sha256 = exe.archive["manifest_sha256"]
        self.threads = threads
        main = exe.function("main")
        every = [o.name for o in main.output_info()]
        unknown = sorted(set(outputs or ()) - set(every))
        if unknown:
            raise InputError(f"unknown output(s) {unknown}; the model's outputs are {every}")
        self.outputs = list(outputs) if outputs else every
        self.inputs = {p.name: p.dtype for p in main.params}
        unknown = sorted(set(columns or ()) - set(self.inputs))
        if unknown:
            raise InputError(f"columns for unknown input(s) {unknown}; the model's inputs are {list(self.inputs)}")
        self.columns = {name: list(cols) for name, cols in (columns or {}).items()}
        _remember(self.path, self.manifest_sha256, exe, threads)

    def __getstate__(self) -> dict:
        return {k: getattr(self, k) for k in ("path", "manifest_sha256", "threads", "outputs", "inputs", "columns")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)

    def __repr__(self) -> str:
        return f"Predictor({self.path!r}, outputs={self.outputs!r})"

    # ------------------------------------------------------------ running
    @property
    def session(self) -> InferenceSession:
        """This process's session over the archive (opened on first use; thread-safe)."""
        key = (self.path, self.manifest_sha256)
        session = _SESSIONS.get(key)
        if session is None:
            session = _remember(self.path, self.manifest_sha256, reopen(self.path, self.manifest_sha256),
                                self.threads)
        return session

    def predict(self, feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """The outputs for one input set (a dict of arrays by input name), by output name."""
        return dict(zip(self.outputs, self.session.run(self.outputs, feeds)))

    def __call__(self, batch):
        """``batch``: a dict of arrays (a dask.bag item, Ray Data's ``"numpy"`` format) -> a dict of
        arrays; or a pandas DataFrame (``map_partitions``, Ray's ``"pandas"`` format) with a column per
        input, each cell a row's value -> a DataFrame with a column per output."""
        if hasattr(batch, "columns") and hasattr(batch, "iloc"):
            return self._frame(batch)
        return self.predict(batch)

    def _frame(self, frame):
        wanted = {name: self.columns.get(name) or [name] for name in self.inputs}
        missing = sorted({c for cols in wanted.values() for c in cols} - set(frame.columns))
        if missing:
            raise InputError(f"the frame lacks column(s) {missing} for the model's inputs {list(self.inputs)}")
        feeds = {name: _as_dtype(frame[cols].to_numpy() if name in self.columns else _column(frame[name]),
                                 self.inputs[name]) for name, cols in wanted.items()}
        outputs = self.predict(feeds)
        data = {name: (list(value) if np.ndim(value) > 1 else value) for name, value in outputs.items()}
        return type(frame)(data, index=frame.index)

    # ------------------------------------------------------------ files
    def score_file(self, source: str | os.PathLike, target: str | os.PathLike) -> dict:
        """Run the input set in the ``.npz`` file ``source`` and write its outputs to the ``.npz``
        ``target`` (whole or not at all); a short record of what was done."""
        source, target = Path(source), Path(target)
        feeds = read_inputs(source)
        outputs = self.predict(feeds)
        write_outputs(target, outputs)
        return {"input": source.name, "output": str(target), "outputs": {k: list(v.shape) for k, v in outputs.items()}}


def read_inputs(path: Path) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` file by name (no pickles; each header checked and the size bounded
    before its data is read: runtime/input_files.py); a file that is not one is an InputError."""
    from ..runtime.input_files import read_npz
    try:
        return read_npz(path)
    except InputError as err:   # named by the file's name, as the batch report lists files
        raise InputError(str(err).replace(os.fspath(path), Path(path).name)) from None


def write_outputs(path: Path, outputs: Mapping[str, np.ndarray]) -> None:
    """Write ``outputs`` as ``path`` through a temporary file and a rename (runtime/safe_write.py), so
    a reader never sees half of one and no symlink, device or folder at ``path`` is replaced."""
    from ..runtime.safe_write import write_with
    arrays = {k: np.asarray(v) for k, v in outputs.items()}
    write_with(path, lambda f: np.savez(f, **arrays))


def _remember(path: str, digest: str, exe, threads: int | None) -> InferenceSession:
    with _SESSIONS_LOCK:
        session = _SESSIONS.get((path, digest))
        if session is None:
            options = SessionOptions()
            options.intra_op_num_threads = threads or 0
            session = _SESSIONS[path, digest] = InferenceSession(exe, options)
        return session


def _as_dtype(values: np.ndarray, dtype: str | None) -> np.ndarray:
    """Frame values in the input's dtype where numpy casts them within their kind (pandas makes
    float64 and int64 columns; a float32 input takes the former)."""
    if dtype is None or dtype == "string" or values.dtype == object:
        return values
    target = np.dtype(dtype)
    return values.astype(target) if np.can_cast(values.dtype, target, "same_kind") else values


def _column(series) -> np.ndarray:
    """A frame column as one array: cells that are arrays stack along a new first axis."""
    values = series.to_numpy()
    if values.dtype == object and len(values) and isinstance(values[0], (np.ndarray, list, tuple)):
        return np.stack([np.asarray(v) for v in values])
    return values


__all__ = ["Predictor", "read_inputs", "write_outputs"]
