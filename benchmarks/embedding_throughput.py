"""Benchmark: embedding throughput of the pipeline's embedder against the raw model on the same texts.

    .venv/bin/python benchmarks/embedding_throughput.py [--texts 600] [--repeats 3]

The texts are the example sweep's unique chunk texts (both of its chunkings, chunked by `rag_core`), a
seeded sample of `--texts`. Alternating, `--repeats` times: the raw sentence-transformers model (`encode`
over all texts at once, the pipeline's batch size: it sorts by length itself) and `EmbeddingService.embed`
into an empty cache (what a cold run does: hashing, cache lookups, checkpointed parts on disk) with each
backend (torch, and ONNX Runtime: resources/local_encoders.py). Prints texts per second of each, the
pipeline's ratio to the raw model (goal >= 0.9) and how close the ONNX vectors are to torch's; then the
batch sizes on the raw model and what int8 dynamic quantization would give (its speed and its cosine to the
fp32 vectors: a faster path is only worth taking at cosine >= 0.99).
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

from rag_core.chunking.chunkers import chunk_corpus  # noqa: E402
from rag_core.common.local_models import weights_path  # noqa: E402
from rag_core.data.datasets import load_corpus  # noqa: E402
from resources.embedders import EmbeddingService  # noqa: E402
from resources.local_encoders import local_encoder  # noqa: E402

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
    model = model or local_encoder(MODEL, "torch").model
    t0 = time.perf_counter()
    vectors = model.encode(texts, batch_size=batch_size, normalize_embeddings=True)
    return time.perf_counter() - t0, vectors


def pipeline(texts: list[str], backend: str) -> tuple[float, np.ndarray]:
    with tempfile.TemporaryDirectory() as cache:
        t0 = time.perf_counter()
        vectors, _ = EmbeddingService(cache_dir=cache, backend=backend).embed(MODEL, texts)
        return time.perf_counter() - t0, vectors


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--texts", type=int, default=600)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    texts = example_texts(args.texts)
    raw(texts[:32])  # load the model and warm up before timing
    pipeline(texts[:32], "onnx")  # the ONNX export: built and checked on first use on this machine
    print(
        f"{len(texts)} unique chunk texts of the example, {MODEL}, batch {BATCH}, {args.repeats} alternating repeats"
    )
    times: dict[str, list[float]] = {"raw model": [], "pipeline torch": [], "pipeline onnx": []}
    for _ in range(args.repeats):
        t, reference = raw(texts)
        times["raw model"].append(t)
        times["pipeline torch"].append(pipeline(texts, "torch")[0])
        t, vectors = pipeline(texts, "onnx")
        times["pipeline onnx"].append(t)
    rate = {k: len(texts) / statistics.median(v) for k, v in times.items()}
    for k, v in times.items():
        print(f"  {k:14s} {rate[k]:6.1f} texts/s  (runs: {', '.join(f'{t:.1f}s' for t in v)})")
    for backend in ("torch", "onnx"):
        ratio = rate[f"pipeline {backend}"] / rate["raw model"]
        print(f"  pipeline ({backend}) / raw model throughput: x{ratio:.2f}  (goal >= 0.9)")
    cos = (reference * vectors).sum(axis=1)
    print(
        f"  onnx vectors: cosine to the raw model's min {cos.min():.7f}, largest difference {np.abs(reference - vectors).max():.1e}"
    )

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
