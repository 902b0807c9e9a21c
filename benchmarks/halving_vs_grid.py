"""Benchmark: LLM calls paid by successive halving against the full grid, on the example data.

    .venv/bin/python benchmarks/halving_vs_grid.py [--questions 100]

Twelve configs (paragraph-1024 chunks × {vector, bm25} × top_k {3, 5} × three generators) answer the
example questions through a local OpenAI-protocol server (tests/openai_stub.py; hosted LLMs cannot be
reached from here): `good` replies the gold answer, `half` the gold answer for about half the questions,
`bad` never. `rag-sweep run` evaluates the sweep twice in fresh data dirs, once as a grid and once with
`search.strategy: halving`, and the script prints each one's LLM requests, wall time and top tier, and the
ratio halving / grid. Both share nothing (separate embedding and LLM caches), so the figures are of equal
work. The LLM calls are the figure that matters: the stub answers at once, where a real provider takes
seconds per call.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
import time
from pathlib import Path

import polars as pl
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from rag_sweep.runner import run_sweep  # noqa: E402
from tests.openai_stub import GoldAnswers, OpenAIStub  # noqa: E402

DATA = ROOT / "examples" / "data" / "hotpotqa_distractor_100"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--questions", type=int, default=100)
    args = parser.parse_args()
    qa = pl.read_parquet(DATA / "queries.parquet").head(args.questions)
    gold = GoldAnswers(qa)

    def respond(prompt: str, model: str):
        question = gold.question(prompt)
        right = {
            "good": True,
            "half": hashlib.sha256(question.encode()).digest()[0] % 2 == 0,  # the same half in every run
            "bad": False,
        }[model]
        return 200, gold.answer[question] if right else "I really could not say.", 0.0

    results = {}
    with tempfile.TemporaryDirectory() as tmp, OpenAIStub(respond, by_model=True) as stub:
        os.environ["RAG_LLM_API_BASE"] = stub.api_base
        os.environ.setdefault("OPENAI_API_KEY", "sk-benchmark")
        qa.write_parquet(Path(tmp) / "queries.parquet")
        for strategy in ("grid", "halving"):
            spec = Path(tmp) / f"{strategy}.yaml"
            sweep = {
                "name": f"bench-{strategy}",
                "data": {"corpus": str(DATA / "corpus.parquet"), "qa": str(Path(tmp) / "queries.parquet")},
                "chunking": {"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
                "retrieval": {"mode": ["vector", "bm25"], "top_k": [3, 5]},
                "generation": {"model": ["openai/good", "openai/half", "openai/bad"], "max_tokens": 16},
                "search": {"strategy": strategy, "start_questions": 10, "growth": 2},
            }
            spec.write_text(yaml.safe_dump(sweep, sort_keys=False))
            before, t0 = len(stub.requests), time.perf_counter()
            run = run_sweep(str(spec), str(Path(tmp) / f"data-{strategy}"), progress=False)
            top = run.board.filter(pl.col("tier") == 1)
            results[strategy] = {
                "requests": len(stub.requests) - before,
                "seconds": time.perf_counter() - t0,
                "top": dict(zip(top["config_key"], top["overall_score"], strict=True)),
            }
    grid, halving = results["grid"], results["halving"]
    print(f"{len(qa)} questions, 12 configs")
    print("| strategy | LLM requests | wall s | top tier (overall score) |")
    print("|---|---|---|---|")
    for name, r in results.items():
        tier = ", ".join(
            f"{k.split('__')[3]}+{k.split('__')[5].split('-')[1]} {v:.4f}" for k, v in r["top"].items()
        )
        print(f"| {name} | {r['requests']} | {r['seconds']:.0f} | {tier} |")
    print(
        f"halving / grid: LLM requests ×{halving['requests'] / grid['requests']:.2f}, "
        f"wall ×{halving['seconds'] / grid['seconds']:.2f}; same top tier: "
        f"{set(halving['top']) == set(grid['top'])}"
    )


if __name__ == "__main__":
    main()
