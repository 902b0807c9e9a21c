"""Benchmark: embedding throughput of the pipeline's embedder against the raw model on the same texts.

    .venv/bin/python benchmarks/embedding_throughput.py [--texts 600] [--repeats 3]

The texts are the example sweep's unique chunk texts (both of its chunkings, chunked by `rag_core`), a seeded
sample of `--texts`. Alternating, `--repeats` times: the raw sentence-transformers model (`encode` over all
texts at once, the pipeline's batch size: it sorts by length itself) and `EmbeddingService.embed` into an empty cache (what a
cold run does: hashing, cache lookups, checkpointed parts on disk). Prints texts per second of both and their
ratio (goal >= 0.9), then the batch sizes on the raw model and what int8 dynamic quantization would give
(its speed and its cosine to the fp32 vectors: a faster path is only worth taking at cosine >= 0.99).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from rag_core.chunking import chunk_corpus  # noqa: E402
from rag_core.datasets import load_corpus  # noqa: E402
from rag_core.local_models import weights_path  # noqa: E402
from resources.embedders import EmbeddingService, _local_model  # noqa: E402

MODEL = "all-MiniLM-L6-v2"
CORPUS = ROOT / "examples" / "data" / "hotpotqa_distractor_100" / "corpus.parquet"


def example_texts(n: int) -> list[str]:
    corpus = load_corpus(CORPUS)
    texts: list[str] = []
    for method, size, overlap in (("paragraph", 1024, 0), ("recursive", 384, 48)):
        texts += chunk_corpus(corpus, method, size, overlap)["index_text"].to_list()
    unique = list(dict.fromkeys(texts))
    pick = np.random.default_rng(0).choice(len(unique), min(n, len(unique)), replace=False)
    return [unique[i] for i in sorted(pick)]


BATCH = EmbeddingService.model_fields["batch_size"].default  # the pipeline's batch size


def raw(texts: list[str], batch_size: int = BATCH, model=None) -> tuple[float, np.ndarray]:
    model = model or _local_model(MODEL)
    t0 = time.perf_counter()
    vectors = model.encode(texts, batch_size=batch_size, normalize_embeddings=True)
    return time.perf_counter() - t0, vectors


def pipeline(texts: list[str]) -> float:
    with tempfile.TemporaryDirectory() as cache:
        t0 = time.perf_counter()
        EmbeddingService(cache_dir=cache).embed(MODEL, texts)
        return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--texts", type=int, default=600)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    texts = example_texts(args.texts)
    raw(texts[:32])  # load the model and warm up before timing
    print(
        f"{len(texts)} unique chunk texts of the example, {MODEL}, batch {BATCH}, {args.repeats} alternating repeats"
    )
    times: dict[str, list[float]] = {"raw model": [], "pipeline": []}
    for _ in range(args.repeats):
        times["raw model"].append(raw(texts)[0])
        times["pipeline"].append(pipeline(texts))
    rate = {k: len(texts) / statistics.median(v) for k, v in times.items()}
    for k, v in times.items():
        print(f"  {k:10s} {rate[k]:6.1f} texts/s  (runs: {', '.join(f'{t:.1f}s' for t in v)})")
    print(f"  pipeline / raw model throughput: x{rate['pipeline'] / rate['raw model']:.2f}  (goal >= 0.9)")

    print("batch size on the raw model (median of the repeats):")
    base = None
    for bs in (4, 8, 16, 32, 64):
        t = statistics.median(raw(texts, bs)[0] for _ in range(args.repeats))
        base = base or t
        print(f"  batch {bs:3d}: {len(texts) / t:6.1f} texts/s  (x{base / t:.2f} of batch 4)")

    import torch
    from sentence_transformers import SentenceTransformer

    quantized = torch.ao.quantization.quantize_dynamic(
        SentenceTransformer(weights_path(MODEL), device="cpu"), {torch.nn.Linear}, dtype=torch.qint8
    )
    t32, v32 = raw(texts)
    t8, v8 = raw(texts, model=quantized)
    cos = (v32 * v8).sum(axis=1)
    verdict = "usable" if cos.min() >= 0.99 else "refused: below cosine 0.99 of fp32"
    print(
        f"int8 dynamic quantization: x{t32 / t8:.2f} the fp32 speed, cosine to fp32 min {cos.min():.3f} "
        f"mean {cos.mean():.3f} ({verdict})"
    )


if __name__ == "__main__":
    main()
