"""``relaxpack serve`` against a client nobody here wrote: tritonclient's HTTP client, talking to the
server running as its own process. Outputs must equal ``InferenceSession``'s in this process, with
JSON and with binary tensor data; bad requests get a 4xx and a message, never a 5xx."""

from __future__ import annotations

import http.client
import json
import threading

import numpy as np
import pytest

pytest.importorskip("starlette")
tritonclient_http = pytest.importorskip("tritonclient.http")
from tritonclient.utils import InferenceServerException  # noqa: E402

from relaxpack.examples.onnx_models import transformer_block_onnx  # noqa: E402
from relaxpack.runtime import InferenceSession  # noqa: E402
from relaxpack.serve.datatypes import TO_DATATYPE  # noqa: E402
from tests.serve.models import DTYPES, dtype_values, dtypes_onnx, lookup_onnx, pooled_onnx, save  # noqa: E402
from tests.serve.running import running_server  # noqa: E402

rng = np.random.default_rng(0)


@pytest.fixture(scope="module")
def archives(tmp_path_factory):
    folder = tmp_path_factory.mktemp("serve")
    save(transformer_block_onnx(), folder / "block.rpk", batch=(1, 64), seq=(1, 64))
    save(lookup_onnx(), folder / "lookup.rpk", batch=(1, 64), k=(1, 16))
    save(dtypes_onnx(), folder / "dtypes.rpk")
    save(pooled_onnx(), folder / "pooled.rpk", batch=(1, 64))
    return {name: folder / f"{name}.rpk" for name in ("block", "lookup", "dtypes", "pooled")}


@pytest.fixture(scope="module")
def sessions(archives):
    return {name: InferenceSession(path) for name, path in archives.items()}


@pytest.fixture(scope="module")
def server(archives):
    with running_server(archives["block"], archives["lookup"], archives["dtypes"], "--name", "block",
                        "--name", "lookup", "--name", "types", "--max-concurrency", "2") as (url, printed):
        yield url, printed


def client(url):
    return tritonclient_http.InferenceServerClient(url)


def infer_input(name, array, datatype, binary):
    tensor = tritonclient_http.InferInput(name, list(array.shape), datatype)
    tensor.set_data_from_numpy(array, binary_data=binary)
    return tensor


def block_input(batch, seq):
    return rng.standard_normal((batch, seq, 32)).astype(np.float32)


def lookup_input(batch, k, vocab=50):
    return rng.integers(-vocab, vocab, (batch, k), dtype=np.int64)


# ---------------------------------------------------------------- health and metadata
def test_health_and_server_metadata(server):
    url, printed = server
    c = client(url)
    assert c.is_server_live() and c.is_server_ready()
    assert all(c.is_model_ready(name) for name in ("block", "lookup", "types"))
    assert not c.is_model_ready("nope")
    meta = c.get_server_metadata()
    assert meta["name"] == "relaxpack" and "binary_tensor_data" in meta["extensions"]
    assert {m["name"] for m in c.get_model_repository_index()} == {"block", "lookup", "types"}
    assert any(line.startswith("model block: ") and "x: FP32[-1, -1, 32]" in line for line in printed), printed


def test_model_metadata_gives_datatypes_and_minus_one_for_symbolic_dims(server):
    c = client(server[0])
    block = c.get_model_metadata("block")
    assert block["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, -1, 32]}]
    assert block["outputs"] == [{"name": "y", "datatype": "FP32", "shape": [-1, -1, 32]}]
    lookup = c.get_model_metadata("lookup", model_version="1")
    assert lookup["inputs"] == [{"name": "ids", "datatype": "INT64", "shape": [-1, -1]}]
    assert lookup["outputs"] == [{"name": "out", "datatype": "FP32", "shape": [-1, -1, 8]}]
    types = c.get_model_metadata("types")
    assert [(t["name"], t["datatype"]) for t in types["inputs"]] == [(f"in_{d}", TO_DATATYPE[d]) for d in DTYPES]
    assert {t["datatype"] for t in types["outputs"]} == {"BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8",
                                                         "INT16", "INT32", "INT64", "FP16", "FP32", "FP64", "BYTES"}


# ---------------------------------------------------------------- inference
@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_outputs_equal_inference_session(server, sessions, binary):
    c = client(server[0])
    for batch, seq in ((1, 1), (2, 7), (5, 64)):
        x = block_input(batch, seq)
        result = c.infer("block", [infer_input("x", x, "FP32", binary)],
                         outputs=[tritonclient_http.InferRequestedOutput("y", binary_data=binary)])
        (want,) = sessions["block"].run(None, {"x": x})
        np.testing.assert_array_equal(result.as_numpy("y"), want)
        assert result.get_output("y")["datatype"] == "FP32"
    for batch, k in ((1, 1), (3, 16)):
        ids = lookup_input(batch, k)
        result = c.infer("lookup", [infer_input("ids", ids, "INT64", binary)], request_id="r7")
        (want,) = sessions["lookup"].run(None, {"ids": ids})
        np.testing.assert_array_equal(result.as_numpy("out"), want)
        assert result.get_response()["id"] == "r7"


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_every_datatype_goes_both_ways(server, sessions, binary):
    feeds = dtype_values(rng, 3)
    inputs = [infer_input(name, value, TO_DATATYPE[name[3:]], binary) for name, value in feeds.items()]
    result = client(server[0]).infer("types", inputs, outputs=[
        tritonclient_http.InferRequestedOutput(f"out_{d}", binary_data=binary) for d in DTYPES])
    want = dict(zip([o.name for o in sessions["dtypes"].get_outputs()],
                    sessions["dtypes"].run(None, feeds)))
    for name in DTYPES:
        got, expected = result.as_numpy(f"out_{name}"), want[f"out_{name}"]
        assert result.get_output(f"out_{name}")["datatype"] == TO_DATATYPE[name]
        if name == "string":      # BYTES come back as bytes (binary) or str (JSON)
            got = [s.decode("utf-8") if isinstance(s, bytes) else s for s in got.reshape(-1)]
            assert got == list(expected.reshape(-1))
        else:
            assert got.dtype == expected.dtype, name
            np.testing.assert_array_equal(got, expected)


def test_requested_outputs_each_binary_or_json(server):
    feeds = dtype_values(rng, 2)
    inputs = [infer_input(name, value, TO_DATATYPE[name[3:]], True) for name, value in feeds.items()]
    result = client(server[0]).infer("types", inputs, outputs=[
        tritonclient_http.InferRequestedOutput("out_int16", binary_data=True),
        tritonclient_http.InferRequestedOutput("out_float64", binary_data=False)])
    outputs = result.get_response()["outputs"]
    assert [o["name"] for o in outputs] == ["out_int16", "out_float64"]
    assert "data" not in outputs[0] and outputs[0]["parameters"]["binary_data_size"] == 2 * 2 * 2
    assert outputs[1]["data"] == feeds["in_float64"].reshape(-1).tolist()
    np.testing.assert_array_equal(result.as_numpy("out_int16"), feeds["in_int16"])


def test_plain_json_request_nested_data_and_json_response(server):
    body = {"inputs": [{"name": "ids", "datatype": "INT64", "shape": [2, 2], "data": [[1, 2], [3, -4]]}]}
    status, headers, data = post(server[0], "/v2/models/lookup/infer", json.dumps(body).encode())
    assert status == 200 and headers["content-type"] == "application/json"
    out = json.loads(data)["outputs"][0]
    assert out["name"] == "out" and out["shape"] == [2, 2, 8] and len(out["data"]) == 32


# ---------------------------------------------------------------- bad requests
def post(url, path, body: bytes, headers=None, method="POST"):
    host, port = url.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


def good_ids_json(**change):
    entry = {"name": "ids", "datatype": "INT64", "shape": [1, 2], "data": [1, 2]}
    entry.update(change)
    return json.dumps({"inputs": [entry]}).encode()


BINARY_HEAD = json.dumps({"inputs": [{"name": "ids", "datatype": "INT64", "shape": [1, 2],
                                      "parameters": {"binary_data_size": 16}}]}).encode()

BAD = {
    "unknown model": ("/v2/models/nope/infer", good_ids_json(), {}, 404, "unknown model 'nope'"),
    "unknown version": ("/v2/models/lookup/versions/7/infer", good_ids_json(), {}, 404, "no version '7'"),
    "unknown input": ("/v2/models/lookup/infer", good_ids_json(name="idz"), {}, 400, "unknown input 'idz'"),
    "wrong datatype": ("/v2/models/lookup/infer", good_ids_json(datatype="INT32", data=[1, 2]), {}, 400,
                       "has datatype 'INT32'; the model takes INT64"),
    "wrong rank": ("/v2/models/lookup/infer", good_ids_json(shape=[2], data=[1, 2]), {}, 400, "rank"),
    "dim outside its range": ("/v2/models/lookup/infer", good_ids_json(shape=[1, 17], data=[0] * 17), {}, 400,
                              "outside its range 1..16"),
    "data and shape disagree": ("/v2/models/lookup/infer", good_ids_json(shape=[1, 3]), {}, 400,
                                "2 elements of data, but shape [1, 3] holds 3"),
    "float for an integer": ("/v2/models/lookup/infer", good_ids_json(data=[1, 2.5]), {}, 400,
                             "2.5 is not a valid INT64 element"),
    "malformed JSON": ("/v2/models/lookup/infer", b'{"inputs": [', {}, 400, "not valid JSON"),
    "JSON nested too deeply": ("/v2/models/lookup/infer", b"[" * 100000 + b"]" * 100000, {}, 400,
                               "nests too deeply"),
    "no inputs": ("/v2/models/lookup/infer", b'{"inputs": []}', {}, 400, "non-empty list of inputs"),
    "binary too short": ("/v2/models/lookup/infer", BINARY_HEAD + bytes(8),
                         {"Inference-Header-Content-Length": str(len(BINARY_HEAD))}, 400, "only 8 follow"),
    "binary left over": ("/v2/models/lookup/infer", BINARY_HEAD + bytes(20),
                         {"Inference-Header-Content-Length": str(len(BINARY_HEAD))}, 400, "4 bytes of binary data"),
    "header length past the body": ("/v2/models/lookup/infer", BINARY_HEAD,
                                    {"Inference-Header-Content-Length": "99999"}, 400, "the body has"),
    "binary without the header": ("/v2/models/lookup/infer", BINARY_HEAD + bytes(16), {}, 400, "not valid JSON"),
    "unknown output": ("/v2/models/lookup/infer",
                       json.dumps({"inputs": json.loads(good_ids_json())["inputs"],
                                   "outputs": [{"name": "nope"}]}).encode(), {}, 400, "unknown output 'nope'"),
    "an id out of range (the run refuses it)": (
        "/v2/models/lookup/infer", good_ids_json(data=[1, 50]), {}, 400, "index 50 is out of range"),
    "unknown endpoint": ("/v2/modelz", b"", {}, 404, "no endpoint /v2/modelz"),
}


@pytest.mark.parametrize("case", list(BAD), ids=list(BAD))
def test_bad_requests_get_a_4xx_and_a_message(server, case):
    path, body, headers, status, message = BAD[case]
    got, response_headers, data = post(server[0], path, body, headers)
    assert got == status, data
    assert response_headers["content-type"] == "application/json"
    assert message in json.loads(data)["error"], data


def test_tritonclient_sees_the_message(server):
    x = np.zeros((2, 7, 31), np.float32)
    with pytest.raises(InferenceServerException, match=r"input 'x': dim 2 is 31, expected 32") as info:
        client(server[0]).infer("block", [infer_input("x", x, "FP32", True)])
    assert info.value.status() == "400"


def test_a_body_over_the_limit_gets_413(archives):
    with running_server(archives["lookup"], "--max-request-size", "1KiB") as (url, _):
        status, _, data = post(url, "/v2/models/lookup/infer", good_ids_json(shape=[1, 400], data=[1] * 400))
        assert status == 413 and "limit of 1024 bytes" in json.loads(data)["error"]
        assert post(url, "/v2/models/lookup/infer", good_ids_json())[0] == 200


def test_gzip_request_bodies(server):
    import gzip
    body = gzip.compress(good_ids_json())
    status, _, data = post(server[0], "/v2/models/lookup/infer", body, {"Content-Encoding": "gzip"})
    assert status == 200, data
    status, _, data = post(server[0], "/v2/models/lookup/infer", body[:-9], {"Content-Encoding": "gzip"})
    assert status == 400, data


# ---------------------------------------------------------------- concurrency and dynamic batching
def run_clients(url, model, requests, threads=8):
    """Send ``requests`` ([(name, array, datatype)]) from ``threads`` threads; results or errors by index."""
    results = [None] * len(requests)

    def work(start):
        c = client(url)
        for i in range(start, len(requests), threads):
            name, array, datatype = requests[i]
            try:
                results[i] = c.infer(model, [infer_input(name, array, datatype, True)]).as_numpy(
                    c.get_model_metadata(model)["outputs"][0]["name"])
            except InferenceServerException as err:
                results[i] = err
    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return results


def test_concurrent_requests_without_batching(server, sessions):
    requests = [("x", block_input(int(rng.integers(1, 4)), int(rng.integers(1, 9))), "FP32") for _ in range(24)]
    for (_, x, _), got in zip(requests, run_clients(server[0], "block", requests)):
        np.testing.assert_array_equal(got, sessions["block"].run(None, {"x": x})[0])


@pytest.fixture(scope="module")
def batching_server(archives):
    with running_server(archives["lookup"], archives["block"], archives["pooled"], "--max-concurrency", "1",
                        "--batch-max-size", "16", "--batch-delay-ms", "30") as (url, printed):
        yield url, printed


def test_batching_is_on_only_where_the_signature_allows_it(batching_server, sessions):
    url, printed = batching_server
    text = "".join(printed)
    assert "model lookup: " in text and "model block: " in text and "model pooled: " in text
    lookup, block, pooled = text.split("model lookup: ")[1], text.split("model block: ")[1], \
        text.split("model pooled: ")[1]
    assert lookup.splitlines()[1].strip() == "batching along batch: up to 16 rows, waiting up to 30 ms"
    assert block.splitlines()[1].strip() == "batching along batch: up to 16 rows, waiting up to 30 ms"
    assert pooled.splitlines()[1].strip().startswith("not batching: no symbolic dim leads every input and output")
    # a sum over the batch: batching it would mix requests
    requests = [("x", rng.standard_normal((int(rng.integers(1, 4)), 4)).astype(np.float32), "FP32")
                for _ in range(16)]
    for (_, x, _), got in zip(requests, run_clients(url, "pooled", requests)):
        np.testing.assert_array_equal(got, sessions["pooled"].run(None, {"x": x})[0])
    stats = client(url).get_inference_statistics("pooled")["model_stats"][0]
    assert stats["execution_count"] == stats["inference_stats"]["success"]["count"] == 16


def test_batched_results_are_split_back_to_each_request(batching_server, sessions):
    url = batching_server[0]
    requests = [("ids", lookup_input(int(rng.integers(1, 5)), 3), "INT64") for _ in range(48)]
    before = client(url).get_inference_statistics("lookup")["model_stats"][0]
    results = run_clients(url, "lookup", requests)
    for (_, ids, _), got in zip(requests, results):
        np.testing.assert_array_equal(got, sessions["lookup"].run(None, {"ids": ids})[0])   # elementwise: exact
    stats = client(url).get_inference_statistics("lookup")["model_stats"][0]
    executions = stats["execution_count"] - before["execution_count"]
    requests_done = stats["inference_stats"]["success"]["count"] - before["inference_stats"]["success"]["count"]
    assert requests_done == 48
    assert stats["inference_count"] - before["inference_count"] == sum(ids.shape[0] for _, ids, _ in requests)
    assert executions < 48, "no request was batched with another"


def test_batched_float_model_agrees_with_single_runs(batching_server, sessions):
    requests = [("x", block_input(int(rng.integers(1, 4)), 5), "FP32") for _ in range(24)]
    for (_, x, _), got in zip(requests, run_clients(batching_server[0], "block", requests)):
        np.testing.assert_allclose(got, sessions["block"].run(None, {"x": x})[0], rtol=1e-5, atol=1e-6)


def test_a_bad_request_in_a_batch_gets_its_own_error_and_the_others_their_results(batching_server, sessions):
    requests = [("ids", lookup_input(2, 3), "INT64") for _ in range(16)]
    bad = {3, 11}
    for i in bad:
        requests[i][1][1, 2] = 50                     # out of the table's range: only the run can tell
    results = run_clients(batching_server[0], "lookup", requests)
    for i, ((_, ids, _), got) in enumerate(zip(requests, results)):
        if i in bad:
            assert isinstance(got, InferenceServerException) and got.status() == "400", got
            assert "index 50 is out of range" in str(got)
        else:
            np.testing.assert_array_equal(got, sessions["lookup"].run(None, {"ids": ids})[0])
