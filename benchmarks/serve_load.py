"""Loopback load test of ``relaxpack serve``: N concurrent clients for T seconds, with and without
dynamic batching.

    python -m benchmarks.serve_load [--clients 16] [--seconds 10] [--rows 1] [--model MODEL.rpk]

Each setting starts ``relaxpack serve`` on a free port of 127.0.0.1, warms it
up, then runs ``--clients`` threads, each sending requests one after another
on a kept-alive connection (binary tensor data, as tritonclient sends by
default) for ``--seconds``; every answer is checked (status 200 and the
output's shape). Reported per setting: requests/s, p50/p99 latency, errors
(must be 0: the script exits 1 otherwise), the server's CPU time per request
(what batching saves, whatever the client costs: client and server share the
machine) and its resident memory (RSS, and its peak) at the end. The model, unless ``--model`` names one, is an
MLP of four 2048x2048 layers (64 MiB of weights) built here, whose rows
are independent: unbatched, each request reads every weight once.
Traffic stays on the loopback interface and every loop ends by its deadline.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
SETTINGS = {
    "no batching": [],
    "dynamic batching (max 32 rows, no added delay)": ["--batch-max-size", "32"],
    "dynamic batching (max 32 rows, 2 ms delay)": ["--batch-max-size", "32", "--batch-delay-ms", "2"],
}


def mlp_archive(folder: Path, width: int = 1024, layers: int = 4) -> Path:
    """An MLP ``x[batch, width] -> y[batch, width]`` (Gemm + Relu per layer), as an archive."""
    from onnx import TensorProto, helper, numpy_helper

    import relaxpack
    rng = np.random.default_rng(0)
    nodes, weights, last = [], [], "x"
    for i in range(layers):
        w = numpy_helper.from_array((rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32), f"w{i}")
        b = numpy_helper.from_array(np.zeros(width, np.float32), f"b{i}")
        weights += [w, b]
        out = "y" if i == layers - 1 else f"h{i}"
        nodes.append(helper.make_node("Gemm", [last, f"w{i}", f"b{i}"], [f"g{i}" if i < layers - 1 else "y"]))
        if i < layers - 1:
            nodes.append(helper.make_node("Relu", [f"g{i}"], [out]))
        last = out
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", width])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", width])], weights)
    path = folder / "mlp.rpk"
    relaxpack.build(relaxpack.from_onnx(helper.make_model(graph), dims={"batch": (1, 256)})).save(path)
    return path


class Server:
    """``relaxpack serve`` in a subprocess on a free loopback port."""

    def __init__(self, model: Path, extra: list[str], concurrency: int):
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
        self.proc = subprocess.Popen([sys.executable, "-m", "relaxpack.cli", "serve", str(model), "--port", "0",
                                      "--name", "m", "--max-concurrency", str(concurrency), "--threads", "1", *extra],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
        for line in self.proc.stdout:
            found = re.match(r"^listening on http://([^ ]+):(\d+) ", line)
            if found:
                self.host, self.port = found.group(1), int(found.group(2))
                return
        raise RuntimeError("relaxpack serve ended before listening")

    def memory(self) -> tuple[int, int]:
        """The server's resident set size now and at its peak, in bytes."""
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        value = {k: int(v.split()[0]) * 1024 for k, v in re.findall(r"^(VmRSS|VmHWM):\s+(.*)$", status, re.M)}
        return value["VmRSS"], value["VmHWM"]

    def cpu_seconds(self) -> float:
        """The server's CPU time so far (user + system)."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def request_body(x: np.ndarray) -> tuple[bytes, dict]:
    head = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": list(x.shape),
                                   "parameters": {"binary_data_size": x.nbytes}}],
                       "parameters": {"binary_data_output": True}}).encode()
    return head + x.tobytes(), {"Inference-Header-Content-Length": str(len(head)),
                                "Content-Type": "application/octet-stream"}


def client(server: Server, body: bytes, headers: dict, want: int, deadline: float, latencies: list, errors: list):
    conn = http.client.HTTPConnection(server.host, server.port, timeout=60)
    try:
        while time.perf_counter() < deadline:
            start = time.perf_counter()
            try:
                conn.request("POST", "/v2/models/m/infer", body=body, headers=headers)
                response = conn.getresponse()
                data = response.read()
                length = int(response.getheader("Inference-Header-Content-Length") or len(data))
                ok = response.status == 200 and len(data) - length == want
            except (OSError, http.client.HTTPException, ValueError) as err:
                ok, data = False, str(err).encode()
                conn.close()
                conn = http.client.HTTPConnection(server.host, server.port, timeout=60)
            if ok:
                latencies.append(time.perf_counter() - start)
            else:
                errors.append(data[:200])
    finally:
        conn.close()


def load(server: Server, clients: int, seconds: float, rows: int, width: int) -> dict:
    x = np.random.default_rng(1).standard_normal((rows, width)).astype(np.float32)
    body, headers = request_body(x)
    warm: list = []
    client(server, body, headers, x.nbytes, time.perf_counter() + 1.0, warm, [])
    per_client = [[] for _ in range(clients)]
    errors: list = []
    deadline = time.perf_counter() + seconds
    threads = [threading.Thread(target=client, args=(server, body, headers, x.nbytes, deadline, per_client[i], errors))
               for i in range(clients)]
    start, cpu = time.perf_counter(), server.cpu_seconds()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed, cpu = time.perf_counter() - start, server.cpu_seconds() - cpu
    latencies = np.array([v for c in per_client for v in c])
    rss, peak = server.memory()
    return {"requests": len(latencies), "rps": len(latencies) / elapsed,
            "p50_ms": float(np.percentile(latencies, 50) * 1e3) if len(latencies) else float("nan"),
            "p99_ms": float(np.percentile(latencies, 99) * 1e3) if len(latencies) else float("nan"),
            "cpu_ms": cpu / max(len(latencies), 1) * 1e3, "errors": len(errors), "first_error": errors[0].decode(errors="replace") if errors else "",
            "rss_mib": rss / 2 ** 20, "peak_rss_mib": peak / 2 ** 20}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rows", type=int, default=1, help="Rows (batch dim) per request.")
    parser.add_argument("--concurrency", type=int, default=2, help="relaxpack serve --max-concurrency.")
    parser.add_argument("--model", type=Path, help="An archive with one FP32 input x[batch, width] (default: an MLP).")
    parser.add_argument("--width", type=int, default=2048, help="The default MLP's width (4 layers of width^2 weights).")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        model = args.model or mlp_archive(Path(tmp), args.width)
        from relaxpack.runtime import InferenceSession
        width = InferenceSession(model).get_inputs()[0].shape[1]
        print(f"model {model.name}, {args.clients} clients x {args.seconds:g} s, {args.rows} row(s) per request, "
              f"--max-concurrency {args.concurrency}, {os.cpu_count()} cores\n")
        print("| setting | requests/s | p50 ms | p99 ms | server CPU ms/request | errors | server RSS MiB (peak) |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        failed = False
        for label, extra in SETTINGS.items():
            server = Server(model, extra, args.concurrency)
            try:
                r = load(server, args.clients, args.seconds, args.rows, width)
            finally:
                server.stop()
            print(f"| {label} | {r['rps']:.0f} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | {r['cpu_ms']:.2f} | {r['errors']} | "
                  f"{r['rss_mib']:.0f} ({r['peak_rss_mib']:.0f}) |", flush=True)
            if r["errors"]:
                print(f"  first error: {r['first_error']}", file=sys.stderr)
                failed = True
        return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
