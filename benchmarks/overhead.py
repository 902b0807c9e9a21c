"""Benchmark: how much of a cold `rag-sweep run` is the embedding model, and what its reuse saves.

    .venv/bin/python benchmarks/overhead.py [--repeats 3] [--naive-repeats 1]

Alternating, `--repeats` times: (a) the example sweep cold, through the runner (what
`.venv/bin/rag-sweep run` calls) in a new process, into a fresh data dir, its CPU seconds (user + system,
every thread); (b) the raw model on the same work: a new process that chunks the example corpus the
sweep's two ways (`rag_core.chunking.chunkers`) and encodes the unique chunk texts, longest first in batches of 16,
with the backend the run uses ($RAG_EMBEDDING_BACKEND: onnx by default, or torch), its CPU seconds of
`encode` alone. The run also times its own model calls (every text it embeds,
questions and the metrics' sentences too): the second, finer figure of CPU outside the model. And, the
first `--naive-repeats` times, (c) the naive loop (`benchmarks/naive_loop.py`: every config built from scratch
through the same `rag_core` functions, nothing shared), its CPU seconds and wall time. Prints the share of
the run's CPU spent outside the model (goal <= 15%) and, of it, what the stack costs before any work of
the run's own: the modules the run loaded, imported alone in a new process, the default store's searches
and MLflow's calls (timed in the run), against what 15% allows beside the model's CPU; the naive loop's
CPU ÷ the sweep's (goal >= 0.8 × configs ÷ unique indexes), and checks that the loop scored every config
as the sweep did (equal work).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
PY = ROOT / ".venv" / "bin" / "python"
EXAMPLE = ROOT / "examples" / "sweeps" / "example.yaml"

MODEL_ONLY = """
import os, sys, time
sys.path.insert(0, {root!r})
from rag_core.chunking.chunkers import chunk_corpus
from rag_core.data.datasets import load_corpus
from resources.local_encoders import local_encoder
corpus = load_corpus({corpus!r})
texts = []
for method, size, overlap in (("paragraph", 1024, 0), ("recursive", 384, 48)):
    texts += chunk_corpus(corpus, method, size, overlap)["index_text"].to_list()
texts = list(dict.fromkeys(texts))
model = local_encoder("all-MiniLM-L6-v2", os.environ.get("RAG_EMBEDDING_BACKEND") or "onnx", texts)
texts.sort(key=len, reverse=True)  # as the embedder batches them
t0 = time.process_time()
for i in range(0, len(texts), 16):
    model.encode(texts[i : i + 16])
print(len(texts), time.process_time() - t0)
"""


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


# The CLI's own entry point in a new process, with every model call timed inside it (benchmarks/model_timer.py:
# the tree's own EmbeddingService patched): the model's CPU over every text the run embeds (chunks,
# questions, the answers' sentences for the metrics), same batches.
INSTRUMENTED_RUN = """
import json, resource, sys
sys.path[:0] = [{root!r}, {benchmarks!r}]
from model_timer import searched, spent, tracked
from rag_sweep.runner import run_sweep
run_sweep({spec!r}, {data!r}, progress=False)
r = resource.getrusage(resource.RUSAGE_SELF)
modules = [name for name in sys.modules if name not in ("__main__", "model_timer")]
timed = {{**spent, "searched": searched, "tracked": tracked, "modules": modules}}
print(json.dumps({{"total": r.ru_utime + r.ru_stime, **timed}}))
try:  # the exit `rag-sweep` makes (a tree before it: the interpreter's own)
    from rag_sweep.cli import exit_now
except ImportError:
    sys.exit(0)
exit_now(0)
"""


# What the run's imports cost alone: a new process imports every module the run had loaded when it ended,
# in the order it loaded them (a module that will not import on its own is skipped)
IMPORTS_ONLY = """
import importlib, json, sys, time
sys.path[:0] = [{root!r}, {benchmarks!r}]
names = json.loads(sys.stdin.read())
t0 = time.process_time()
for name in names:
    try:
        importlib.import_module(name)
    except Exception:
        pass
print(time.process_time() - t0)
"""


def sweep_cpu(data: Path) -> dict:
    """What the instrumented run printed (benchmarks/model_timer.py's figures: the model's "cpu" over its
    "texts", the store's "searched", MLflow's "tracked"; the "modules" it loaded), its "total" replaced by
    the CPU seconds of its process and the processes it waited for."""
    before = children_cpu()
    code = INSTRUMENTED_RUN.format(
        root=str(ROOT), benchmarks=str(BENCHMARKS), spec=str(EXAMPLE), data=str(data)
    )
    out = subprocess.run([str(PY), "-c", code], check=True, capture_output=True, text=True)
    return {**json.loads(out.stdout.strip().splitlines()[-1]), "total": children_cpu() - before}


def imports_cpu(modules: list[str]) -> float:
    """CPU seconds a new process takes to import `modules` in order: what any run loading them pays."""
    code = IMPORTS_ONLY.format(root=str(ROOT), benchmarks=str(BENCHMARKS))
    out = subprocess.run(
        [str(PY), "-c", code], input=json.dumps(modules), check=True, capture_output=True, text=True
    )
    return float(out.stdout.split()[-1])


def model_cpu() -> tuple[int, float]:
    corpus = ROOT / "examples" / "data" / "hotpotqa_distractor_100" / "corpus.parquet"
    code = MODEL_ONLY.format(root=str(ROOT), corpus=str(corpus))
    out = subprocess.run([str(PY), "-c", code], check=True, capture_output=True, text=True, env=os.environ)
    n, seconds = out.stdout.split()[-2:]
    return int(n), float(seconds)


def naive_cpu(work: Path) -> tuple[float, float, dict]:
    """CPU and wall seconds of the naive loop over the example's configs, and the scores it gave."""
    before, t0 = children_cpu(), time.perf_counter()
    out = work / "scores.json"
    cmd = [str(PY), str(ROOT / "benchmarks" / "naive_loop.py"), str(EXAMPLE), "--work", str(work)]
    subprocess.run([*cmd, "--out", str(out)], check=True, capture_output=True)
    return children_cpu() - before, time.perf_counter() - t0, json.loads(out.read_text())


def same_scores(naive: dict, board: Path) -> float:
    """The largest difference between a metric mean of the naive loop and the sweep's, over every config."""
    import polars as pl

    rows = {r["config_key"]: r for r in pl.read_parquet(board).iter_rows(named=True)}
    if set(rows) != set(naive):
        raise SystemExit(f"the naive loop scored {sorted(naive)}, the sweep {sorted(rows)}")
    return max(
        abs((v or 0.0) - (rows[key][m] or 0.0)) for key, scores in naive.items() for m, v in scores.items()
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--naive-repeats", type=int, default=1, help="the naive loop takes ~4x a cold run")
    args = ap.parse_args()
    from rag_core.planning.plan import Plan
    from rag_core.planning.spec import load_sweep

    plan = Plan.resolve(load_sweep(str(EXAMPLE)))
    colds, walls, models, naives, naive_walls = [], [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeats):
            t0 = time.perf_counter()
            cold = sweep_cpu(Path(tmp) / f"run{i}")
            walls.append(time.perf_counter() - t0)
            # what no work of the run's own can remove: its imports (the store's searches and MLflow's
            # calls are timed in it)
            colds.append({**cold, "imports": imports_cpu(cold["modules"])})
            n, seconds = model_cpu()
            models.append(seconds)
            if i < args.naive_repeats:
                cpu, wall, scores = naive_cpu(Path(tmp) / f"naive{i}")
                naives.append(cpu)
                naive_walls.append(wall)
                diff = same_scores(scores, Path(tmp) / "run0" / "leaderboards" / f"{plan.sweep.name}.parquet")
    runs = [c["total"] for c in colds]
    outside = [1 - c["cpu"] / c["total"] for c in colds]
    run, model = statistics.median(runs), statistics.median(models)
    print(
        f"cold example sweep: {run:.0f} CPU-s (runs: {', '.join(f'{r:.0f}' for r in runs)}), "
        f"{statistics.median(walls):.0f} s wall"
    )
    print(
        f"the raw model on its {n} unique chunk texts: {model:.0f} CPU-s "
        f"(runs: {', '.join(f'{m:.0f}' for m in models)})"
    )
    print(f"CPU outside the embedding model: {1 - model / run:.0%} of the run (goal <= 15%)")
    print(
        f"the same, the model's CPU timed inside the run ({cold['texts']} texts: chunks, questions, the "
        f"metrics' sentences): {statistics.median(outside):.0%} outside it "
        f"(runs: {', '.join(f'{x:.0%}' for x in outside)})"
    )

    def median(figure) -> float:
        return statistics.median(figure(c) for c in colds)

    imports, in_model = median(lambda c: c["imports"]), median(lambda c: c["cpu"])
    searches, tracking = median(lambda c: c["searched"]["cpu"]), median(lambda c: c["tracked"]["cpu"])
    n_searches = cold["searched"]["searches"]
    each_import = ", ".join(f"{c['imports']:.1f}" for c in colds)
    print(
        f"of it, what the stack costs before any work of the run's own: the {len(cold['modules'])} modules "
        f"the run loaded, imported alone in a new process, {imports:.1f} CPU-s "
        f"(runs: {each_import}); the store's {n_searches} searches "
        f"{searches:.1f} CPU-s ({1000 * searches / n_searches:.1f} ms each); MLflow's "
        f"{cold['tracked']['calls']} calls {tracking:.1f} CPU-s; together "
        f"{imports + searches + tracking:.1f} CPU-s, where 15% of a run with this model's {in_model:.0f} CPU-s allows "
        f"{0.15 / 0.85 * in_model:.1f} outside it"
    )
    if naives:
        indexes = len(plan.keys("vector_index"))
        goal = 0.8 * len(plan.configs) / indexes
        naive = statistics.median(naives)
        print(
            f"naive loop ({len(plan.configs)} configs, each built from scratch): {naive:.0f} CPU-s "
            f"(runs: {', '.join(f'{r:.0f}' for r in naives)}), {statistics.median(naive_walls):.0f} s wall; "
            f"same scores as the sweep (largest difference {diff:.1e})"
        )
        print(
            f"the sweep's speed-up over it: x{naive / run:.1f} in CPU, "
            f"x{statistics.median(naive_walls) / statistics.median(walls):.1f} in wall time "
            f"(goal >= 0.8 x {len(plan.configs)} configs / {indexes} indexes = x{goal:.1f})"
        )


if __name__ == "__main__":
    sys.exit(main())
