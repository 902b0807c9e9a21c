"""Benchmark: a sweep of a 100k-chunk corpus through `rag-sweep run`, end to end, as a user runs it.

    .venv/bin/python benchmarks/sweep_scale.py [--chunks 100000] [--queries 200] [--keep DIR]

A synthetic corpus as benchmarks/scale.py's (seeded; documents of ~5 paragraphs of words drawn from a
Zipf-like vocabulary; recursive 384-character chunks, ~5 a document) and `--queries` questions (8
consecutive words of a paragraph; its document the relevant one, its next word the answer), embedded by the
example plug-in `hashed_words` (examples/plugins, installed by uv into a folder on the CLI's path, as a
user's plug-in is: no model, so the model's ~25 passages/s are not what is measured), indexed in LanceDB
with IVF-SQ (~sqrt(n) partitions, 30% probed, refine 10), searched by vector and hybrid retrieval (top 5),
answered by the extractive reader. Prints the run's wall seconds, the CLI's peak resident memory and its
leaderboard.
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from scale import synthetic_corpus, synthetic_paragraphs  # noqa: E402


def write_data(folder: Path, chunks: int, queries: int) -> None:
    import polars as pl

    rng = np.random.default_rng(0)
    words, lengths, paras = synthetic_paragraphs(rng, max(1, chunks // 5))
    synthetic_corpus(paras).drop("metadata").write_parquet(folder / "corpus.parquet")
    picked = rng.choice(len(paras), queries, replace=False)
    starts = [int(rng.integers(0, lengths[p] - 9)) for p in picked]
    pl.DataFrame(
        {
            "query_id": [f"q{i}" for i in range(queries)],
            "question": [" ".join(words[p, s : s + 8]) for p, s in zip(picked, starts, strict=True)],
            "answers": [[str(words[p, s + 8])] for p, s in zip(picked, starts, strict=True)],
            "relevant_doc_ids": [[f"d{p // 5}"] for p in picked],
        }
    ).write_parquet(folder / "queries.parquet")


def sweep_yaml(folder: Path, chunks: int) -> Path:
    partitions = int(math.sqrt(chunks))
    spec = folder / "scale.yaml"
    spec.write_text(
        f"""name: scale-{chunks}
description: A synthetic corpus of {chunks:,d} chunks, end to end
data:
  corpus: corpus.parquet
  qa: queries.parquet
chunking: {{method: recursive, chunk_size: 384, chunk_overlap: 48}}
embedding: {{model: hashed_words}}
index:
  store: lancedb
  ann: {{type: ivf_sq, num_partitions: {partitions}, nprobes: {math.ceil(partitions * 0.3)}, refine_factor: 10}}
retrieval: {{mode: [vector, hybrid], top_k: 5}}
generation: {{model: extractive}}
weights: {{recall_at_k: 0.5, token_f1: 0.5}}
decision: {{holdout: 0}}
"""
    )
    return spec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--keep", help="a folder to keep the data, the plug-in and the run's artifacts in")
    args = ap.parse_args()
    work = Path(args.keep or tempfile.mkdtemp(prefix="sweep_scale_"))
    work.mkdir(parents=True, exist_ok=True)
    site = work / "site"
    if not site.exists():  # the example plug-in package, as a user installs one (no dependencies: the host)
        uv = shutil.which("uv") or "uv"
        subprocess.run(
            [uv, "pip", "install", "--python", sys.executable, "--no-deps", "--no-build-isolation"]
            + ["--offline", "--target", str(site), str(ROOT / "examples" / "plugins")],
            check=True,
            capture_output=True,
        )
    t0 = time.perf_counter()
    write_data(work, args.chunks, args.queries)
    print(f"data written: {time.perf_counter() - t0:.1f} s", flush=True)
    spec = sweep_yaml(work, args.chunks)
    env = {**os.environ, "PYTHONPATH": str(site)}
    cmd = [sys.executable, "-m", "rag_sweep.cli", "run", str(spec), "--data-dir", str(work / "rag_data")]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    print(out.stdout[-6000:])
    if out.returncode:
        print(out.stderr[-6000:], file=sys.stderr)
        sys.exit(out.returncode)
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # the largest child: the CLI
    print(f"rag-sweep run: {wall:.1f} s wall, peak RSS {peak_mb:,.0f} MB ({args.chunks:,d}-chunk target)")
    import polars as pl

    board = pl.read_parquet(work / "rag_data" / "leaderboards" / f"scale-{args.chunks}.parquet")
    figures = ["label", "ann_recall_at_k", "index_build_s", "index_build_peak_mb", "retrieval_p95_ms"]
    print(board.select(figures).to_dicts())
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
