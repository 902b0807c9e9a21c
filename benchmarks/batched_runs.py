"""Benchmark: batched Dagster runs (one run per stage) against a baseline commit, in the same run.

    .venv/bin/python benchmarks/batched_runs.py [--baseline 4834182] [--repeats 2] [--toy-repeats 3]

The baseline commit is checked out into a temporary git worktree (sharing this checkout's .venv); each
measurement runs the CLI's runner of one tree in a new process, the trees alternating. For each tree:
(a) the example sweep cold into a fresh data dir: the Dagster runs it made (counted in its instance), its
wall time and CPU seconds, and the share of that CPU spent outside the embedding model (the model's calls
timed inside the run, as benchmarks/overhead.py does; goal <= 15%); (b) an unchanged rerun on that data
dir: its wall time as a share of the cold run's (goal <= 2%); (c) the 1-config toy sweep into a fresh
data dir, warm (one untimed run first), `--toy-repeats` times. Prints the medians and the ratios working
tree / baseline.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.pop("DAGSTER_HOME", None)  # each data dir's own SQLite instance

from baseline import remove, worktree  # noqa: E402
from overhead import INSTRUMENTED_RUN, PY, children_cpu  # noqa: E402
from rerun_and_toy import toy_sweep  # noqa: E402


def env_for(tree: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(tree)}


def dagster_runs(data: Path) -> int:
    import dagster as dg

    with dg.DagsterInstance.from_config(str(data / "dagster_home")) as instance:
        return instance.get_runs_count()


def cold(tree: Path, data: Path) -> dict:
    before, t0 = children_cpu(), time.perf_counter()
    code = INSTRUMENTED_RUN.format(
        root=str(tree),
        benchmarks=str(ROOT / "benchmarks"),
        spec=str(tree / "examples/sweeps/example.yaml"),
        data=str(data),
    )
    out = subprocess.run([str(PY), "-c", code], check=True, capture_output=True, text=True, env=env_for(tree))
    wall = time.perf_counter() - t0
    spent = json.loads(out.stdout.strip().splitlines()[-1])
    cpu = children_cpu() - before
    return {"wall": wall, "cpu": cpu, "outside": 1 - spent["cpu"] / cpu, "runs": dagster_runs(data)}


def cli_run(tree: Path, spec: Path, data: Path) -> float:
    t0 = time.perf_counter()
    cmd = [str(PY), "-m", "rag_sweep.cli", "run", str(spec), "--data-dir", str(data)]
    subprocess.run(cmd, check=True, capture_output=True, cwd=tree, env=env_for(tree))
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", default="4834182", help="the commit to compare with (before batching)")
    ap.add_argument("--repeats", type=int, default=2, help="cold example runs per tree")
    ap.add_argument("--toy-repeats", type=int, default=3)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="batched-runs-"))
    trees = {"baseline": worktree(args.baseline, tmp / "baseline"), "batched": ROOT}
    figures: dict[str, dict[str, list[float]]] = {name: {} for name in trees}

    def note(name: str, what: str, value: float) -> None:
        figures[name].setdefault(what, []).append(value)

    try:
        spec = toy_sweep(Path(tempfile.mkdtemp(dir=tmp)))
        for i in range(args.repeats):
            for name in list(trees) if i % 2 == 0 else list(trees)[::-1]:
                tree, data = trees[name], tmp / f"{name}-example{i}"
                c = cold(tree, data)
                rerun = cli_run(tree, tree / "examples/sweeps/example.yaml", data)
                for what, value in {**c, "rerun_share": rerun / c["wall"]}.items():
                    note(name, what, value)
                print(
                    f"  repeat {i + 1}, {name:8}: cold {c['wall']:.0f} s, {c['cpu']:.0f} CPU-s, "
                    f"{c['outside']:.0%} outside the model, {c['runs']} Dagster runs; unchanged rerun "
                    f"{rerun:.1f} s ({rerun / c['wall']:.1%})",
                    flush=True,
                )

        def toy(name: str, data: Path) -> float:
            return cli_run(trees[name], spec, data)

        warm_up = list(trees) if args.toy_repeats else []  # the OS caches and compiled modules, not the data
        for name in warm_up:
            toy(name, tmp / f"{name}-toy-warmup")
        for i in range(args.toy_repeats):
            for name in list(trees) if i % 2 == 0 else list(trees)[::-1]:
                wall = toy(name, tmp / f"{name}-toy{i}")
                note(name, "toy", wall)
                print(f"  toy {i + 1}, {name:8}: {wall:.1f} s", flush=True)
    finally:
        remove(tmp / "baseline")
        shutil.rmtree(tmp, ignore_errors=True)
    med = {name: {w: statistics.median(v) for w, v in f.items()} for name, f in figures.items()}
    b, n = med["baseline"], med["batched"]
    print(f"Dagster runs of the cold example: {b['runs']:.0f} -> {n['runs']:.0f} (goal <= 15)")
    print(f"cold example wall: {b['wall']:.0f} s -> {n['wall']:.0f} s (x{n['wall'] / b['wall']:.2f})")
    print(f"cold example CPU: {b['cpu']:.0f} -> {n['cpu']:.0f} CPU-s (x{n['cpu'] / b['cpu']:.2f})")
    print(f"CPU outside the embedding model: {b['outside']:.0%} -> {n['outside']:.0%} (goal <= 15%)")
    print(
        f"unchanged rerun, share of the cold run: {b['rerun_share']:.1%} -> {n['rerun_share']:.1%} (goal <= 2%)"
    )
    if args.toy_repeats:
        print(f"1-config toy sweep, warm: {b['toy']:.1f} s -> {n['toy']:.1f} s (x{n['toy'] / b['toy']:.2f})")


if __name__ == "__main__":
    sys.exit(main())
