"""Benchmark: how close a sweep's LLM calls come to the provider's limit, at 4 and at 32 calls in flight.

    .venv/bin/python benchmarks/llm_throughput.py [--configs 6] [--questions 33] [--delay 0.25] [--repeats 2]

A provider that answers every call in `delay` seconds and takes up to N at once serves at most N / delay calls
a second: its limit. A local server that speaks the OpenAI protocol (HTTP/1.1 keep-alive, a listen backlog of
256, as a hosted endpoint) runs in a process of its own, so it takes no CPU time from the client's
interpreter, and records when each call arrives. `rag-sweep run` evaluates a sweep of `--configs` LLM
generators (one retrieval, no holdout, no judge) on `--questions` questions, with
`RAG_LLM_MAX_CONCURRENCY` set to N, in a fresh data dir each time (no call answered from a cache). The
figure is the answers stage's calls a second, from the first call's arrival to the last one's reply,
divided by the limit N / delay; the goal at 32 in flight is >= x0.7. Each setting runs `--repeats` times,
alternating; the median is printed, with each run's.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import polars as pl
import yaml

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "examples" / "data" / "hotpotqa_distractor_100"

# The provider: answers every call after `delay` s; on SIGTERM writes the calls' arrival times to a file.
SERVER = r"""
import json, signal, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

delay, log = float(sys.argv[1]), sys.argv[2]
arrivals, lock = [], threading.Lock()

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as a hosted endpoint

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with lock:
            arrivals.append((time.monotonic(), body["model"]))
        time.sleep(delay)
        prompt = body["messages"][-1]["content"]
        data = json.dumps({
            "id": "chatcmpl-bench", "object": "chat.completion", "created": int(time.time()),
            "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Paris"},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": len(prompt.split()), "completion_tokens": 1,
                      "total_tokens": len(prompt.split()) + 1},
        }).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

class Server(ThreadingHTTPServer):
    request_queue_size = 256
    daemon_threads = True

server = Server(("127.0.0.1", 0), Handler)

def stop(*_):
    with open(log, "w") as f:
        json.dump(arrivals, f)
    sys.exit(0)

signal.signal(signal.SIGTERM, stop)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


def measure(tmp: Path, spec: Path, in_flight: int, delay: float, n: int) -> dict:
    """One sweep run against a fresh provider: the answers stage's calls and their rate against the limit."""
    log = tmp / f"arrivals-{in_flight}-{n}.json"
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(delay), str(log)], stdout=subprocess.PIPE, text=True
    )
    try:
        port = int(server.stdout.readline())
        env = {
            **os.environ,
            "RAG_LLM_API_BASE": f"http://127.0.0.1:{port}/v1",
            "RAG_LLM_MAX_CONCURRENCY": str(in_flight),
            "OPENAI_API_KEY": "sk-benchmark",
            "RAG_SWEEP_WARM": "0",
        }
        t0 = time.perf_counter()
        done = subprocess.run(
            [
                str(ROOT / ".venv" / "bin" / "rag-sweep"),
                "run",
                str(spec),
                "--data-dir",
                str(tmp / f"data-{in_flight}-{n}"),
            ],
            env=env,
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
        if done.returncode:
            sys.exit(f"rag-sweep run failed ({done.returncode}):\n{done.stderr[-3000:]}")
        wall = time.perf_counter() - t0
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
    arrivals = sorted(t for t, _ in json.loads(log.read_text()))
    window = arrivals[-1] + delay - arrivals[0]
    rate = len(arrivals) / window
    return {"calls": len(arrivals), "window_s": window, "ratio": rate / (in_flight / delay), "wall_s": wall}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--configs", type=int, default=6, help="LLM generators, one config each")
    parser.add_argument("--questions", type=int, default=33)
    parser.add_argument("--delay", type=float, default=0.25, help="the provider's seconds per call")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--in-flight", type=int, nargs="+", default=[4, 32])
    args = parser.parse_args()
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        pl.read_parquet(DATA / "queries.parquet").head(args.questions).write_parquet(tmp / "queries.parquet")
        spec = tmp / "sweep.yaml"
        sweep = {
            "name": "bench-llm-throughput",
            "data": {"corpus": str(DATA / "corpus.parquet"), "qa": str(tmp / "queries.parquet")},
            "chunking": {"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
            "retrieval": {"mode": "bm25", "top_k": 3},
            "generation": {"model": [f"openai/m{i}" for i in range(args.configs)], "max_tokens": 16},
            "decision": {"holdout": 0},
        }
        spec.write_text(yaml.safe_dump(sweep, sort_keys=False))
        runs: dict[int, list[dict]] = {n: [] for n in args.in_flight}
        for r in range(args.repeats):  # alternating: a noisy machine's drift falls on every setting alike
            for in_flight in args.in_flight:
                runs[in_flight].append(measure(tmp, spec, in_flight, args.delay, r))
                m = runs[in_flight][-1]
                print(
                    f"  {in_flight:>2} in flight, run {r + 1}: {m['calls']} calls in {m['window_s']:.2f} s "
                    f"(sweep {m['wall_s']:.0f} s): x{m['ratio']:.2f} of the limit",
                    flush=True,
                )
    print(f"provider: {args.delay * 1000:.0f} ms a call; {args.configs} configs x {args.questions} questions")
    for in_flight, ms in runs.items():
        ratios = [m["ratio"] for m in ms]
        print(
            f"{in_flight:>2} in flight: x{statistics.median(ratios):.2f} of the provider's limit "
            f"({in_flight / args.delay:.0f} calls/s; runs: {', '.join(f'x{x:.2f}' for x in ratios)})"
        )


if __name__ == "__main__":
    main()
