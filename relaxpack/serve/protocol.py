"""Inference requests and responses of the Open Inference Protocol (KServe v2), over HTTP/REST.

A request is a JSON object, optionally followed by binary tensor data (the binary
tensor data extension: the ``Inference-Header-Content-Length`` header gives the
JSON's length, and each input with a ``binary_data_size`` parameter takes that
many bytes of what follows, in the order of the inputs). A response is JSON, or
JSON followed by the outputs asked for as binary (``binary_data`` per output, or
``binary_data_output`` for the whole request).

Everything wrong with a request is a :class:`RequestError` (an InputError) that
names the input, output or field at fault; the server answers it with a 4xx.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from .datatypes import from_binary, from_json, to_binary, to_json
from .errors import RequestError
from .signature import Signature

#: the header that splits a request's or response's body into JSON and binary tensor data
HEADER_LENGTH = "Inference-Header-Content-Length"
#: parameters of shared-memory tensors (Triton's extension), which a server over HTTP cannot read
_SHARED_MEMORY = ("shared_memory_region", "shared_memory_byte_size", "shared_memory_offset")


@dataclass(frozen=True)
class RequestedOutput:
    name: str
    binary: bool


@dataclass
class InferRequest:
    """A decoded request: the inputs as arrays of the model's dtypes, and what to send back."""

    inputs: dict[str, np.ndarray]
    outputs: list[RequestedOutput]
    id: str | None = None
    parameters: dict = field(default_factory=dict)


def decode_body(body: bytes, content_encoding: str | None, max_bytes: int) -> bytes:
    """The body as sent before ``Content-Encoding`` (gzip or deflate, as tritonclient can send),
    at most ``max_bytes`` once decompressed."""
    encoding = (content_encoding or "identity").strip().lower()
    if encoding == "identity":
        return body
    if encoding not in ("gzip", "deflate"):
        raise RequestError(f"Content-Encoding {content_encoding!r} is not supported (gzip, deflate or none)", 415)
    inflater = zlib.decompressobj(wbits=31 if encoding == "gzip" else 15)
    try:
        raw = inflater.decompress(body, max_bytes + 1)
        if len(raw) > max_bytes or inflater.unconsumed_tail:
            raise RequestError(f"the request is larger than {max_bytes} bytes once decompressed", 413)
        if not inflater.eof:
            raise RequestError(f"the {encoding} body is truncated")
    except zlib.error as err:
        raise RequestError(f"the body is not valid {encoding} data ({err})") from None
    return raw


def parse_request(body: bytes, header_length: str | None, signature: Signature) -> InferRequest:
    """Decode an inference request for the model of ``signature``; ``header_length`` is the
    ``Inference-Header-Content-Length`` header's value (None when the whole body is JSON)."""
    split = _json_length(header_length, len(body))
    request = _json_object(body[:split])
    binary = memoryview(body)[split:]
    inputs = _inputs(request.get("inputs"), binary, signature)
    parameters = _object(request.get("parameters", {}), "the request's parameters")
    binary_default = parameters.get("binary_data_output", False)
    if not isinstance(binary_default, bool):
        raise RequestError("parameter binary_data_output must be true or false")
    outputs = _outputs(request.get("outputs"), binary_default, signature)
    request_id = request.get("id")
    if request_id is not None and not isinstance(request_id, str):
        raise RequestError("the request's id must be a string")
    return InferRequest(inputs, outputs, request_id, parameters)


def encode_response(model: str, version: str, request: InferRequest, results: Mapping[str, np.ndarray],
                    signature: Signature) -> tuple[bytes, int | None]:
    """The response body for ``results``, and the JSON's length when binary data follows it (None when
    the body is all JSON)."""
    outputs, chunks = [], []
    for wanted in request.outputs:
        array = np.asarray(results[wanted.name])
        datatype = signature.output(wanted.name).datatype
        entry = {"name": wanted.name, "datatype": datatype, "shape": list(array.shape)}
        if wanted.binary:
            raw = to_binary(array, datatype)
            entry["parameters"] = {"binary_data_size": len(raw)}
            chunks.append(raw)
        else:
            entry["data"] = to_json(array, datatype)
        outputs.append(entry)
    response = {"model_name": model, "model_version": version, "outputs": outputs}
    if request.id is not None:
        response["id"] = request.id
    head = json.dumps(response, separators=(",", ":"), allow_nan=True).encode("utf-8")
    if not chunks:
        return head, None
    return b"".join([head, *chunks]), len(head)


# ---------------------------------------------------------------- the request's JSON
def _json_length(header_length: str | None, size: int) -> int:
    if header_length is None:
        return size
    try:
        length = int(header_length)
    except ValueError:
        raise RequestError(f"{HEADER_LENGTH} is {header_length!r}, not a number") from None
    if not 0 <= length <= size:
        raise RequestError(f"{HEADER_LENGTH} is {length}, but the body has {size} bytes")
    return length


def _json_object(raw: bytes) -> dict:
    try:
        request = json.loads(raw)
    except UnicodeDecodeError:
        raise RequestError("the request's JSON is not UTF-8 (binary data needs the "
                           f"{HEADER_LENGTH} header)") from None
    except ValueError as err:
        raise RequestError(f"the request is not valid JSON: {err}") from None
    except RecursionError:
        raise RequestError("the request's JSON nests too deeply") from None
    return _object(request, "the request")


def _object(value, what: str) -> dict:
    if not isinstance(value, dict):
        raise RequestError(f"{what} must be a JSON object, got {type(value).__name__}")
    return value


def _inputs(entries, binary: memoryview, signature: Signature) -> dict[str, np.ndarray]:
    if not isinstance(entries, list) or not entries:
        raise RequestError("the request needs a non-empty list of inputs")
    inputs: dict[str, np.ndarray] = {}
    offset = 0
    for i, entry in enumerate(entries):
        entry = _object(entry, f"inputs[{i}]")
        name = entry.get("name")
        if not isinstance(name, str):
            raise RequestError(f"inputs[{i}] needs a name")
        if name in inputs:
            raise RequestError(f"input {name!r} is given twice")
        spec = signature.input(name)       # unknown names: RequestError
        what = f"input {name!r}"
        datatype = entry.get("datatype")
        if datatype != spec.datatype:
            raise RequestError(f"{what} has datatype {datatype!r}; the model takes {spec.datatype}")
        shape = _shape(entry.get("shape"), what)
        parameters = _object(entry.get("parameters", {}), f"{what}'s parameters")
        if any(key in parameters for key in _SHARED_MEMORY):
            raise RequestError(f"{what} is in shared memory, which this server does not read")
        size = parameters.get("binary_data_size")
        if size is not None:
            if "data" in entry:
                raise RequestError(f"{what} has both data and binary_data_size")
            if isinstance(size, bool) or not isinstance(size, int) or size < 0:
                raise RequestError(f"{what}'s binary_data_size must be a non-negative integer")
            if offset + size > len(binary):
                raise RequestError(f"{what} needs {size} bytes of binary data at byte {offset}, but only "
                                   f"{len(binary) - offset} follow")
            inputs[name] = from_binary(binary[offset:offset + size], datatype, shape, what)
            offset += size
        elif "data" in entry:
            inputs[name] = from_json(entry["data"], datatype, shape, what)
        else:
            raise RequestError(f"{what} has neither data nor binary_data_size")
    if offset != len(binary):
        raise RequestError(f"{len(binary) - offset} bytes of binary data follow the request's JSON that no input "
                           f"claims (binary_data_size)")
    missing = [p.name for p in signature.inputs if p.name not in inputs]
    if missing:
        raise RequestError(f"missing input(s) {missing}; the model's inputs are {signature.input_names}")
    return inputs


def _shape(shape, what: str) -> tuple[int, ...]:
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                              for d in shape):
        raise RequestError(f"{what} needs a shape: a list of non-negative integers, got {shape!r}")
    return tuple(shape)


def _outputs(entries, binary_default: bool, signature: Signature) -> list[RequestedOutput]:
    if entries is None:
        return [RequestedOutput(o.name, binary_default) for o in signature.outputs]
    if not isinstance(entries, list):
        raise RequestError("the request's outputs must be a list")
    outputs, seen = [], set()
    for i, entry in enumerate(entries):
        entry = _object(entry, f"outputs[{i}]")
        name = entry.get("name")
        if not isinstance(name, str):
            raise RequestError(f"outputs[{i}] needs a name")
        signature.output(name)             # unknown names: RequestError
        if name in seen:
            raise RequestError(f"output {name!r} is asked for twice")
        seen.add(name)
        parameters = _object(entry.get("parameters", {}), f"output {name!r}'s parameters")
        if any(key in parameters for key in _SHARED_MEMORY):
            raise RequestError(f"output {name!r} asks for shared memory, which this server does not write")
        if "classification" in parameters:
            raise RequestError(f"output {name!r} asks for classification, which this server does not do")
        binary = parameters.get("binary_data", binary_default)
        if not isinstance(binary, bool):
            raise RequestError(f"output {name!r}'s binary_data must be true or false")
        outputs.append(RequestedOutput(name, binary))
    return outputs or [RequestedOutput(o.name, binary_default) for o in signature.outputs]


__all__ = ["HEADER_LENGTH", "InferRequest", "RequestError", "RequestedOutput", "decode_body", "encode_response",
           "parse_request"]
