"""``relaxpack serve``: archives behind the Open Inference Protocol (KServe v2 / Triton HTTP).

Needs the ``serve`` extra (``pip install 'relaxpack[serve]'``: starlette and
uvicorn); the runtime it serves stays numpy-only. Any Open Inference Protocol
client works, tritonclient's among them::

    relaxpack serve model.rpk --port 8000 --max-concurrency 2 --batch-max-size 8 --batch-delay-ms 2

    import tritonclient.http as http
    client = http.InferenceServerClient("127.0.0.1:8000")
    x = http.InferInput("x", [2, 7, 32], "FP32"); x.set_data_from_numpy(array)
    y = client.infer("model", [x]).as_numpy("y")

In Python, :func:`~relaxpack.serve.app.create_app` builds the ASGI app from a
dict of :class:`~relaxpack.serve.model.ServedModel` by name, to mount or run
under any ASGI server.
"""

from .app import create_app
from .model import Batching, ServedModel

__all__ = ["Batching", "ServedModel", "create_app"]
