"""onnxruntime in a child process, for ``relaxpack check``.

onnxruntime can end the process it runs in: onnx-asr's wespeaker
preprocessor takes it down with SIGFPE on an 8-sample signal. In-process,
``relaxpack check`` would die with it, silently (exit 136). Here the session
lives in a spawned child that answers ``get_inputs``/``get_outputs``/``run``
over a pipe; a child that dies is an :class:`OnnxruntimeCrash` naming the
signal (the next ``run`` starts a new child), and onnxruntime's own errors
come back as :class:`OnnxruntimeFailure` (an ordinary Exception, as
onnxruntime's are).

>>> session = IsolatedSession(model.SerializeToString())     # doctest: +SKIP
>>> session.run(None, {"x": x})                              # doctest: +SKIP
"""

from __future__ import annotations

import multiprocessing
import signal
from types import SimpleNamespace

from .errors import RelaxpackError


class OnnxruntimeFailure(Exception):
    """onnxruntime refused the model or the inputs (its message)."""


class OnnxruntimeCrash(RelaxpackError):
    """The child running onnxruntime died (a signal or an exit)."""


class IsolatedSession:
    """The part of onnxruntime's InferenceSession that ``check`` uses, in a child process."""

    def __init__(self, model_bytes: bytes, threads: int | None = None, optimize: bool = True):
        self._model_bytes, self._threads, self._optimize = model_bytes, threads, optimize
        inputs, outputs = self._start()
        self._inputs = [SimpleNamespace(name=n) for n in inputs]
        self._outputs = [SimpleNamespace(name=n) for n in outputs]

    def _start(self):
        """A new child with the model loaded; its input and output names."""
        context = multiprocessing.get_context("spawn")
        self._crashed = False
        self._conn, child = context.Pipe()
        self._proc = context.Process(target=_serve, args=(child, self._model_bytes, self._threads, self._optimize),
                                      daemon=True)
        self._proc.start()
        child.close()
        return self._answer("loading the model")

    def get_inputs(self):
        return list(self._inputs)

    def get_outputs(self):
        return list(self._outputs)

    def run(self, output_names, feed):
        """onnxruntime's outputs; after a crash was reported, a new child runs this one."""
        if self._crashed:
            self._conn.close()
            self._start()
        try:
            self._conn.send(("run", output_names, dict(feed)))
        except (BrokenPipeError, ConnectionResetError):
            pass                # the child is gone: _answer says how it ended
        return self._answer("running the model")

    def close(self) -> None:
        if self._proc.is_alive():
            try:
                self._conn.send(("stop",))
            except (BrokenPipeError, OSError):
                pass
            self._proc.join(5)
        if self._proc.is_alive():
            self._proc.kill()
        self._conn.close()

    def __del__(self):
        try:
            self.close()
        except Exception:   # noqa: BLE001 - interpreter shutdown
            pass

    def _answer(self, doing: str):
        try:
            kind, payload = self._conn.recv()
        except (EOFError, ConnectionResetError):
            self._proc.join(5)
            self._crashed = True
            raise OnnxruntimeCrash(f"onnxruntime crashed ({_describe_exit(self._proc.exitcode)}) while "
                                   f"{doing}") from None
        if kind == "error":
            raise OnnxruntimeFailure(payload)
        return payload


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "no answer"
    if code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    return f"exit {code}"


def _serve(conn, model_bytes: bytes, threads: int | None, optimize: bool = True) -> None:
    """The child: load the session, then answer runs until told to stop."""
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.log_severity_level = 4     # its refusals come back as errors; no log lines
    if threads is not None:
        options.intra_op_num_threads = threads
    if not optimize:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        session = ort.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])
    except Exception as err:    # noqa: BLE001 - onnxruntime's own errors go back as text
        conn.send(("error", " ".join(str(err).split())))
        return
    conn.send(("ok", ([i.name for i in session.get_inputs()], [o.name for o in session.get_outputs()])))
    while True:
        message = conn.recv()
        if message[0] != "run":
            return
        try:
            conn.send(("ok", session.run(message[1], message[2])))
        except Exception as err:    # noqa: BLE001
            conn.send(("error", " ".join(str(err).split())))
