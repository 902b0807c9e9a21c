"""Benchmark: `rag-sweep run` as a user starts it, with no `rag-sweep warm`: the first run leaves a warm
process behind; what that costs the first run, and what the next run takes.

    .venv/bin/python benchmarks/warm_start.py [--repeats 3] [--example]

For each repeat, alternating the two (the order swapped every repeat), each in a socket folder of its own:
- `RAG_SWEEP_WARM=0` (the baseline): two toy runs, each in a process of its own;
- `RAG_SWEEP_WARM=1`: the first toy run forks the warm process from itself; once it has imported the rest
  (litellm, after the run: waited for, not timed, its CPU printed), the second toy run is forked from it.
The toy is benchmarks/rerun_and_toy.py's (20 documents, 5 questions, 1 config), each run into a fresh data
dir, after one untimed run (the OS caches). Prints the medians of the first and the second runs and the
ratios to the baseline (goal for the toy: <= 8 s, issue 43). `--example` also times the example sweep's
cold run both ways (the first run of the day on a real sweep: its wall time and the command's CPU).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "benchmarks")]
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.pop("DAGSTER_HOME", None)  # each data dir's own SQLite instance
os.environ.pop("CI", None)  # as on a user's machine

from overhead import children_cpu  # noqa: E402
from rerun_and_toy import toy_sweep  # noqa: E402

EXAMPLE = ROOT / "examples" / "sweeps" / "example.yaml"
RAG_SWEEP = Path(sys.executable).with_name("rag-sweep")


def process_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


class Mode:
    """`rag-sweep run` in an environment of its own (a socket folder of its own, RAG_SWEEP_WARM set)."""

    def __init__(self, warm: bool):
        self.warm = warm
        self.folder = Path(tempfile.mkdtemp(prefix="ws", dir="/tmp"))  # short: a socket path <= 107 bytes
        self.env = {
            **os.environ,
            "RAG_SWEEP_WARM_DIR": str(self.folder),
            "RAG_SWEEP_WARM": "1" if warm else "0",
        }

    def run(self, spec: Path, data: Path) -> tuple[float, float, str]:
        """Wall seconds, the command's CPU seconds (not a warm process's), its stderr."""
        cpu, t0 = children_cpu(), time.perf_counter()
        done = subprocess.run(
            [str(RAG_SWEEP), "run", str(spec), "--data-dir", str(data)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=self.env,
        )
        wall = time.perf_counter() - t0
        if done.returncode:
            sys.exit(f"rag-sweep run {spec} failed:\n{done.stderr[-3000:]}")
        return wall, children_cpu() - cpu, done.stderr

    def ready(self, stderr: str, timeout: float = 300) -> tuple[int, float]:
        """The warm process the first run started, once it has imported the rest: (pid, its CPU seconds)."""
        found = re.search(r"warm process (\d+) started", stderr)
        if not found:
            sys.exit(f"the first run started no warm process:\n{stderr[-3000:]}")
        pid, deadline = int(found.group(1)), time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any("imported the rest" in log.read_text() for log in self.folder.glob("*.log")):
                return pid, process_cpu(pid)
            time.sleep(0.2)
        sys.exit(f"the warm process {pid} did not finish importing in {timeout:g} s")

    def stop(self) -> None:
        subprocess.run([str(RAG_SWEEP), "warm", "--stop"], capture_output=True, env=self.env)
        shutil.rmtree(self.folder, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--example", action="store_true", help="also the example sweep's cold run, both ways")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="warm-start-"))
    spec = toy_sweep(tmp)
    figures: dict[str, list[float]] = {}

    def add(name: str, value: float) -> None:
        figures.setdefault(name, []).append(value)

    try:
        Mode(False).run(spec, tmp / "untimed")  # the OS caches, the compiled modules
        for r in range(args.repeats):
            for warm in (False, True) if r % 2 == 0 else (True, False):
                mode, name = Mode(warm), "warm" if warm else "off"
                try:
                    wall, cpu, err = mode.run(spec, tmp / f"{name}{r}-first")
                    add(f"{name} first", wall)
                    add(f"{name} first cpu", cpu)
                    if warm:
                        pid, imported = mode.ready(err)
                        add("warm process cpu", imported)
                    wall, _, _ = mode.run(spec, tmp / f"{name}{r}-next")
                    add(f"{name} next", wall)
                    if args.example:
                        if warm:
                            mode.stop()  # the example's first run of a new environment starts its own
                            mode = Mode(True)
                        wall, cpu, _ = mode.run(EXAMPLE, tmp / f"{name}{r}-example")
                        add(f"{name} example", wall)
                        add(f"{name} example cpu", cpu)
                finally:
                    mode.stop()
                print(
                    f"  repeat {r + 1} {name}: "
                    + ", ".join(f"{k} {v[-1]:.1f}" for k, v in figures.items() if k.startswith(name)),
                    flush=True,
                )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    def med(name: str) -> float:
        return statistics.median(figures[name])

    def runs(name: str) -> str:
        return ", ".join(f"{v:.1f}" for v in figures[name])

    print("\n`rag-sweep run`, the toy sweep (1 config, 20 documents, 5 questions), fresh data dirs:")
    print(
        f"  first run, starting the warm process: {med('warm first'):.1f} s ({runs('warm first')}), "
        f"command CPU {med('warm first cpu'):.1f} s; with RAG_SWEEP_WARM=0 {med('off first'):.1f} s "
        f"({runs('off first')}), CPU {med('off first cpu'):.1f} s: x{med('warm first') / med('off first'):.2f}"
    )
    print(
        f"  the warm process then imported the rest on its own: {med('warm process cpu'):.1f} CPU-s "
        "(after the run, not timed)"
    )
    print(
        f"  next run: forked from it {med('warm next'):.1f} s ({runs('warm next')}); in a process of its "
        f"own {med('off next'):.1f} s ({runs('off next')}): x{med('warm next') / med('off next'):.2f} "
        f"(goal <= 8 s: {'met' if med('warm next') <= 8 else 'not met'})"
    )
    if args.example:
        print(
            f"  the example's cold run, starting the warm process: {med('warm example'):.1f} s "
            f"({runs('warm example')}), command CPU {med('warm example cpu'):.1f} s; with RAG_SWEEP_WARM=0 "
            f"{med('off example'):.1f} s ({runs('off example')}), CPU {med('off example cpu'):.1f} s: "
            f"x{med('warm example') / med('off example'):.2f}"
        )


if __name__ == "__main__":
    main()
