"""Benchmark: batched Dagster runs (one run per stage) against a baseline commit, in the same run.

    .venv/bin/python benchmarks/batched_runs.py [--baseline 4834182] [--repeats 2] [--toy-repeats 3] [--warm]

The baseline commit is checked out into a temporary git worktree (sharing this checkout's .venv); each
measurement runs the CLI's runner of one tree in a new process, the trees alternating. For each tree:
(a) the example sweep cold into a fresh data dir: the Dagster runs it made (counted in its instance), its
wall time and CPU seconds, and the share of that CPU spent outside the embedding model (the model's calls
timed inside the run, as benchmarks/overhead.py does; goal <= 15%); (b) an unchanged rerun on that data
dir: its wall time as a share of the cold run's (goal <= 2%); (c) the 1-config toy sweep into a fresh
data dir, warm (one untimed run first), `--toy-repeats` times (goal <= 8 s). Prints the medians and
the ratios working tree / baseline.

`--warm` measures a third way beside them: this tree's `rag-sweep` commands forked from a warm process
(`rag-sweep warm`, started once before the measurements, its import time printed and not counted). Its CPU
is the command's and its forked child's (the warm process's reaped children, /proc/PID/stat); the model's
CPU is timed inside the child by benchmarks/model_timer.py, which the warm process preloads.
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

EXAMPLE = ROOT / "examples" / "sweeps" / "example.yaml"
RAG_SWEEP = Path(sys.executable).with_name("rag-sweep")


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


class Warm:
    """This tree's commands, forked from a warm process of their own environment."""

    def __init__(self, tmp: Path):
        self.model_file = tmp / "model_cpu.jsonl"
        folder = Path(tempfile.mkdtemp(prefix="warm", dir="/tmp"))  # short: a socket's path is <= 107 bytes
        self.env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT / "benchmarks"), str(ROOT)]),
            "RAG_SWEEP_WARM_DIR": str(folder),
            "RAG_BENCH_MODEL_CPU": str(self.model_file),
        }
        t0 = time.perf_counter()
        started = self.command("warm", "--preload", "model_timer", "--idle-minutes", "120")
        self.pid = int(started.stdout.split()[2])
        print(
            f"  the warm process {self.pid} imported in {time.perf_counter() - t0:.1f} s (once)", flush=True
        )

    def command(self, *args) -> subprocess.CompletedProcess:
        cmd = [str(RAG_SWEEP), *map(str, args)]
        return subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT, env=self.env)

    def children_cpu(self) -> float:
        """CPU seconds of the warm process's ended children (the commands forked from it)."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")  # cutime, cstime

    def cold(self, data: Path) -> dict:
        before, forked, t0 = children_cpu(), self.children_cpu(), time.perf_counter()
        self.command("run", EXAMPLE, "--data-dir", data)
        wall = time.perf_counter() - t0
        cpu = children_cpu() - before + self.children_cpu() - forked
        spent = json.loads(self.model_file.read_text().splitlines()[-1])
        return {"wall": wall, "cpu": cpu, "outside": 1 - spent["cpu"] / cpu, "runs": dagster_runs(data)}

    def run(self, spec: Path, data: Path) -> float:
        t0 = time.perf_counter()
        self.command("run", spec, "--data-dir", data)
        return time.perf_counter() - t0

    def stop(self) -> None:
        subprocess.run([str(RAG_SWEEP), "warm", "--stop"], capture_output=True, env=self.env)
        shutil.rmtree(self.env["RAG_SWEEP_WARM_DIR"], ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", default="4834182", help="the commit to compare with (before batching)")
    ap.add_argument("--repeats", type=int, default=2, help="cold example runs per tree")
    ap.add_argument("--toy-repeats", type=int, default=3)
    ap.add_argument(
        "--warm", action="store_true", help="also this tree's commands forked from a warm process"
    )
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="batched-runs-"))
    trees = {"baseline": worktree(args.baseline, tmp / "baseline"), "batched": ROOT}
    warm = Warm(tmp) if args.warm else None
    if warm:
        trees["warm"] = ROOT
    figures: dict[str, dict[str, list[float]]] = {name: {} for name in trees}

    def note(name: str, what: str, value: float) -> None:
        figures[name].setdefault(what, []).append(value)

    try:
        spec = toy_sweep(Path(tempfile.mkdtemp(dir=tmp)))
        for i in range(args.repeats):
            for name in list(trees) if i % 2 == 0 else list(trees)[::-1]:
                tree, data = trees[name], tmp / f"{name}-example{i}"
                if name == "warm":
                    c = warm.cold(data)
                    rerun = warm.run(EXAMPLE, data)
                else:
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
            return warm.run(spec, data) if name == "warm" else cli_run(trees[name], spec, data)

        for name in trees:  # warm: the OS caches and compiled modules, not the data
            toy(name, tmp / f"{name}-toy-warmup")
        for i in range(args.toy_repeats):
            for name in list(trees) if i % 2 == 0 else list(trees)[::-1]:
                wall = toy(name, tmp / f"{name}-toy{i}")
                note(name, "toy", wall)
                print(f"  toy {i + 1}, {name:8}: {wall:.1f} s", flush=True)
    finally:
        if warm:
            warm.stop()
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
    print(
        f"1-config toy sweep, warm: {b['toy']:.1f} s -> {n['toy']:.1f} s (x{n['toy'] / b['toy']:.2f}; goal <= 8 s)"
    )
    if warm:
        w = med["warm"]
        print("this tree's commands forked from a warm process (rag-sweep warm):")
        print(f"  Dagster runs of the cold example: {w['runs']:.0f}")
        print(f"  cold example wall: {w['wall']:.0f} s (x{w['wall'] / b['wall']:.2f} the baseline's)")
        print(f"  cold example CPU: {w['cpu']:.0f} CPU-s (x{w['cpu'] / b['cpu']:.2f})")
        print(f"  CPU outside the embedding model: {w['outside']:.0%} (goal <= 15%)")
        print(f"  unchanged rerun, share of the cold run: {w['rerun_share']:.1%} (goal <= 2%)")
        print(f"  1-config toy sweep: {w['toy']:.1f} s (x{w['toy'] / b['toy']:.2f}; goal <= 8 s)")


if __name__ == "__main__":
    sys.exit(main())
