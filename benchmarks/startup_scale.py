"""Benchmark: how long `rag-sweep run` takes to start a grid of N configs, before its first step.

    .venv/bin/python benchmarks/startup_scale.py [--sizes 100,1000,10000] [--repeats 3]

For each size, a grid on the example data (recursive chunk sizes x top_k x hybrid alpha) starts in a fresh
data dir: load and resolve the sweep, build its Dagster definitions, snapshot the inputs, then decide which
partitions are complete. That last part is timed twice on the same instance, alternating: asking the
event log partition by partition (the baseline, as `rag-sweep run` did) and in one query per stage
(`resources.artifacts.latest_fingerprints`). The script prints the start-up time, both decisions and
their ratio; the per-config time shows whether start-up grows linearly.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("DAGSTER_DISABLE_TELEMETRY", "1")

import rag_sweep.runner.sweep as cli  # noqa: E402 (run_sweep and the `steps` it calls)
from rag_sweep.runner import asset_key  # noqa: E402
from resources.artifacts import ArtifactRef, latest_fingerprint  # noqa: E402

DATA = ROOT / "examples" / "data" / "hotpotqa_distractor_100"


def sweep_file(folder: Path, n: int) -> Path:
    """n configs (a multiple of 100): 10 chunk sizes x 10 top_k x n/100 hybrid alphas."""
    spec = {
        "name": f"startup{n}",
        "data": {"corpus": str(DATA / "corpus.parquet"), "qa": str(DATA / "queries.parquet")},
        "chunking": {
            "method": "recursive",
            "chunk_size": [200 + 10 * i for i in range(10)],
            "chunk_overlap": 0,
        },
        "retrieval": {
            "mode": "hybrid",
            "top_k": list(range(1, 11)),
            "hybrid_alpha": [round(i / (n // 100), 4) for i in range(n // 100)],
        },
    }
    path = folder / f"startup{n}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def per_partition_steps(plan, instance, data: Path) -> list:
    """The baseline: the latest materialization of every partition asked for one by one."""
    inputs = {s: latest_fingerprint(instance, asset_key(plan, s), None) for s in ("corpus", "qa_set")}
    expected = plan.fingerprints(inputs)
    todo = []
    for stage, keys in plan.partitions.items():
        for key in keys:
            ref = ArtifactRef(data, stage, expected[(stage, key)], key)
            if latest_fingerprint(instance, asset_key(plan, stage), key) != ref.fp or not ref.intact():
                todo.append((stage, key))
    return todo


class Started(Exception):
    pass


def start(spec: Path, data: Path) -> tuple[float, tuple]:
    """Seconds from calling run_sweep to its list of steps, and what the steps were decided on."""
    seen = {}
    original = cli.steps

    def stop_at_steps(plan, instance, data_dir, force, *rest):
        seen["args"] = (plan, instance, data_dir)
        seen["steps"] = original(plan, instance, data_dir, force, *rest)
        raise Started

    cli.steps = stop_at_steps
    t0 = time.perf_counter()
    try:
        cli.run_sweep(str(spec), str(data), progress=False)
    except Started:
        pass
    finally:
        cli.steps = original
    return time.perf_counter() - t0, seen["args"]


def timed(fn, *args) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - t0, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(
        f"{'configs':>8} {'start-up s':>11} {'per config ms':>14} {'baseline s':>11} {'one query s':>12} {'ratio':>7}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for n in map(int, args.sizes.split(",")):
            spec = sweep_file(Path(tmp), n)
            startup, (plan, instance, data) = start(spec, Path(tmp) / f"data{n}")
            base, new = [], []
            for _ in range(args.repeats):  # alternate: the machine's drift hits both alike
                t, old_steps = timed(per_partition_steps, plan, instance, data)
                base.append(t)
                t, new_steps = timed(cli.steps, plan, instance, data, False)
                new.append(t)
            assert {s for s in old_steps if s[0] != "vector_index"} <= set(new_steps)  # the same decision
            b, o = statistics.median(base), statistics.median(new)
            print(f"{n:8d} {startup:11.1f} {1000 * startup / n:14.2f} {b:11.2f} {o:12.3f} {b / o:6.0f}x")


if __name__ == "__main__":
    main()
