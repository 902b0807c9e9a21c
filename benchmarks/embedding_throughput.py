"""Benchmark: embedding throughput per device: the product's encoder against the raw model on the same device.

    .venv/bin/python benchmarks/embedding_throughput.py [--texts 600] [--repeats 3] [--devices cpu,cuda]
        [--model all-MiniLM-L6-v2] [--texts-file texts.json] [--no-pipeline] [--no-cpu-extras] [--json F]

The texts are the example sweep's unique chunk texts (both of its chunkings, chunked by `rag_core`), a
seeded sample of `--texts` (or the JSON list in `--texts-file`, for a machine without the project's
dependencies). For each device (default: the CPU, and the first CUDA device when torch sees one),
alternating, `--repeats` times:
- the raw model: `SentenceTransformer(device=...).encode` over all texts, float32, the pipeline's CPU batch
  (it sorts by length itself) — the baseline;
- the product's encoder on that device (`resources.local_encoders.local_encoder`: ONNX Runtime or torch on
  the CPU; on a GPU, torch at the precision that passed the vector check, in the batch measured to fit,
  resources/gpu_encoders.py), called as the pipeline calls it (longest first, its batch size);
- with the project installed (not `--no-pipeline`), `EmbeddingService.embed` into an empty cache on that
  device (hashing, cache lookups, checkpointed Parquet parts on disk: what a cold run does).
Prints texts per second of each, the ratio to the raw model on the same device, the worst cosine of the
encoder's vectors to the CPU's float32 torch vectors, the GPU calibration (precision, batch, each batch's
rate), and a cross-encoder's pairs per second per device (the MiniLM weights under a one-score head: the
architecture of ms-marco-MiniLM-L-6-v2). On the CPU, the batch sizes and what int8 dynamic quantization
would give (a faster path is only worth taking at cosine >= 0.99).
"""

from __future__ import annotations

import argparse
import json
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

from rag_core.common.local_models import weights_path  # noqa: E402
from resources.devices import resolve_device  # noqa: E402
from resources.local_encoders import describe, local_encoder  # noqa: E402

CORPUS = ROOT / "examples" / "data" / "hotpotqa_distractor_100" / "corpus.parquet"
BATCH = 16  # the pipeline's batch on the CPU (EmbeddingService.batch_size)


def example_texts(n: int) -> list[str]:
    from rag_core.chunking.chunkers import chunk_corpus
    from rag_core.data.datasets import load_corpus

    corpus = load_corpus(CORPUS)
    texts: list[str] = []
    for method, size, overlap in (("paragraph", 1024, 0), ("recursive", 384, 48)):
        texts += chunk_corpus(corpus, method, size, overlap)["index_text"].to_list()
    unique = list(dict.fromkeys(texts))
    pick = np.random.default_rng(0).choice(len(unique), min(n, len(unique)), replace=False)
    return [unique[i] for i in sorted(pick)]


def timed(fn) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def product_encode(encoder, texts: list[str]) -> np.ndarray:
    """As EmbeddingService does: longest first, in the encoder's batch (the CPU's 16 when it has none)."""
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]), reverse=True)
    size = encoder.batch_size or BATCH
    parts = [encoder.encode([texts[i] for i in order[s : s + size]]) for s in range(0, len(order), size)]
    out = np.concatenate(parts)
    back = np.empty_like(out)
    back[order] = out
    return back


def pipeline(model: str, texts: list[str], device: str, backend: str) -> float:
    from resources.embedders import EmbeddingService

    with tempfile.TemporaryDirectory() as cache:
        service = EmbeddingService(cache_dir=cache, backend=backend, device=device)
        return timed(lambda: service.embed(model, texts))[0]


def cross_encoder_folder(model: str) -> str:
    """The model's weights under a one-score classification head (the head's weights are random: only speed
    is measured), in a temporary folder."""
    import torch
    from transformers import AutoTokenizer, BertForSequenceClassification

    torch.manual_seed(0)
    folder = tempfile.mkdtemp(prefix="bench-ce-")
    BertForSequenceClassification.from_pretrained(weights_path(model), num_labels=1).save_pretrained(folder)
    AutoTokenizer.from_pretrained(weights_path(model)).save_pretrained(folder)
    return folder


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--texts", type=int, default=600)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--devices", help="comma-separated: cpu, cuda, cuda:N (default: cpu and cuda if any)")
    ap.add_argument("--model", default="all-MiniLM-L6-v2")
    ap.add_argument("--backend", default="onnx", help="the CPU's backend (onnx or torch)")
    ap.add_argument("--texts-file", help="a JSON list of texts instead of the example's chunks")
    ap.add_argument(
        "--copies", type=int, default=1, help="encode the texts this many times over (a GPU's volume)"
    )
    ap.add_argument("--no-pipeline", action="store_true", help="skip EmbeddingService (needs the project)")
    ap.add_argument("--no-cpu-extras", action="store_true", help="skip the CPU's batch sizes and int8")
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args()
    texts = json.loads(Path(args.texts_file).read_text()) if args.texts_file else example_texts(args.texts)
    texts = texts[: args.texts] * args.copies
    model = args.model
    auto = resolve_device("auto")
    settings = args.devices.split(",") if args.devices else ["cpu"] + (["cuda"] if auto.is_cuda else [])
    devices = [resolve_device(s) for s in settings]
    copies = f" ({args.copies} copies of {len(texts) // args.copies})" if args.copies > 1 else ""
    print(f"{len(texts)} chunk texts{copies}, {model}, {args.repeats} alternating repeats; auto: {auto.why}")
    from sentence_transformers import SentenceTransformer

    reference = None
    figures: dict = {"texts": len(texts), "model": model, "devices": {}}
    for device in devices:
        raw_model = SentenceTransformer(weights_path(model), device=device.name)
        raw_model.encode(texts[:32], batch_size=BATCH)  # load and warm up before timing
        t_load, encoder = timed(lambda d=device: local_encoder(model, args.backend, texts, d))
        product_encode(encoder, texts[:32])
        times: dict[str, list[float]] = {"raw model": [], "encoder": []}
        wide = encoder.batch_size if encoder.batch_size and encoder.batch_size != BATCH else None
        if wide:  # the raw model in the encoder's batch, float32: what the precision adds on its own
            times[f"raw, batch {wide}"] = []
        if not args.no_pipeline:
            times["pipeline"] = []
            pipeline(model, texts[:32], device.name, args.backend)
        for _ in range(args.repeats):
            t, raw_vectors = timed(
                lambda m=raw_model: m.encode(texts, batch_size=BATCH, normalize_embeddings=True)
            )
            times["raw model"].append(t)
            t, vectors = timed(lambda e=encoder: product_encode(e, texts))
            times["encoder"].append(t)
            if wide:
                times[f"raw, batch {wide}"].append(
                    timed(
                        lambda m=raw_model, b=wide: m.encode(texts, batch_size=b, normalize_embeddings=True)
                    )[0]
                )
            if "pipeline" in times:
                times["pipeline"].append(pipeline(model, texts, device.name, args.backend))
        if reference is None and not device.is_cuda:  # the CPU's float32 torch vectors: what all must compute
            reference = raw_vectors
        if device.is_cuda:  # the tokenizer's share (it runs on the CPU, before the device sees a text)
            size = encoder.batch_size or BATCH
            times["tokenize only"] = [
                timed(
                    lambda s=size, e=encoder: [
                        e.token_counts(texts[i : i + s]) for i in range(0, len(texts), s)
                    ]
                )[0]
            ]
        rate = {k: len(texts) / statistics.median(v) for k, v in times.items()}
        print(f"{device.label} ({device.why or 'named'}): the encoder is {describe(encoder)}")
        if getattr(encoder, "why", ""):
            print(f"  chosen: {encoder.why} (first use here took {t_load:.1f}s)")
        for k, v in times.items():
            ratio = "" if k == "raw model" else f"  x{rate[k] / rate['raw model']:.2f} of the raw model"
            print(f"  {k:15s} {rate[k]:8.1f} texts/s{ratio}  (runs: {', '.join(f'{t:.2f}s' for t in v)})")
        entry = {"encoder": describe(encoder), "texts_per_second": {k: round(r, 1) for k, r in rate.items()}}
        if reference is not None:
            cos = (reference * vectors).sum(axis=1)
            print(f"  encoder vectors: cosine to the CPU's float32 torch vectors min {cos.min():.7f}")
            entry["min_cosine_to_cpu"] = float(cos.min())
        if device.is_cuda:
            from resources.gpu_encoders import record_path

            record = json.loads(record_path(model, device).read_text())
            print(
                f"  calibration: {json.dumps({k: record[k] for k in ('precision', 'batch_size', 'batches', 'peak_memory_mib')})}"
            )
            print(f"  checks: {json.dumps(record['checks'])}")
            entry["calibration"] = record
        figures["devices"][device.label] = entry
        del raw_model

    print("cross-encoder (MiniLM-L6 weights, one-score head), 20 candidates a question, pairs/s:")
    from rag_core.retrieval.cross_encoders import cross_encoder, cross_scores

    folder = cross_encoder_folder(model)
    questions = texts[:: max(1, len(texts) // 30)][:30]
    cpu_scores = None
    for device in devices:
        ce = cross_encoder(folder, device.name)
        pairs = [[(q[:200], t) for t in texts[i * 20 : i * 20 + 20]] for i, q in enumerate(questions)]
        cross_scores(ce, pairs[0])
        runs = []
        for _ in range(args.repeats):
            t, scores = timed(lambda c=ce, ps=pairs: [cross_scores(c, p) for p in ps])
            runs.append(t)
        rate = sum(map(len, pairs)) / statistics.median(runs)
        flat = np.concatenate(scores)
        same = ""
        if cpu_scores is None:
            cpu_scores = flat
        else:
            same = f"; largest score difference to the CPU's {np.abs(flat - cpu_scores).max():.1e}"
        print(f"  {device.label:28s} {rate:8.1f} pairs/s{same}")
        figures["devices"].setdefault(device.label, {})["cross_encoder_pairs_per_second"] = round(rate, 1)

    if not args.no_cpu_extras and any(not d.is_cuda for d in devices):
        print("batch size of the raw model on the CPU (median of the repeats):")
        raw_model = SentenceTransformer(weights_path(model), device="cpu")
        base = None
        for bs in (4, 8, 16, 32, 64):
            t = statistics.median(
                timed(lambda b=bs: raw_model.encode(texts, batch_size=b))[0] for _ in range(args.repeats)
            )
            base = base or t
            print(f"  batch {bs:3d}: {len(texts) / t:6.1f} texts/s  (x{base / t:.2f} of batch 4)")
        import torch

        quantized = torch.ao.quantization.quantize_dynamic(raw_model, {torch.nn.Linear}, dtype=torch.qint8)
        t32, v32 = timed(lambda: raw_model.encode(texts, batch_size=BATCH, normalize_embeddings=True))
        t8, v8 = timed(lambda: quantized.encode(texts, batch_size=BATCH, normalize_embeddings=True))
        cos = (v32 * v8).sum(axis=1)
        verdict = "usable" if cos.min() >= 0.99 else "refused: below cosine 0.99 of fp32"
        print(
            f"int8 dynamic quantization: x{t32 / t8:.2f} the fp32 speed, cosine to fp32 min {cos.min():.3f} "
            f"mean {cos.mean():.3f} ({verdict})"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
