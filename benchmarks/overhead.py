"""Benchmark: how much of a cold `rag-sweep run` is the embedding model, and how much everything else.

    .venv/bin/python benchmarks/overhead.py [--repeats 3]

Alternating, `--repeats` times: (a) the example sweep cold, as a user starts it (`.venv/bin/rag-sweep run`
into a fresh data dir), its CPU seconds (user + system, every thread); (b) the raw model on the same work:
a new process that chunks the example corpus the sweep's two ways (`rag_core.chunking`) and encodes the
unique chunk texts with sentence-transformers (batch 16), its CPU seconds of `encode` alone. Prints both
and the share of the run's CPU spent outside the model (goal <= 15%).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = ROOT / ".venv" / "bin" / "python"
EXAMPLE = ROOT / "examples" / "sweeps" / "example.yaml"

MODEL_ONLY = """
import sys, time
sys.path.insert(0, {root!r})
from rag_core.chunking import chunk_corpus
from rag_core.datasets import load_corpus
from resources.embedders import _local_model
corpus = load_corpus({corpus!r})
texts = []
for method, size, overlap in (("paragraph", 1024, 0), ("recursive", 384, 48)):
    texts += chunk_corpus(corpus, method, size, overlap)["index_text"].to_list()
texts = list(dict.fromkeys(texts))
model = _local_model("all-MiniLM-L6-v2")
t0 = time.process_time()
model.encode(texts, batch_size=16, normalize_embeddings=True)
print(len(texts), time.process_time() - t0)
"""


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def sweep_cpu(data: Path) -> float:
    before = children_cpu()
    cmd = [str(ROOT / ".venv" / "bin" / "rag-sweep"), "run", str(EXAMPLE), "--data-dir", str(data)]
    subprocess.run(cmd, check=True, capture_output=True)
    return children_cpu() - before


def model_cpu() -> tuple[int, float]:
    corpus = ROOT / "examples" / "data" / "hotpotqa_distractor_100" / "corpus.parquet"
    code = MODEL_ONLY.format(root=str(ROOT), corpus=str(corpus))
    out = subprocess.run([str(PY), "-c", code], check=True, capture_output=True, text=True, env=os.environ)
    n, seconds = out.stdout.split()[-2:]
    return int(n), float(seconds)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    runs, models = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeats):
            runs.append(sweep_cpu(Path(tmp) / f"run{i}"))
            n, seconds = model_cpu()
            models.append(seconds)
    run, model = statistics.median(runs), statistics.median(models)
    print(f"cold example sweep: {run:.0f} CPU-s (runs: {', '.join(f'{r:.0f}' for r in runs)})")
    print(
        f"the raw model on its {n} unique chunk texts: {model:.0f} CPU-s (runs: {', '.join(f'{m:.0f}' for m in models)})"
    )
    print(f"CPU outside the embedding model: {1 - model / run:.0%} of the run (goal <= 15%)")


if __name__ == "__main__":
    sys.exit(main())
