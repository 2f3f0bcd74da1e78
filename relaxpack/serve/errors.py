"""The error a client's request causes, with the HTTP status that answers it."""

from __future__ import annotations

from ..errors import InputError


class RequestError(InputError):
    """A client's request is wrong; ``status`` is the HTTP status (4xx) that says so."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


__all__ = ["RequestError"]
