"""Benchmark: the example sweep on a worker fleet of one Celery worker against two.

    .venv/bin/python benchmarks/fleet.py [--repeats 2] [--workers 2] [--in-process]
    .venv/bin/python benchmarks/fleet.py --baseline 4834182 [--repeats 1] [--workers 2]

With `--baseline REF`: that commit (checked out into a temporary git worktree; its runner and its workers
run its code) against this tree, each with `--workers` workers and in process on the same deployment,
alternating: the fleet's own cost per step (a partition materialized) is (fleet wall - in-process wall) /
steps, before and after.

Starts what the fleet tests start (RabbitMQ, the S3-compatible server, PostgreSQL, the MLflow server; run
scripts/ensure_servers.sh first), then alternating, `--repeats` times: the example sweep cold
(`rag-sweep run` with $RAG_EXECUTOR=celery, a fresh data dir prefix and a fresh Dagster database) with one
worker (the baseline) and with `--workers` workers, each started for the run and stopped after it. Prints
each run's wall time, steps per minute (the Dagster runs the sweep made, over its wall time) and CPU
seconds per config (user + system of the runner and every worker, their start included), the medians and
their ratios, and checks that both give the same leaderboard (scores and ranks). `--in-process` adds, per
repeat, the same sweep with every step in the runner's process on the same deployment (S3, PostgreSQL,
MLflow server): what the fleet itself costs, apart from the deployment's storage.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import dagster as dg
import polars as pl
from baseline import remove, worktree
from overhead import children_cpu

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from rag_core.planning.stages import STAGES  # noqa: E402
from tests.servers import CeleryWorker, fleet_instance, fleet_servers, stop_all  # noqa: E402

EXAMPLE = ROOT / "examples" / "sweeps" / "example.yaml"
SWEEP = "hotpotqa-example"
# every asset of the sweep that a step materializes: the registry's stages and the champion
STAGE_NAMES = (*(s.name for s in STAGES), "champion_model")


def run(n: int, label: str, servers: dict, tmp: Path, tree: Path = ROOT) -> dict:
    s3 = servers["s3"]
    shared, home = fleet_instance(label, servers, tmp)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("DAGSTER_", "RAG_", "MLFLOW_"))}
    base["PYTHONPATH"] = str(tree)  # the code of the tree measured, for the runner and its workers
    data = f"s3://{s3.bucket}/bench/{label}"
    out = tmp / f"{label}.parquet"
    cpu, t0 = children_cpu(), time.perf_counter()
    workers = [CeleryWorker.start(f"{label}-{i}", "dagster", {**base, **shared}, tmp) for i in range(n)]
    cwd = tmp / f"cwd-{label}"
    cwd.mkdir()
    executor = "celery" if n else "in_process"
    env = {**base, **shared, "DAGSTER_HOME": str(home), "RAG_EXECUTOR": executor, "RAG_DATA_DIR": data}
    cmd = [
        sys.executable,
        "-m",
        "rag_sweep.cli",
        "run",
        str(tree / EXAMPLE.relative_to(ROOT)),
        "--output",
        str(out),
    ]
    subprocess.run(cmd, cwd=cwd, env=env, check=True, capture_output=True)
    wall = time.perf_counter() - t0
    for w in workers:
        w.stop()  # reaped: their CPU (and their pool processes') is counted below
    cpu = children_cpu() - cpu
    saved = {k: os.environ.get(k) for k in shared}
    os.environ.update(shared)
    try:
        instance = dg.DagsterInstance.from_config(str(home))
        runs = instance.get_runs_count(dg.RunsFilter(tags={"sweep": SWEEP}))
        steps = sum(  # partitions materialized (a run may materialize a batch of them)
            len(
                instance.fetch_materializations(dg.AssetKey(["hotpotqa_example", stage]), limit=10000).records
            )
            for stage in STAGE_NAMES
        )
    finally:
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    board = pl.read_parquet(out)
    return {"wall": wall, "cpu": cpu, "steps": steps, "runs": runs, "configs": board.height, "board": board}


def name(n: int) -> str:
    return f"{n} worker(s)" if n else "in process"


def against_baseline(ref: str, workers: int, repeats: int) -> None:
    """The fleet's cost per step, this tree against `ref`, each with `workers` workers and in process."""
    servers = fleet_servers()
    figures: dict[str, list[float]] = {}
    tmp = Path(tempfile.mkdtemp(prefix="fleet-bench-"))
    trees = {"baseline": worktree(ref, tmp / "baseline"), "now": ROOT}
    try:
        for i in range(repeats):
            for tree in list(trees) if i % 2 == 0 else list(trees)[::-1]:
                fleet = run(workers, f"{tree}-w{workers}-{i}", servers, tmp, trees[tree])
                local = run(0, f"{tree}-local-{i}", servers, tmp, trees[tree])
                per_step = (fleet["wall"] - local["wall"]) / fleet["steps"]
                figures.setdefault(tree, []).append(per_step)
                print(
                    f"  repeat {i + 1}, {tree:8}: {workers} workers {fleet['wall']:.0f} s ({fleet['runs']} runs), "
                    f"in process {local['wall']:.0f} s ({local['runs']} runs), {fleet['steps']} steps: "
                    f"the fleet adds {per_step:.2f} s a step",
                    flush=True,
                )
    finally:
        stop_all()
        remove(tmp / "baseline")
    b, n = (statistics.median(figures[t]) for t in ("baseline", "now"))
    # a ratio says nothing once the cost is within noise of zero (the fleet as fast as in process, or faster)
    ratio = f"x{n / b:.2f}" if n > 0 and b > 0 else "none measured: the fleet ran as fast as in process"
    print(f"the fleet's cost per step (medians): {b:.2f} s -> {n:.2f} s ({ratio})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--in-process", action="store_true", help="also every step in the runner's process")
    ap.add_argument("--baseline", help="a commit: its fleet cost per step against this tree's")
    args = ap.parse_args()
    if args.baseline:
        return against_baseline(args.baseline, args.workers, args.repeats)
    modes = (1, args.workers, 0) if args.in_process else (1, args.workers)
    servers = fleet_servers()
    results: dict[int, list[dict]] = {n: [] for n in modes}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for i in range(args.repeats):
                for n in modes if i % 2 == 0 else modes[::-1]:
                    r = run(n, f"w{n}-{i}", servers, Path(tmp))
                    results[n].append(r)
                    print(
                        f"  repeat {i + 1}, {name(n)}: {r['wall']:6.1f} s wall, {r['steps']} steps "
                        f"({60 * r['steps'] / r['wall']:.1f}/min), {r['cpu'] / r['configs']:.1f} CPU-s per config",
                        flush=True,
                    )
                cols = ["config_key", "rank", "overall_score", "tier"]
                a, *others = (results[n][-1]["board"].select(cols).sort("config_key") for n in modes)
                same = all(a.equals(b) for b in others)
                print(f"  repeat {i + 1}: same leaderboard: {same}")
                if not same:
                    sys.exit("the leaderboards differ")
    finally:
        stop_all()

    def med(n: int, f) -> float:
        return statistics.median(f(r) for r in results[n])

    rate = lambda r: 60 * r["steps"] / r["wall"]  # noqa: E731
    per_config = lambda r: r["cpu"] / r["configs"]  # noqa: E731
    print(f"\ncores available: {len(os.sched_getaffinity(0))}")
    for n in modes:
        print(
            f"{name(n)}{' (baseline)' if n == 1 else ''}: {med(n, lambda r: r['wall']):.1f} s wall, "
            f"{med(n, rate):.1f} steps/min, {med(n, per_config):.1f} CPU-s per config (medians)"
        )
    for n in modes[1:]:
        print(
            f"{name(n)} vs 1 worker: steps/min x{med(n, rate) / med(1, rate):.2f}, "
            f"CPU-s per config x{med(n, per_config) / med(1, per_config):.2f}"
        )


if __name__ == "__main__":
    main()
