"""Benchmark: independent partitions in worker processes against every step in one process.

    .venv/bin/python benchmarks/parallel_steps.py [--repeats 2] [--workers N]

Alternating, `--repeats` times: the example sweep cold (`rag-sweep run`, a new process, a fresh data dir)
with `--workers 1` (the baseline: every step in the CLI's process) and with `--workers N` (default: the
cores this process may use). Prints each run's wall time and CPU seconds (user + system, the workers
included), the medians and their ratios, and checks that both give the same leaderboard (scores and
ranks; latencies are measured, not computed).
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

import polars as pl
from overhead import children_cpu

ROOT = Path(__file__).resolve().parents[1]
CLI = ROOT / ".venv" / "bin" / "rag-sweep"
EXAMPLE = ROOT / "examples" / "sweeps" / "example.yaml"


def run(workers: int, data: Path) -> tuple[float, float]:
    cpu, t0 = children_cpu(), time.perf_counter()
    cmd = [str(CLI), "run", str(EXAMPLE), "--data-dir", str(data), "--workers", str(workers)]
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - t0, children_cpu() - cpu


def board(data: Path) -> pl.DataFrame:
    cols = ["config_key", "rank", "overall_score", "tier"]
    return pl.read_parquet(data / "leaderboards" / "hotpotqa-example.parquet").select(cols).sort("config_key")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    args = ap.parse_args()
    times: dict[int, list[tuple[float, float]]] = {1: [], args.workers: []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeats):
            for n in (1, args.workers) if i % 2 == 0 else (args.workers, 1):
                data = Path(tmp) / f"w{n}-{i}"
                wall, cpu = run(n, data)
                times[n].append((wall, cpu))
                print(f"  repeat {i + 1}, --workers {n}: {wall:6.1f} s wall, {cpu:6.1f} CPU-s", flush=True)
            same = board(Path(tmp) / f"w1-{i}").equals(board(Path(tmp) / f"w{args.workers}-{i}"))
            print(f"  repeat {i + 1}: same leaderboard: {same}")
            if not same:
                sys.exit("the leaderboards differ")
    base_wall = statistics.median(w for w, _ in times[1])
    base_cpu = statistics.median(c for _, c in times[1])
    wall = statistics.median(w for w, _ in times[args.workers])
    cpu = statistics.median(c for _, c in times[args.workers])
    print(f"\ncores available: {len(os.sched_getaffinity(0))}")
    print(f"--workers 1 (baseline): {base_wall:.1f} s wall, {base_cpu:.1f} CPU-s (medians)")
    print(f"--workers {args.workers}: {wall:.1f} s wall, {cpu:.1f} CPU-s (medians)")
    print(
        f"speed-up (baseline wall / wall): x{base_wall / wall:.2f}; CPU x{cpu / base_cpu:.2f} of the baseline's"
    )


if __name__ == "__main__":
    main()
