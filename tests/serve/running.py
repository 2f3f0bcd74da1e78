"""``relaxpack serve`` as a separate process on a free loopback port, for the tests to talk to."""

from __future__ import annotations

import contextlib
import os
import queue
import re
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Iterator

REPO = Path(__file__).resolve().parents[2]
_LISTENING = re.compile(r"^listening on http://([^ ]+):(\d+) ")


@contextlib.contextmanager
def running_server(*args, timeout: float = 120) -> Iterator[tuple[str, list[str]]]:
    """``relaxpack serve ARGS... --port 0``: yields ``host:port`` and the lines it printed before
    listening; stopped with SIGINT (a graceful shutdown) at the end, which must end it with code 0."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    with tempfile.TemporaryFile("w+") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "relaxpack.cli", "serve", *map(str, args), "--port", "0"],
                                stdout=subprocess.PIPE, stderr=stderr, text=True, env=env)
        lines: queue.Queue = queue.Queue()
        reader = threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout] + [lines.put(None)],
                                  daemon=True)
        reader.start()
        printed = []
        try:
            while True:
                line = lines.get(timeout=timeout)
                if line is None:
                    stderr.seek(0)
                    raise RuntimeError(f"relaxpack serve ended ({proc.wait()}) before listening: "
                                       f"{''.join(printed)}{stderr.read()}")
                printed.append(line)
                found = _LISTENING.match(line)
                if found:
                    break
            yield f"{found.group(1)}:{found.group(2)}", printed
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                code = proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                code = proc.wait()
            stderr.seek(0)
            errors = stderr.read()
        assert code == 0, f"relaxpack serve ended with {code}: {errors}"
        assert "Traceback" not in errors, errors
