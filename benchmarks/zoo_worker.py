"""One zoo model in a worker process of ``benchmarks.zoo``: load, check, time interleaved.

The parent runs ``python -m benchmarks.zoo --worker NAME --result FILE`` with BLAS limited to one
thread; this module builds the runtimes, checks each one's outputs at every manifest shape by the
zoo's own judge (``tests/models/zoo/judge.py``) and times them in rounds:

- relaxpack: the archive built at ``-O`` (default 2) from the model converted with no dims (one
  archive for every shape), saved and loaded back as a deployment would.
- onnxruntime, 1 thread (``intra_op_num_threads = inter_op_num_threads = 1``).
- tract (PyPI ``tract``), where it is installed and loads the model: made per shape with the
  inputs' concrete shapes as input facts (tract's documented way; with the files' symbolic dims it
  refuses most of the zoo) from a copy of the model without ``value_info`` (the dynamo exports
  annotate intermediates with symbolic shapes tract will not unify with concrete ones).
- onnxruntime with its default options (its own thread pool), timed after the others, alone: its
  pool threads spin for a while after each run and would slow whatever ran next.

A round runs each interleaved runtime ``k`` times back to back (``k`` per runtime, so that its
round lasts about ``--round-ms``), the starting runtime rotating from round to round; a runtime's
figure is the median over rounds of its mean time per call, and a ratio is the median over rounds
of the two runtimes' per-round quotient (both measured within milliseconds of each other).
"""

from __future__ import annotations

import gc
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

TRACT_TYPES = {"float32": "f32", "float16": "f16", "float64": "f64", "int64": "i64", "int32": "i32",
               "int8": "i8", "uint8": "u8", "bool": "bool"}


class Timed:
    """One runtime at one shape: a call, its per-round times, its state."""

    def __init__(self, name: str, fn):
        self.name, self.fn = name, fn
        self.rounds: list[float] = []
        self.per_round = 1
        self.status, self.note, self.first = "ok", "", None

    def warm(self, round_s: float, max_calls: int) -> None:
        """First call (its outputs are checked), then size ``per_round`` from the next calls' time."""
        try:
            self.first = self.fn()
            start, n = time.perf_counter(), 0
            while n < 2 or time.perf_counter() - start < min(round_s, 0.2) and n < max_calls:
                self.fn()
                n += 1
            each = (time.perf_counter() - start) / n
            self.per_round = max(1, min(max_calls, int(round_s / max(each, 1e-9))))
        except Exception as err:  # noqa: BLE001 - a runtime that fails is a result
            self.fail(err)

    def fail(self, err: BaseException) -> None:
        self.status, self.note = "error", f"{type(err).__name__}: {first_line(err)}"

    def one_round(self) -> None:
        fn, n = self.fn, self.per_round
        gc.collect()
        gc.disable()
        try:
            start = time.perf_counter()
            for _ in range(n):
                fn()
            self.rounds.append((time.perf_counter() - start) / n)
        except Exception as err:  # noqa: BLE001
            self.fail(err)
        finally:
            gc.enable()

    def summary(self) -> dict:
        out = {"status": self.status, "note": self.note}
        if self.rounds and self.status == "ok":
            out.update(ms=1e3 * statistics.median(self.rounds), calls_per_round=self.per_round,
                       rounds_ms=[round(1e3 * t, 5) for t in self.rounds])
        return out


def time_interleaved(runners: list[Timed], rounds: int) -> None:
    """``rounds`` rounds of every working runner, the first one rotating."""
    for i in range(rounds):
        active = [r for r in runners if r.status == "ok"]
        if not active:
            return
        k = i % len(active)
        for r in active[k:] + active[:k]:
            r.one_round()


def round_ratio(a: Timed, b: Timed) -> float | None:
    """Median over rounds of ``a``'s time / ``b``'s time in the same round."""
    if a.status != "ok" or b.status != "ok" or not a.rounds or len(a.rounds) != len(b.rounds):
        return None
    return statistics.median(x / y for x, y in zip(a.rounds, b.rounds))


def first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0][:300] if text else type(err).__name__


# ------------------------------------------------------------------ the runtimes
def relaxpack_runner(path: Path, level: int, tmp: Path) -> tuple[dict, object]:
    """Convert with no dims, build at ``level``, save and load the archive; (facts, vm or None)."""
    import relaxpack
    from relaxpack.runtime import VirtualMachine, load
    facts: dict = {"status": "ok", "note": ""}
    try:
        start = time.perf_counter()
        exe = relaxpack.build(relaxpack.from_onnx(str(path)), opt_level=level)
        facts["convert_ms"] = 1e3 * (time.perf_counter() - start)
        facts["kernel_calls"] = exe.kernel_call_count()
        archive = tmp / "model.rpk"
        exe.save(archive)
        return facts, VirtualMachine(load(archive))
    except Exception as err:  # noqa: BLE001 - reported in the table
        facts.update(status="error", note=f"{type(err).__name__}: {first_line(err)}")
        return facts, None


def ort_session(path: Path, one_thread: bool):
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.log_severity_level = 3
    if one_thread:
        options.intra_op_num_threads = options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def tract_available() -> tuple[object | None, str]:
    """(the tract module, "") or (None, why not)."""
    try:
        import tract
        return tract, ""
    except Exception as err:  # noqa: BLE001 - not installed, or its library does not load here
        return None, f"tract not available: {type(err).__name__}: {first_line(err)}"


def tract_copy(path: Path, tmp: Path) -> Path:
    """The model without ``value_info`` (intermediates' shapes, which tract re-infers)."""
    import onnx
    model = onnx.load(str(path))
    del model.graph.value_info[:]
    out = tmp / "for_tract.onnx"
    onnx.save(model, str(out))
    return out


def tract_runnable(tract, path: Path, feeds: dict, order: list[str]):
    """A tract runnable for these inputs' shapes and dtypes (a TractError if tract refuses)."""
    model = tract.onnx().load(str(path))
    for i, name in enumerate(order):
        value = feeds[name]
        dtype = TRACT_TYPES.get(str(value.dtype))
        if dtype is None:
            raise TypeError(f"no tract type for {value.dtype}")
        model.set_input_fact(i, ",".join([*map(str, value.shape), dtype]))
    for i in range(model.output_count()):
        model.set_output_fact(i, None)
    runnable = model.into_model().into_runnable()
    inputs = [feeds[name] for name in order]
    return lambda: [t.to_numpy() for t in runnable.run(inputs)]


# ------------------------------------------------------------------ one model
def run_model(name: str, level: int, rounds: int, round_ms: float, use_tract: bool) -> dict:
    """Every shape of zoo model ``name``: checked and timed; the rows and the model's facts."""
    from tests.models.zoo.inputs import make_inputs
    from tests.models.zoo.judge import HERE, MODELS, judge_output, reference_runner

    entry = MODELS[name]
    path = HERE / entry["file"]
    order = [spec["name"] for spec in entry["inputs"]]
    with tempfile.TemporaryDirectory(prefix="rp-zoo-") as tmp:
        tmp = Path(tmp)
        facts, vm = relaxpack_runner(path, level, tmp)
        ort1, ort_default = ort_session(path, True), ort_session(path, False)
        outputs = [o.name for o in ort1.get_outputs()]
        reference = reference_runner(entry)
        tract, tract_note = tract_available() if use_tract else (None, "tract not asked for (--no-tract)")
        tract_path = tract_copy(path, tmp) if tract is not None else None
        rows = []
        for dims in entry["shapes"]:
            feeds = make_inputs(entry, dims)
            runners = []
            if vm is not None:
                runners.append(Timed("relaxpack", (lambda f: lambda: vm.run(f))(feeds)))
            runners.append(Timed("ort_1thread", (lambda f: lambda: ort1.run(None, f))(feeds)))
            tract_runner = None
            if tract is not None:
                try:
                    tract_runner = Timed("tract", tract_runnable(tract, tract_path, feeds, order))
                    runners.append(tract_runner)
                except Exception as err:  # noqa: BLE001 - tract refuses the model: said in the table
                    tract_note = f"tract: {type(err).__name__}: {first_line(err)}"
            for r in runners:
                r.warm(round_ms / 1e3, max_calls=1000)
            time_interleaved(runners, rounds)
            alone = Timed("ort_default", lambda: ort_default.run(None, feeds))
            alone.warm(round_ms / 1e3, max_calls=1000)
            time_interleaved([alone], rounds)
            by = {r.name: r for r in [*runners, alone]}
            want = reference(feeds)
            row = {"model": name, "dims": dims,
                   "input_shapes": ", ".join(f"{k} {_shape_text(v)}" for k, v in feeds.items())}
            for key in ("relaxpack", "ort_1thread", "tract", "ort_default"):
                runner = by.get(key)
                row[key] = runner.summary() if runner else {"status": "skipped",
                                                            "note": facts["note"] if key == "relaxpack" else tract_note}
            if "relaxpack" in by and by["relaxpack"].first is not None:
                got = by["relaxpack"].first
                row["relaxpack"]["check"] = check(entry, outputs, [got[k] for k in outputs], want, judge_output)
            if tract_runner is not None and tract_runner.first is not None:
                row["tract"]["check"] = check(entry, outputs, tract_runner.first, want, judge_output)
            row["ratio"] = round_ratio(by["relaxpack"], by["ort_1thread"]) if "relaxpack" in by else None
            row["tract_ratio"] = round_ratio(tract_runner, by["ort_1thread"]) if tract_runner else None
            rows.append(row)
    return {"model": name, "family": entry.get("family"), "judge": entry["judge"], "exporter": entry.get("exporter"),
            "relaxpack": facts, "rows": rows}


def _shape_text(value) -> str:
    """An input's shape, or a map input's size (a DictVectorizer's dict)."""
    return f"map of {len(value)}" if isinstance(value, dict) else str(list(np.shape(value)))


def check(entry: dict, names: list[str], got: list, want: list, judge_output) -> dict:
    """The zoo judge on every output: {"ok": bool, "problem": the first failure}."""
    if len(got) != len(want):
        return {"ok": False, "problem": f"{len(got)} outputs, the reference has {len(want)}"}
    for name, g, w in zip(names, got, want):
        problem = judge_output(entry, name, *(v if isinstance(v, (list, dict)) else np.asarray(v) for v in (g, w)))
        if problem:
            return {"ok": False, "problem": f"{name} {problem}"}
    return {"ok": True, "problem": ""}


def main(name: str, result: Path, level: int, rounds: int, round_ms: float, use_tract: bool) -> int:
    from .run import _environment
    tract, _ = tract_available() if use_tract else (None, "")
    out = run_model(name, level, rounds, round_ms, use_tract)
    out["environment"] = {**_environment(), "tract": tract.version() if tract is not None else None}
    result.write_text(json.dumps(out))
    return 0
