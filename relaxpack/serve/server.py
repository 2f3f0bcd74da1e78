"""Running the server: models loaded from archives, the app on uvicorn over a socket bound here.

The socket is bound before uvicorn starts, so a port in use is a one-line
error (and ``port=0`` picks a free one, which :func:`listen` reports).
"""

from __future__ import annotations

import logging
import re
import socket
from pathlib import Path
from typing import Mapping, Sequence

from ..errors import InputError, RelaxpackError
from ..runtime import SessionOptions
from .app import MAX_REQUEST_BYTES, create_app
from .model import Batching, ServedModel

log = logging.getLogger(__name__)

_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


def model_names(paths: Sequence[Path], names: Sequence[str] | None) -> list[str]:
    """Each archive's name: ``names`` in order when given (one per archive), else its file name
    without ``.rpk``. Names go into URLs: letters, digits, ``_``, ``.`` and ``-``, each name once."""
    if names:
        if len(names) != len(paths):
            raise InputError(f"--name is given {len(names)} time(s) for {len(paths)} archive(s); give it once "
                             f"per archive, in their order, or not at all")
        chosen = list(names)
    else:
        chosen = [p.name[:-len(".rpk")] if p.name.endswith(".rpk") else p.name for p in paths]
    for name, path in zip(chosen, paths):
        if not _NAME.match(name):
            raise InputError(f"model name {name!r} (of {path}) is not URL-safe: use letters, digits, _, . and - "
                             f"(--name NAME)")
    twice = sorted({n for n in chosen if chosen.count(n) > 1})
    if twice:
        raise InputError(f"model name(s) {twice} given to more than one archive; tell them apart with --name")
    return chosen


def load_models(paths: Sequence[Path], names: Sequence[str], *, max_concurrency: int = 1,
                options: SessionOptions | None = None, batching: Batching | None = None) -> dict[str, ServedModel]:
    """The models to serve by name, each archive loaded (memory-mapped) once."""
    return {name: ServedModel(name, path, max_concurrency=max_concurrency, options=options, batching=batching)
            for name, path in zip(names, paths)}


def listen(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` and listening; an address that cannot be had is a RelaxpackError."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as err:
        raise RelaxpackError(f"cannot listen on {host}:{port}: {err.strerror}") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as err:
        sock.close()
        raise RelaxpackError(f"cannot listen on {host}:{port}: {err.strerror or err}") from None
    sock.set_inheritable(True)
    return sock


def run(models: Mapping[str, ServedModel], sock: socket.socket, *, max_request_bytes: int = MAX_REQUEST_BYTES,
        log_level: str = "warning", access_log: bool = False) -> None:
    """Serve ``models`` on ``sock`` until interrupted (SIGINT or SIGTERM end it gracefully)."""
    import uvicorn

    config = uvicorn.Config(create_app(models, max_request_bytes=max_request_bytes), log_level=log_level,
                            access_log=access_log, lifespan="on", timeout_graceful_shutdown=10)
    uvicorn.Server(config).run(sockets=[sock])


__all__ = ["listen", "load_models", "model_names", "run"]
