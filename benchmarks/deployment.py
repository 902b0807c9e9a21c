"""Benchmark: a sweep materialized from the Dagster UI on a deployment against `rag-sweep run`, end to end.

    .venv/bin/python benchmarks/deployment.py [--repeats 1] [--skip-halving | --skip-grid] [--timeline
        [--steps]] [--cpu] [--idle SECONDS] [--backfill]

A deployment as the whole-stack tests start it (the webserver and Dagster's stock daemon on a PostgreSQL
instance with deploy/dagster.yaml's settings, Dagster's default run launcher among them; run
scripts/ensure_servers.sh first; artifacts, LanceDB and MLflow in a local data dir, as the CLI's) and the CLI on the same machine, alternating, each into a fresh data dir and instance:
1. the example grid sweep: on the deployment its job `<sweep>__sweep` launched through GraphQL (the UI's
   Launchpad: its stages to the leaderboard in one run, rag_assets/sweep_chain.py; `--backfill`: a backfill
   of its stages and leaderboard instead, the UI's "Materialize all", a run per stage), then nothing but the
   daemon: the holdout driver, the confirmation and the champion follow; timed from the launch to the
   champion's registration. The CLI: `rag-sweep run`.
2. the example as a halving search (`search: {strategy: halving, start_questions: 25}`): on the
   deployment the search job launched through GraphQL, timed to the champion; the CLI: `rag-sweep run`.
Prints each wall time, the Dagster runs each made, and the ratio deployment / CLI (goals: <= 1.5 for the
grid, <= 2 for the search; issue 73: <= 2 for both on Dagster's default launcher and stock daemon). `--cpu`: the CPU seconds each side spent, the deployment's by process (the
webserver, the daemon, the code servers that evaluate its sensors, the run workers, PostgreSQL), sampled
from /proc every half second: where the cores went that the stages' work did not get; and the whole
machine's busy CPU seconds and processes started, which a sampler misses when they are short-lived.
`--timeline`: each run's wait and run time; `--steps`: with each run, the seconds to its first step and
each step's.
`--idle S`: then the deployment with nothing to do for S seconds (its sensors and daemon loops alone): the
machine's busy CPU seconds and processes started (a PostgreSQL backend per new connection).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
for name in ("DAGSTER_HOME", "MLFLOW_TRACKING_URI", "RAG_EXECUTOR"):  # the embedded defaults for both
    os.environ.pop(name, None)

import dagster as dg  # noqa: E402

from tests.servers import Postgres, deployment, stop_all  # noqa: E402

EXAMPLE = ROOT / "examples" / "sweeps" / "example.yaml"
PY = ROOT / ".venv" / "bin" / "python"


def sweep_file(folder: Path, halving: bool) -> Path:
    """The example with absolute data paths (and, for the search, a halving strategy and its own name)."""
    spec = yaml.safe_load(EXAMPLE.read_text())
    spec["data"] = {k: str((EXAMPLE.parent / v).resolve()) for k, v in spec["data"].items()}
    if halving:
        spec["name"] = "hotpotqa-halving"
        spec["search"] = {"strategy": "halving", "start_questions": 25, "growth": 2}
    path = folder / f"{spec['name']}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


TICK = os.sysconf("SC_CLK_TCK")


def _role(cmdline: str) -> str | None:
    """Which part of a deployment a process is, from its command line (None: not the deployment's)."""
    for marker, role in (
        # a code server starts each run's worker with multiprocessing's spawn (dagster/_grpc/server.py)
        ("spawn_main", "run workers"),
        ("execute_run", "run workers"),
        ("api grpc", "code servers (sensors, schedules)"),
        ("dagster-webserver", "webserver"),
        ("daemon", "daemon"),
        ("postgres", "PostgreSQL"),
    ):
        if marker in cmdline:
            return role
    return None


class CpuByRole:
    """CPU seconds of the processes of the sessions `sessions` (the webserver's and the daemon's, with
    their code servers and run workers) and of PostgreSQL, by role: each process's latest user + system
    time, sampled from /proc every `every` seconds while the block runs (a process that ends between two
    samples loses at most its last interval)."""

    def __init__(self, sessions: set[int], every: float = 0.5):
        self.sessions, self.every = sessions, every
        self.seen: dict[int, tuple[str, float, float]] = {}  # pid -> role, CPU now, CPU when first seen
        self._first = True
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _sample(self) -> None:
        procs = {}  # pid -> session, CPU seconds, command line
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                stat = Path(entry.path, "stat").read_text()
                cmdline = Path(entry.path, "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            procs[int(entry.name)] = (
                int(fields[3]),
                (int(fields[11]) + int(fields[12])) / TICK,
                cmdline,
            )
        for pid, (session, cpu, cmdline) in procs.items():
            role = _role(cmdline)
            # PostgreSQL is shared with the CLI's side (idle then)
            if role and (session in self.sessions or role in ("PostgreSQL", "run workers")):
                # a process started since the first sample counts from its start
                start = self.seen.get(pid, (role, cpu, cpu if self._first else 0.0))[2]
                self.seen[pid] = (role, cpu, start)
        self._first = False

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            self._sample()

    def __enter__(self):
        self.machine = machine_counters()
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self._sample()
        self.machine = machine_since(self.machine)

    def totals(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for role, cpu, start in self.seen.values():
            # a process seen at the first sample counts from there (PostgreSQL's start is not this run's)
            out[role] = out.get(role, 0.0) + cpu - start
        return out


def machine_counters() -> tuple[float, int]:
    """The whole machine's busy CPU seconds and processes started since boot (/proc/stat): what a sampler of
    processes misses, such as a PostgreSQL backend per short connection."""
    busy, started = 0.0, 0
    for line in Path("/proc/stat").read_text().splitlines():
        parts = line.split()
        if parts[0] == "cpu":  # user nice system idle iowait irq softirq steal: all but idle and iowait
            busy = (sum(map(int, parts[1:4])) + sum(map(int, parts[6:9]))) / TICK
        elif parts[0] == "processes":
            started = int(parts[1])
    return busy, started


def machine_since(before: tuple[float, int]) -> tuple[float, int]:
    """The machine's busy CPU seconds and processes started since `before` (machine_counters)."""
    busy, started = machine_counters()
    return busy - before[0], started - before[1]


def show_machine(where: str, counters: tuple[float, int]) -> None:
    print(f"    machine during {where}: {counters[0]:.0f} CPU-s busy, {counters[1]} processes started")


def show_cpu(where: str, wall: float, totals: dict[str, float]) -> None:
    total = sum(totals.values())
    parts = ", ".join(f"{role} {cpu:.0f}" for role, cpu in sorted(totals.items(), key=lambda x: -x[1]))
    print(
        f"    cpu {where}: {total:.0f} CPU-s in {wall:.0f} s ({total / wall:.2f} cores)"
        + (f": {parts}" if parts else "")
    )


def cli(
    spec: Path, data: Path, show: bool = False, cpu: bool = False, steps: bool = False
) -> tuple[float, int]:
    t0, epoch = time.perf_counter(), time.time()
    used, machine = resource.getrusage(resource.RUSAGE_CHILDREN), machine_counters()
    out = subprocess.run(
        [str(PY), "-m", "rag_sweep.cli", "run", str(spec), "--data-dir", str(data)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    wall = time.perf_counter() - t0
    if out.returncode:
        raise SystemExit(f"rag-sweep run failed:\n{out.stderr[-3000:]}")
    if cpu:
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        spent = after.ru_utime + after.ru_stime - used.ru_utime - used.ru_stime
        show_cpu("cli", wall, {"rag-sweep run": spent})
        show_machine("the cli", machine_since(machine))
    with dg.DagsterInstance.from_config(str(data / "dagster_home")) as instance:
        if show:
            timeline(instance, epoch, steps)
        return wall, instance.get_runs_count()


def champion_after(instance, prefix: str, t0: float) -> bool:
    records = instance.fetch_materializations(dg.AssetKey([prefix, "champion_model"]), limit=1).records
    return bool(records) and records[0].timestamp > t0


def on_deployment(
    spec: Path,
    work: Path,
    pg: Postgres,
    halving: bool,
    timeout: float = 1800,
    show: bool = False,
    cpu: bool = False,
    steps: bool = False,
    instance_yaml: str = "",
    idle: float = 0.0,
    backfill: bool = False,
) -> tuple[float, int]:
    plan = yaml.safe_load(spec.read_text())
    prefix = plan["name"].replace("-", "_")
    with deployment(work, spec, work / "data", pg, instance_yaml=instance_yaml) as d:
        instance = d.instance()
        # sampled only when asked: the sampler's own reads would otherwise weigh on the timing
        sampler = CpuByRole({d.webserver.pid, d.daemon.pid}) if cpu else contextlib.nullcontext()
        with sampler:
            t0 = time.time()
            if halving:
                d.launch_run(f"{prefix}__search")
            elif backfill:
                from rag_core.planning.stages import STAGES

                d.launch_backfill([[prefix, s.name] for s in STAGES if s.name != "confirmation"], "benchmark")
            else:
                d.launch_run(f"{prefix}__sweep")
            while not champion_after(instance, prefix, t0):
                if time.time() - t0 > timeout:
                    raise SystemExit(f"no champion after {timeout:.0f} s\n{d.log('daemon')}")
                time.sleep(1)
            wall = time.time() - t0
        if show:
            timeline(instance, t0, steps)
        if cpu:
            show_cpu("deployment", wall, sampler.totals())
            show_machine("the deployment", sampler.machine)
        if idle:  # the deployment with nothing to do: its sensors and daemon loops alone
            time.sleep(10)  # the champion's run ends
            before = machine_counters()
            time.sleep(idle)
            busy, started = machine_since(before)
            print(
                f"    machine while the deployment idles {idle:.0f} s after the champion: {busy:.1f} CPU-s busy, "
                f"{started} processes started ({started / idle:.1f} a second)"
            )
        return wall, instance.get_runs_count()


def timeline(instance, t0: float, steps: bool = False) -> None:
    """Where a deployment's wall time goes: each run's queueing (created to started) and its run (started to
    ended), in seconds after the launch, and the gaps between one run's end and the next one's creation."""
    records = sorted(instance.get_run_records(), key=lambda r: r.create_timestamp.timestamp())
    last_end = 0.0
    for r in records:
        created = r.create_timestamp.timestamp() - t0
        start = (r.start_time or 0) - t0 if r.start_time else float("nan")
        end = (r.end_time or 0) - t0 if r.end_time else float("nan")
        name = r.dagster_run.tags.get("dagster/asset_partition_range_start", "") or r.dagster_run.job_name
        print(
            f"    {created:6.1f} created (+{created - last_end:5.1f} after the last end) "
            f"{start - created:5.1f} queued {end - start:6.1f} ran  {r.dagster_run.job_name[:40]} {name[:30]}"
        )
        last_end = max(last_end, end)
        if steps:
            print("      " + step_times(instance, r.dagster_run.run_id, r.start_time))


def step_times(instance, run_id: str, started: float | None) -> str:
    """A run's steps: the seconds from its start to its first step (the run worker loading the code), then
    each step's (start to success or failure), in order."""
    kinds = {
        dg.DagsterEventType.STEP_START,
        dg.DagsterEventType.STEP_SUCCESS,
        dg.DagsterEventType.STEP_FAILURE,
    }
    begun, parts, first = {}, [], None
    for e in instance.all_logs(run_id, of_type=kinds):
        key = e.step_key or "?"
        if e.dagster_event.event_type == dg.DagsterEventType.STEP_START:
            begun[key] = e.timestamp
            first = e.timestamp if first is None else first
        elif key in begun:
            parts.append(f"{key.rsplit('__', 1)[-1]} {e.timestamp - begun.pop(key):.1f}")
    lead = f"to the first step {first - started:.1f}; " if first and started else ""
    return lead + ", ".join(parts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--skip-halving", action="store_true")
    ap.add_argument("--skip-grid", action="store_true")
    ap.add_argument("--timeline", action="store_true", help="print each run's queueing and run time")
    ap.add_argument("--steps", action="store_true", help="with --timeline: each run's steps, timed")
    ap.add_argument("--cpu", action="store_true", help="print the CPU each side spent, by process")
    ap.add_argument(
        "--idle", type=float, default=0.0, help="then the deployment idle this many seconds: its churn alone"
    )
    ap.add_argument(
        "--backfill",
        action="store_true",
        help='the grid launched as the UI\'s "Materialize all" (a backfill: a run per stage), not its job',
    )
    args = ap.parse_args()
    sides = ["cli", "deployment"]
    pg = Postgres.start()
    results: dict[str, list[tuple[float, int]]] = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            kinds = ([] if args.skip_grid else ["grid"]) + ([] if args.skip_halving else ["halving"])
            for kind in kinds:
                spec = sweep_file(tmp, kind == "halving")
                for i in range(args.repeats):
                    order = sides if i % 2 == 0 else sides[::-1]
                    for where in order:
                        work = tmp / f"{kind}-{where}-{i}"
                        work.mkdir()
                        if where == "cli":
                            got = cli(spec, work / "data", args.timeline, args.cpu, args.steps)
                        else:
                            got = on_deployment(
                                spec,
                                work,
                                pg,
                                kind == "halving",
                                show=args.timeline,
                                cpu=args.cpu,
                                steps=args.steps,
                                idle=args.idle,
                                backfill=args.backfill,
                            )
                        results.setdefault(f"{kind}/{where}", []).append(got)
                        print(
                            f"  {kind:8} {where:10} repeat {i + 1}: {got[0]:.0f} s, {got[1]} Dagster runs",
                            flush=True,
                        )
    finally:
        pg.stop()
        stop_all()
    for kind, goal in (("grid", 1.5), ("halving", 2.0)):
        if f"{kind}/cli" not in results:
            continue
        c = statistics.median(w for w, _ in results[f"{kind}/cli"])
        d = statistics.median(w for w, _ in results[f"{kind}/deployment"])
        print(
            f"{kind}: CLI {c:.0f} s, deployment (from the UI to the champion) {d:.0f} s: x{d / c:.2f} (goal <= {goal})"
        )


if __name__ == "__main__":
    sys.exit(main())
