"""Benchmark: `rag-sweep run` of this tree against an earlier revision's, alternated in one run.

    .venv/bin/python benchmarks/against_revision.py REV [--repeats 3] [--example] [--events N] [--validate]

Exports revision REV (`git archive`) into a temporary folder and runs the CLI of each tree, one after the
other `--repeats` times, as a user starts it (a process of its own, the same .venv; the tree first on
PYTHONPATH): the 1-config toy sweep of benchmarks/rerun_and_toy.py into a fresh data dir, and with
`--example` the example sweep cold; with `--events N` instead, only the CLI instance's storage: N asset
observations recorded and read back on a fresh `<data dir>/dagster_home` (rag_sweep/runner/instance.py); with
`--validate` instead, only `rag-sweep validate` of the example (a command's start-up: its imports, the sweep
and its data loaded). Prints each tree's median wall time and the ratio this tree / REV (the
machine drifts: only the ratio of runs taken side by side means much).
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rerun_and_toy import EXAMPLE, ROOT, toy_sweep  # noqa: E402

PYTHON = ROOT / ".venv" / "bin" / "python"


def run(tree: Path, spec: Path, data: Path, *command_args: str) -> float:
    """Seconds `rag-sweep run` of `spec` into `data` took with `tree`'s code (another command: its args)."""
    env = {**os.environ, "PYTHONPATH": str(tree), "RAG_SWEEP_WARM": "0"}
    command = [str(PYTHON), "-c", "import sys; from rag_sweep.console import main; sys.exit(main())"]
    args = list(command_args) or ["run", str(spec), "--data-dir", str(data)]
    t0 = time.perf_counter()
    subprocess.run([*command, *args], cwd=tree, env=env, check=True, capture_output=True)
    return time.perf_counter() - t0


EVENTS = """
import sys, time
from pathlib import Path
import dagster as dg
from rag_sweep.runner.instance import local_instance
n = int(sys.argv[2])
with local_instance(Path(sys.argv[1])) as instance:
    t0 = time.perf_counter()
    for i in range(n):
        instance.report_runless_asset_event(dg.AssetObservation(dg.AssetKey(f"a{i % 10}")))
    for i in range(n // 10):
        instance.fetch_observations(dg.AssetKey(f"a{i % 10}"), limit=5)
    print(time.perf_counter() - t0)
"""


def events(tree: Path, data: Path, n: int) -> float:
    """Seconds the instance took to record `n` observations and answer n / 10 reads (the process's start,
    imports and the instance's creation apart)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(
        [str(PYTHON), "-c", EVENTS, str(data), str(n)], cwd=tree, env=env, check=True, capture_output=True
    )
    return float(out.stdout.decode().split()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rev", help="the revision to compare with (a commit, a branch, HEAD~1)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--example", action="store_true", help="the example sweep cold too (minutes a run)")
    ap.add_argument("--events", type=int, default=0, help="only the instance's storage: N events")
    ap.add_argument("--validate", action="store_true", help="only `rag-sweep validate` of the example")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        before = tmp / "before"
        before.mkdir()
        archive = subprocess.run(["git", "archive", args.rev], cwd=ROOT, check=True, capture_output=True)
        subprocess.run(["tar", "-x", "-C", str(before)], input=archive.stdout, check=True)
        trees = {args.rev: before, "this tree": ROOT}
        fresh = (tmp / f"data{n}" for n in range(10**6))  # a new data dir for each run
        if args.events:
            took = {t: [] for t in trees}
            for _ in range(args.repeats):
                for t, tree in trees.items():
                    took[t].append(events(tree, next(fresh), args.events))
            base, this = (statistics.median(took[t]) for t in trees)
            runs = "; ".join(f"{t}: {', '.join(f'{x:.2f}' for x in took[t])}" for t in trees)
            print(
                f"{args.events} events + {args.events // 10} reads on the CLI's instance: {args.rev} {base:.2f} s"
                f" ({base / args.events * 1e3:.1f} ms an event), this tree {this:.2f} s "
                f"({this / args.events * 1e3:.1f} ms), x{this / base:.2f} ({runs})"
            )
            return
        if args.validate:
            took = {t: [] for t in trees}
            for tree in trees.values():  # untimed: the OS caches and compiled modules of each tree
                run(tree, EXAMPLE, tmp, "validate", str(EXAMPLE))
            for _ in range(args.repeats):
                for t, tree in trees.items():
                    took[t].append(run(tree, EXAMPLE, tmp, "validate", str(EXAMPLE)))
            base, this = (statistics.median(took[t]) for t in trees)
            runs = "; ".join(f"{t}: {', '.join(f'{x:.2f}' for x in took[t])}" for t in trees)
            print(
                f"rag-sweep validate (example): {args.rev} {base:.2f} s, this tree {this:.2f} s, x{this / base:.2f} ({runs})"
            )
            return
        toy = toy_sweep(tmp)
        for tree in trees.values():  # untimed: the OS caches and compiled modules of each tree
            run(tree, toy, next(fresh))
        sweeps = {"toy sweep (1 config, 20 docs, 5 questions)": toy}
        if args.example:
            sweeps["example sweep cold"] = EXAMPLE
        times = {(s, t): [] for s in sweeps for t in trees}
        for _ in range(args.repeats):
            for s, spec in sweeps.items():
                for t, tree in trees.items():
                    times[(s, t)].append(run(tree, spec, next(fresh)))
        for s in sweeps:
            base, this = (statistics.median(times[(s, t)]) for t in trees)
            runs = "; ".join(f"{t}: {', '.join(f'{x:.1f}' for x in times[(s, t)])}" for t in trees)
            print(f"{s}: {args.rev} {base:.1f} s, this tree {this:.1f} s, x{this / base:.2f} ({runs})")


if __name__ == "__main__":
    sys.exit(main())
