"""Benchmark: what mirroring a run's captured stdout and stderr costs, Dagster's way against the CLI instance's.

    .venv/bin/python benchmarks/compute_logs.py [--captures 12] [--repeats 5]

Alternating, `--repeats` times: `--captures` step captures (one a run: the example's cold run has 12) with
Dagster's LocalComputeLogManager (a `tail` and a Python watcher per stream) and with the CLI instance's
TailedComputeLogManager (rag_sweep/runner/compute_logs.py: one `tail` per stream, ended by the kernel), in a process
holding ~200 MB as a run does. Prints the medians of the CPU seconds of the processes they start, of this
process's own, and of the wall time, and their ratios.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def cpu() -> tuple[float, float]:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--captures", type=int, default=12)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    import numpy as np

    from rag_sweep.runner.compute_logs import TailedComputeLogManager, _ends_with_this_process
    from resources.dagster_private import LocalComputeLogManager

    if _ends_with_this_process() is None:
        print("setpriv cannot run here: the tailed manager falls back to Dagster's mirror", file=sys.stderr)

    held = np.ones(200_000_000 // 8)  # a process the size of a run's: what a fork of it copies
    managers = {"dagster": LocalComputeLogManager, "tailed": TailedComputeLogManager}
    figures: dict[str, dict[str, list[float]]] = {
        name: {"children": [], "own": [], "wall": []} for name in managers
    }
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeats):
            for name in list(managers) if i % 2 == 0 else list(managers)[::-1]:
                manager = managers[name](base_dir=str(Path(tmp) / f"{name}{i}"))
                (own0, kids0), t0 = cpu(), time.perf_counter()
                for step in range(args.captures):
                    with manager.capture_logs(["run", f"step{step}"]):
                        print(f"step {step}", flush=True)
                (own1, kids1), wall = cpu(), time.perf_counter() - t0
                for what, value in (("children", kids1 - kids0), ("own", own1 - own0), ("wall", wall)):
                    figures[name][what].append(value)
    del held
    med = {name: {what: statistics.median(v) for what, v in f.items()} for name, f in figures.items()}
    d, t = med["dagster"], med["tailed"]
    print(f"{args.captures} captures, median of {args.repeats}:", file=sys.stderr)
    for what, label in (
        ("children", "CPU-s of the processes started"),
        ("own", "CPU-s of this process"),
        ("wall", "wall s"),
    ):
        ratio = t[what] / d[what] if d[what] else float("nan")
        print(
            f"  {label}: Dagster's mirror {d[what]:.2f}, tailed {t[what]:.2f} (x{ratio:.2f})", file=sys.stderr
        )


if __name__ == "__main__":
    sys.exit(main())
