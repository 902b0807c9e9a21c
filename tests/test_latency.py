"""Latency measures the pipeline, not start-up: a fresh process's first LLM calls import the provider's SDK
and build its client (seconds, against tens of milliseconds a call). Against a local OpenAI-protocol
server, the answers stage's p95 stays within 2x of its median, and the start-up is reported apart. In a
process of its own: a test process has started litellm's client long before. The server answers in
200 ms, a fast model: with an instant one, each call is 20-70 ms of client code, which CPU scheduling
alone stretches 3x on a machine shared with other tests; start-up (seconds) is what this tells apart."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = """
import json, sys
import polars as pl
from rag_core.generation.answering import answer
from rag_core.metrics import percentile
from rag_core.planning.spec import RagConfig
from resources.llm import LLMClient
from tests.openai_stub import OpenAIStub

n = 60
config = RagConfig(
    chunking={"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
    embedding={"model": "all-MiniLM-L6-v2"},
    retrieval={"mode": "bm25", "top_k": 1},
    generation={"model": "openai/stub-model"},
)
qa = pl.DataFrame({"query_id": [f"q{i}" for i in range(n)], "question": [f"Question {i}?" for i in range(n)]})
reranked = pl.DataFrame(
    {
        "query_id": qa["query_id"],
        "chunk_ids": [["c"]] * n,
        "doc_ids": [["d"]] * n,
        "titles": [["T"]] * n,
        "texts": [["Some context."]] * n,
    }
)
with OpenAIStub(lambda prompt: (200, "An answer", 0.2)) as stub:
    llm = LLMClient(api_base=stub.api_base, api_key="sk-test", max_concurrency=4)
    out = answer(config, qa, reranked, llm, lambda t: len(t.split()), parents=None)
    lat = out["latency_ms"].to_list()
    print(json.dumps({
        "errors": out["error"].drop_nulls().len(),
        "median": percentile(lat, 50),
        "p95": percentile(lat, 95),
        "max": max(lat),
        "startup_ms": llm.startup_ms("openai/stub-model"),
        "requests": len(stub.requests),
    }))
"""


def test_the_llm_clients_start_up_is_no_questions_latency():
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["errors"] == 0 and got["requests"] == 60  # the warm-up sends the server nothing
    # start-up is reported apart, and it is what the first calls paid before: well above a call (0.6 s
    # against 0.2 on a lean install, more where more is installed)
    assert got["startup_ms"] is not None and got["startup_ms"] > 2 * got["median"]
    assert got["p95"] <= 2 * got["median"], got
