"""Benchmark: a sweep of a 100k-chunk corpus through `rag-sweep run`, end to end, as a user runs it.

    .venv/bin/python benchmarks/sweep_scale.py [--chunks 100000] [--queries 200] [--index ivf_sq] [--keep DIR]
    .venv/bin/python benchmarks/sweep_scale.py --fleet 1 [--chunks 100000]   # scripts/ensure_servers.sh first

A synthetic corpus as benchmarks/scale.py's (seeded; documents of ~5 paragraphs of words drawn from a
Zipf-like vocabulary; recursive 384-character chunks, ~5 a document) and `--queries` questions (8
consecutive words of a paragraph; its document the relevant one, its next word the answer), embedded by the
example plug-in `hashed_words` (examples/plugins, installed by uv into a folder on the CLI's path, as a
user's plug-in is: no model, so the model's ~25 passages/s are not what is measured), indexed in LanceDB
with IVF-SQ, or IVF-RQ (its default 4 bits a dimension) with `--index ivf_rq` (~sqrt(n) partitions, 30%
probed, refine 10; at 100k IVF-SQ searched the faster, benchmarks/HISTORY.md), searched by vector and
hybrid retrieval (top 5), answered by the extractive reader. Prints the run's wall seconds, the CLI's peak
resident memory and its leaderboard.

With `--fleet N`: the same sweep on a deployment, started as benchmarks/fleet.py starts one (PostgreSQL, the
S3-compatible server, the MLflow server, RabbitMQ): the data dir in the bucket (`RAG_DATA_DIR=s3://…`) and
every step on N Celery workers (`RAG_EXECUTOR=celery`), each with the plug-in on its path; the peak is then
the largest of the CLI's and the workers' (each a child of this script).
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


def sweep_yaml(folder: Path, chunks: int, index: str) -> Path:
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
  ann: {{type: {index}, num_partitions: {partitions}, nprobes: {math.ceil(partitions * 0.3)}, refine_factor: 10}}
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
    ap.add_argument("--index", choices=("ivf_sq", "ivf_rq"), default="ivf_sq", help="the approximate index")
    ap.add_argument("--fleet", type=int, default=0, help="Celery workers, data dir on S3 (0: in process)")
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
    spec = sweep_yaml(work, args.chunks, args.index)
    out = work / "board.parquet"
    try:
        if args.fleet:
            wall, peak_mb = on_fleet(args.fleet, spec, out, site, work)
        else:
            env = {**os.environ, "PYTHONPATH": str(site)}
            wall = sweep(env, spec, out, ["--data-dir", str(work / "rag_data")])
            peak_mb = children_peak_mb()
    except subprocess.CalledProcessError as e:
        print(e.stdout[-6000:], e.stderr[-6000:], sep="\n", file=sys.stderr)
        sys.exit(e.returncode)
    where = f"{args.fleet} Celery worker(s), data dir on S3" if args.fleet else "in process, local disk"
    print(
        f"rag-sweep run ({where}): {wall:.1f} s wall, peak RSS {peak_mb:,.0f} MB ({args.chunks:,d}-chunk target)"
    )
    import polars as pl

    figures = ["label", "ann_recall_at_k", "index_build_s", "index_build_peak_mb", "retrieval_p95_ms"]
    print(pl.read_parquet(out).select(figures).to_dicts())
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


def children_peak_mb() -> float:
    """The largest peak resident memory of the children (and their children) reaped so far."""
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


def sweep(env: dict, spec: Path, out: Path, extra: list[str]) -> float:
    """`rag-sweep run` of `spec` in `env`, its board written to `out`: its wall seconds."""
    cmd = [sys.executable, "-m", "rag_sweep.cli", "run", str(spec), "--output", str(out), *extra]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - t0
    print(done.stdout[-6000:])
    return wall


def on_fleet(n: int, spec: Path, out: Path, site: Path, work: Path) -> tuple[float, float]:
    """The sweep on `n` Celery workers, its data dir in the S3 server's bucket: its wall seconds (the
    workers' start included) and the largest peak RSS of the CLI and the workers (taken before the servers,
    also children of this process, stop)."""
    sys.path.insert(0, str(ROOT))
    from tests.servers import CeleryWorker, fleet_instance, fleet_servers, stop_all

    servers = fleet_servers()
    try:
        # a fresh folder for the Dagster home and the workers' dirs: a --keep folder can be run again
        here = Path(tempfile.mkdtemp(dir=work, prefix="fleet-"))
        shared, home = fleet_instance("scale", servers, here)
        base = {k: v for k, v in os.environ.items() if not k.startswith(("DAGSTER_", "RAG_", "MLFLOW_"))}
        base["PYTHONPATH"] = f"{site}{os.pathsep}{ROOT}"  # the plug-in, as on every worker machine
        t0 = time.perf_counter()
        workers = [CeleryWorker.start(f"scale-{i}", "dagster", {**base, **shared}, here) for i in range(n)]
        data = f"s3://{servers['s3'].bucket}/scale"
        env = {**base, **shared, "DAGSTER_HOME": str(home), "RAG_EXECUTOR": "celery", "RAG_DATA_DIR": data}
        sweep(env, spec, out, [])
        wall = time.perf_counter() - t0
        for w in workers:
            w.stop()  # reaped: a worker's peak RSS (and its pool's) is then a child's
        return wall, children_peak_mb()
    finally:
        stop_all()


if __name__ == "__main__":
    sys.exit(main())
