"""The HTTP/REST side of the Open Inference Protocol (KServe v2, as Triton speaks it), on starlette.

Endpoints: ``GET /v2/health/live``, ``/v2/health/ready``, ``GET /v2`` (server
metadata), ``GET /v2/models/{name}[/versions/{v}]`` (model metadata),
``.../ready``, ``POST .../infer`` (JSON and binary tensor data), ``GET
.../stats`` and ``POST /v2/repository/index`` (Triton's statistics and
repository extensions, which tritonclient calls).

Every error is ``{"error": "..."}`` with a status that says whose it is: 400
for a malformed or wrong request (name, datatype, shape, dims outside their
ranges, bad JSON or binary lengths), 404 for an unknown model or version, 413
for a body over the limit, 422 when the model fails on the given values (a
kernel refusing them), and 500 only for the server's own faults.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Mapping

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .. import __version__
from ..errors import DimError, InputError, RelaxpackError, ShapeError
from .errors import RequestError
from .model import VERSION, ServedModel
from .protocol import HEADER_LENGTH, decode_body, encode_response, parse_request

log = logging.getLogger(__name__)

EXTENSIONS = ["binary_tensor_data", "statistics", "model_repository"]
#: the largest request body read, by default (``--max-request-size``)
MAX_REQUEST_BYTES = 256 * 1024 * 1024


def create_app(models: Mapping[str, ServedModel], *, max_request_bytes: int = MAX_REQUEST_BYTES) -> Starlette:
    """The ASGI application serving ``models`` (by name)."""
    server = _Server(dict(models), max_request_bytes)
    model_routes = []
    for prefix in ("/v2/models/{name}", "/v2/models/{name}/versions/{version}"):
        model_routes += [Route(prefix, server.model_metadata, methods=["GET"]),
                         Route(prefix + "/ready", server.model_ready, methods=["GET"]),
                         Route(prefix + "/infer", server.infer, methods=["POST"]),
                         Route(prefix + "/stats", server.model_stats, methods=["GET"])]
    routes = [Route("/v2/health/live", server.live, methods=["GET"]),
              Route("/v2/health/ready", server.ready, methods=["GET"]),
              Route("/v2", server.metadata, methods=["GET"]),
              Route("/v2/models/stats", server.all_stats, methods=["GET"]),
              Route("/v2/repository/index", server.repository_index, methods=["POST"]),
              *model_routes]

    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        await server.close()

    # RelaxpackError's handler answers in place; Exception's (a server fault) is starlette's last resort,
    # which also logs the traceback
    handlers = {RelaxpackError: _error_response, HTTPException: _http_error, Exception: _error_response}
    return Starlette(routes=routes, exception_handlers=handlers, lifespan=lifespan)


class _Server:
    def __init__(self, models: dict[str, ServedModel], max_request_bytes: int):
        self.models = models
        self.max_request_bytes = max_request_bytes

    async def live(self, request: Request) -> Response:
        return JSONResponse({"live": True})

    async def ready(self, request: Request) -> Response:
        return JSONResponse({"ready": True})

    async def metadata(self, request: Request) -> Response:
        return JSONResponse({"name": "relaxpack", "version": __version__, "extensions": EXTENSIONS})

    async def model_metadata(self, request: Request) -> Response:
        return JSONResponse(self._model(request).metadata())

    async def model_ready(self, request: Request) -> Response:
        model = self._model(request)
        return JSONResponse({"name": model.name, "ready": True})

    async def model_stats(self, request: Request) -> Response:
        model = self._model(request)
        return JSONResponse({"model_stats": [model.stats.as_json(model.name)]})

    async def all_stats(self, request: Request) -> Response:
        return JSONResponse({"model_stats": [m.stats.as_json(m.name) for m in self.models.values()]})

    async def repository_index(self, request: Request) -> Response:
        return JSONResponse([{"name": name, "version": VERSION, "state": "READY"} for name in self.models])

    async def infer(self, request: Request) -> Response:
        model = self._model(request)
        body = decode_body(await self._body(request), request.headers.get("content-encoding"),
                           self.max_request_bytes)
        infer_request = parse_request(body, request.headers.get(HEADER_LENGTH), model.signature)
        results = await model.infer(infer_request.inputs)
        content, json_length = encode_response(model.name, VERSION, infer_request, results, model.signature)
        if json_length is None:
            return Response(content, media_type="application/json")
        return Response(content, media_type="application/octet-stream", headers={HEADER_LENGTH: str(json_length)})

    async def close(self) -> None:
        for model in self.models.values():
            await model.close()

    def _model(self, request: Request) -> ServedModel:
        name = request.path_params["name"]
        model = self.models.get(name)
        if model is None:
            raise RequestError(f"unknown model {name!r}; this server has {sorted(self.models)}", 404)
        version = request.path_params.get("version")
        if version is not None and version != VERSION:
            raise RequestError(f"model {name!r} has no version {version!r}; it has version {VERSION}", 404)
        return model

    async def _body(self, request: Request) -> bytes:
        """The request's body, refused (413) once it passes the limit."""
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_request_bytes:
            raise _too_large(self.max_request_bytes)
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > self.max_request_bytes:
                raise _too_large(self.max_request_bytes)
            chunks.append(chunk)
        return b"".join(chunks)


def _too_large(limit: int) -> RequestError:
    return RequestError(f"the request body is larger than the server's limit of {limit} bytes "
                        f"(relaxpack serve --max-request-size)", 413)


async def _error_response(request: Request, err: Exception) -> Response:
    status, message = _status(err)
    return JSONResponse({"error": message}, status_code=status)


async def _http_error(request: Request, err: HTTPException) -> Response:
    """Starlette's own refusals (no such route, a wrong method) in the protocol's error shape."""
    message = {404: f"no endpoint {request.url.path}", 405: f"{request.method} is not allowed on {request.url.path}"}
    return JSONResponse({"error": message.get(err.status_code, str(err.detail))}, status_code=err.status_code,
                        headers=getattr(err, "headers", None))


def _status(err: Exception) -> tuple[int, str]:
    """The HTTP status and message for an error raised while answering."""
    if isinstance(err, RequestError):
        return err.status, str(err)
    if isinstance(err, (InputError, ShapeError, DimError)):
        return 400, str(err)
    if isinstance(err, RelaxpackError):
        return 422, f"the model failed on these inputs: {err}"
    return 500, f"internal error: {type(err).__name__}: {err}"


__all__ = ["EXTENSIONS", "MAX_REQUEST_BYTES", "create_app"]
