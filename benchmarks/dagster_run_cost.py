"""Benchmark: what one Dagster run costs `rag-sweep run`, on the embedded SQLite instance and on PostgreSQL.

    .venv/bin/python benchmarks/dagster_run_cost.py [--repeats 3] [--steps 10]

`rag-sweep run` materializes a stage's due partitions in one Dagster run (each still recorded with its
own fingerprint, what reuse stands on). This measures a run's bookkeeping, with as little work beside it as a step can have:
the toy sweep (20 documents, 5 questions) is run once per instance, then a step whose artifact is already
there (a chunkset, a retrieval, a reranking in turn: the step reads its small artifact, reports and checks
it, and records the run) is materialized `--steps` times on each, alternating, `--repeats` times: an
upper bound on the bookkeeping. CPU is this process's (all threads) and its children's (the processes
mirroring each step's output for the UI) plus, for PostgreSQL, its server's (the postmaster and its
backends; a local server with fsync off, as the tests start it).
Prints CPU-s and wall time per run, their medians, the ratio PostgreSQL / SQLite, and what the example
sweep's cold run (one run per partition) pays for it at that rate.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.pop("DAGSTER_HOME", None)  # the CLI's own SQLite instance, not one configured outside

from overhead import children_cpu  # noqa: E402
from rerun_and_toy import toy_sweep  # noqa: E402

from rag_sweep.runner import run_sweep  # noqa: E402
from rag_sweep.runner.step_runs import StepRunner  # noqa: E402
from tests.servers import Postgres  # noqa: E402

STAGES = ("chunksets", "retrievals", "rerankings")
EXAMPLE = ROOT / "examples" / "sweeps" / "example.yaml"


def server_cpu(pg: Postgres | None) -> float:
    """CPU-s of the PostgreSQL server: the postmaster (with its ended backends) and its live backends."""
    if pg is None:
        return 0.0
    tick = os.sysconf("SC_CLK_TCK")
    master = int((pg.tmp / "data" / "postmaster.pid").read_text().split()[0])
    total = 0
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # ended meanwhile
            continue
        if int(proc.name) == master:
            total += sum(int(f) for f in fields[11:15])  # utime, stime, and those of waited-for children
        elif int(fields[1]) == master:
            total += int(fields[11]) + int(fields[12])
    return total / tick


def postgres_home(folder: Path, pg: Postgres) -> Path:
    home = folder / "dagster_home"
    home.mkdir(parents=True)
    shutil.copy(ROOT / "deploy" / "dagster.yaml", home / "dagster.yaml")
    os.environ.update(
        DAGSTER_PG_HOST="127.0.0.1",
        DAGSTER_PG_PORT=str(pg.port),
        DAGSTER_PG_USER=pg.user,
        DAGSTER_PG_PASSWORD="",
        DAGSTER_PG_DB=pg.create_db("dagster"),
    )
    return home


def runner(spec: Path, data: Path, home: Path | None) -> StepRunner:
    """The toy sweep run cold on the instance of `home` (None: the CLI's embedded SQLite instance)."""
    if home is not None:
        os.environ["DAGSTER_HOME"] = str(home)
    try:
        sweep = run_sweep(str(spec), data_dir=str(data), progress=False)
    finally:
        os.environ.pop("DAGSTER_HOME", None)
    return StepRunner(sweep.defs, sweep.instance, {"sweep": sweep.plan.sweep.name}, False, sweep.plan)


def own_cpu() -> float:
    """CPU-s of this process (every thread) and of its ended children."""
    return time.process_time() + children_cpu()


def per_run(step: StepRunner, n: int, pg: Postgres | None) -> tuple[float, float, float]:
    """CPU-s of this process and its children, CPU-s of the server and wall seconds, per run."""
    keys = [(stage, next(iter(step.plan.partitions[stage]))) for stage in STAGES]
    cpu, server, t0 = own_cpu(), server_cpu(pg), time.perf_counter()
    for i in range(n):
        step(*keys[i % len(keys)])
    wall = time.perf_counter() - t0
    return (own_cpu() - cpu) / n, (server_cpu(pg) - server) / n, wall / n


def example_runs() -> int:
    """Dagster runs of the example's cold run: one per stage (its partitions in one batch), the input
    snapshots (one run), the leaderboard, the holdout's stages, the confirmation and the champion."""
    from rag_sweep.runner import load_plan

    plan = load_plan(str(EXAMPLE))
    return 1 + len(plan.partitions) + 1 + len(plan.holdout_partitions) + 2


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10, help="runs timed per instance and repeat")
    args = ap.parse_args()
    pg = Postgres.start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            spec = toy_sweep(tmp)
            runners = {
                "SQLite": (runner(spec, tmp / "sqlite", None), None),
                "PostgreSQL": (runner(spec, tmp / "postgres", postgres_home(tmp / "pg", pg)), pg),
            }
            for step, server in runners.values():  # first runs of a process pay one-off imports
                per_run(step, len(STAGES), server)
            figures: dict[str, list[tuple[float, float, float]]] = {name: [] for name in runners}
            for i in range(args.repeats):
                for name in list(runners) if i % 2 == 0 else list(runners)[::-1]:
                    step, server = runners[name]
                    client, served, wall = per_run(step, args.steps, server)
                    figures[name].append((client + served, served, wall))
                    print(
                        f"  repeat {i + 1}, {name:10}: {client + served:.3f} CPU-s ({served:.3f} in the server), "
                        f"{wall:.3f} s wall per run",
                        flush=True,
                    )
    finally:
        pg.stop()
    median = {
        name: [statistics.median(f[j] for f in runs) for j in range(3)] for name, runs in figures.items()
    }
    for name, (cpu, served, wall) in median.items():
        print(f"{name:10} median: {cpu:.3f} CPU-s ({served:.3f} in the server), {wall:.3f} s wall per run")
    sqlite, postgres = median["SQLite"], median["PostgreSQL"]
    print(
        f"PostgreSQL / SQLite: x{postgres[0] / sqlite[0]:.2f} CPU (client + server), "
        f"x{(postgres[0] - postgres[1]) / sqlite[0]:.2f} in this process alone, x{postgres[2] / sqlite[2]:.2f} wall"
    )
    n = example_runs()
    print(
        f"the example's cold run makes {n} runs (84 before batching): ~{n * sqlite[0]:.0f} CPU-s of "
        f"bookkeeping on SQLite (~{84 * sqlite[0]:.0f} before)"
    )


if __name__ == "__main__":
    main()
