"""Benchmark: what `rag-sweep run` costs beyond the work: an unchanged rerun, and a tiny sweep end to end.

    .venv/bin/python benchmarks/rerun_and_toy.py [--repeats 3] [--skip-cold]

1. The example sweep cold (a fresh data dir: every stage computes, 2,803 chunk texts embedded), then
   `--repeats` unchanged reruns on that data dir: the rerun's wall time as a share of the cold run's
   (goal <= 2%, issue 43; the cold run records that nothing is left, so every rerun reads that record).
2. A 1-config toy sweep (20 documents and 5 questions of the example) into a fresh data dir, `--repeats`
   times after one untimed run (warm: the OS caches and the compiled modules, not the data): its wall time.
Each run is the CLI as a user starts it (`.venv/bin/rag-sweep run`), a process of its own.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import polars as pl
import yaml

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "sweeps" / "example.yaml"
DATA = ROOT / "examples" / "data" / "hotpotqa_distractor_100"
CLI = ROOT / ".venv" / "bin" / "rag-sweep"


def run(spec: Path, data: Path) -> float:
    t0 = time.perf_counter()
    subprocess.run([str(CLI), "run", str(spec), "--data-dir", str(data)], check=True, capture_output=True)
    return time.perf_counter() - t0


def toy_sweep(folder: Path) -> Path:
    """20 documents holding the gold documents of 5 questions (plus distractors), one config."""
    qa = pl.read_parquet(DATA / "queries.parquet").head(5)
    corpus = pl.read_parquet(DATA / "corpus.parquet")
    gold = {d for ids in qa["relevant_doc_ids"] for d in ids}
    docs = corpus.filter(pl.col("doc_id").is_in(list(gold)))
    docs = pl.concat([docs, corpus.filter(~pl.col("doc_id").is_in(list(gold))).head(20 - docs.height)])
    docs.write_parquet(folder / "corpus.parquet")
    qa.write_parquet(folder / "qa.parquet")
    spec = {
        "name": "toy",
        "data": {"corpus": "corpus.parquet", "qa": "qa.parquet"},
        "chunking": {"method": "recursive", "chunk_size": 384, "chunk_overlap": 48},
        "retrieval": {"mode": "hybrid", "top_k": 3},
    }
    (folder / "toy.yaml").write_text(yaml.safe_dump(spec))
    return folder / "toy.yaml"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--skip-cold", action="store_true", help="only the toy sweep")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if not args.skip_cold:
            cold = run(EXAMPLE, tmp / "example")
            reruns = [run(EXAMPLE, tmp / "example") for _ in range(args.repeats)]
            rerun = statistics.median(reruns)
            print(f"example sweep cold: {cold:.1f} s")
            print(
                f"unchanged rerun: {rerun:.1f} s (runs: {', '.join(f'{t:.1f}' for t in reruns)}), "
                f"{rerun / cold:.1%} of the cold run (goal <= 2%)"
            )
        spec = toy_sweep(tmp)
        run(spec, tmp / "toy-warmup")
        toys = [run(spec, tmp / f"toy{i}") for i in range(args.repeats)]
        print(
            f"1-config toy sweep (20 docs, 5 questions), fresh data dir, warm: {statistics.median(toys):.1f} s "
            f"(runs: {', '.join(f'{t:.1f}' for t in toys)})"
        )


if __name__ == "__main__":
    sys.exit(main())
