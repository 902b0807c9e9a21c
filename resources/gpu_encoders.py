"""A local sentence-transformers encoder on a CUDA device: the precision its vectors allow and the batch that fits.

- Precision: float16 when its vectors pass the check the ONNX export passes (every vector within cosine
  0.9999 of torch's on the CPU, on the run's first texts and fixed probes: resources/local_encoders.py),
  else float32, checked the same way. The bar is what lets every device share the embedding cache and every
  fingerprint: switching device never recomputes an artifact. A model no precision passes on the GPU is
  embedded on the CPU, with a warning.
- Batch size: measured, not guessed. Doubling from the smallest candidate, each batch is first run with
  every text at the model's limit (the memory a batch can take: the pipeline sorts texts by length, so a
  batch of its longest texts is the worst case) and kept only when its peak stays within MEMORY_SHARE of
  the memory free at the start; then the same WORKLOAD of the run's texts is timed in batches of that size
  (the median of REPEATS). Of the batches that fit, the smallest within 5% of the fastest is taken.
- The tokenizer runs on every core (TOKENIZERS_PARALLELISM, off by default for the CPU's models) unless the
  user set it: on a GPU the CPU's tokenizing is the bottleneck.
- The engine is torch even where the backend setting is `onnx`: ONNX Runtime's gain is its start-up (~8 s
  of imports), small beside a GPU's run, and its CUDA provider (the `onnxruntime-gpu` package, which
  replaces `onnxruntime` and needs CUDA and cuDNN libraries of matching versions) is not a dependency.

The outcome is recorded once per machine, GPU model, model version and library versions (in the user's cache
dir, like the ONNX export), with its checks and each batch's measured texts/s, so a later process loads it
in milliseconds.
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from rag_core.common.fingerprint import short_hash, slug
from rag_core.common.local_models import model_version
from resources.devices import Device
from resources.encoder_check import PROBES, check, sample
from resources.environment import TOKENIZER_THREADS_CHOSEN, user_cache_dir
from resources.torch_encoder import TorchEncoder

PRECISIONS = ("float16", "float32")  # tried in this order: the first whose vectors pass is used
BATCHES = (16, 32, 64, 128, 256, 512, 1024)
MEMORY_SHARE = 0.5  # of the memory free when calibrating: room for a cross-encoder or another process
WORKLOAD = 2048  # texts each batch size is timed on (the run's first texts and the probes, repeated)
REPEATS = 3  # the median of these: one timing of small batches is noisy
CALIBRATION_FORMAT = 2  # bump when the calibration changes: older records are then measured again
_LOG = logging.getLogger(__name__)


def record_path(model: str, device: Device) -> Path:
    import torch

    versions = [model_version(model), device.label.split(" ", 1)[-1], CALIBRATION_FORMAT, torch.__version__]
    versions += [importlib.metadata.version(d) for d in ("transformers", "sentence-transformers")]
    return user_cache_dir() / "gpu" / f"{slug(model)}-{short_hash(json.dumps(versions), 12)}.json"


def gpu_encoder(
    model: str, texts: list[str], device: Device, reference: Callable[[], TorchEncoder]
) -> TorchEncoder | None:
    """The model's encoder on `device`, calibrated now when this machine has no record of it (`reference`:
    torch on the CPU). None when no precision passes the check there."""
    if not TOKENIZER_THREADS_CHOSEN:
        # the CPU feeds the GPU: tokenizing on one thread held an H200 to 3,300 texts/s, on all 16 cores
        # 5,400 (benchmarks/embedding_throughput.py); read by the tokenizer at each call
        os.environ["TOKENIZERS_PARALLELISM"] = "true"
    path = record_path(model, device)
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        record = calibrate(model, texts, device, reference())
        _save(path, record)
    if record["precision"] is None:
        _LOG.warning(
            f"{model} on {device.label}: no precision computes the CPU's vectors (cosine >= 0.9999; "
            f"{record['checks']}): embedding on the CPU"
        )
        return None
    encoder = TorchEncoder(model, device, record["precision"])
    encoder.batch_size = record["batch_size"]
    encoder.why = (
        f"{record['precision']} (cosine to the CPU's >= {record['checks'][record['precision']]['min_cosine']:.6f}), "
        f"batch {record['batch_size']} measured to fit"
    )
    return encoder


def calibrate(model: str, texts: list[str], device: Device, reference: TorchEncoder) -> dict:
    """The precision whose vectors pass the check and the batch that fits, with what was measured."""
    probe = sample(texts)
    checks: dict[str, dict] = {}
    for precision in PRECISIONS:
        encoder = TorchEncoder(model, device, precision)
        checks[precision] = check(encoder, reference, probe)
        if checks[precision]["passed"]:
            break
    else:
        return {"precision": None, "checks": checks, "device": device.label}
    batch, rates, peaks = fit_batch(encoder, probe, device)  # the encoder that passed
    return {
        "device": device.label,
        "precision": precision,
        "checks": checks,
        "batch_size": batch,
        "texts_per_second": rates.get(batch),
        "batches": {str(b): round(r, 1) for b, r in rates.items()},
        "peak_memory_mib": {str(b): round(p / 2**20) for b, p in peaks.items()},
    }


def fit_batch(encoder: TorchEncoder, texts: list[str], device: Device) -> tuple[int, dict, dict]:
    """(the batch to use, texts/s per batch tried, peak memory per batch) on `device`."""
    import torch

    free, _ = torch.cuda.mem_get_info(device.index)
    budget = free * MEMORY_SHARE
    longest = PROBES[-1]  # longer than any model reads: every row of the batch at the model's limit
    work = sorted((texts * (WORKLOAD // max(1, len(texts)) + 1))[:WORKLOAD], key=len, reverse=True)
    rates: dict[int, float] = {}
    peaks: dict[int, int] = {}
    for size in BATCHES:
        try:
            torch.cuda.synchronize(device.index)
            torch.cuda.reset_peak_memory_stats(device.index)
            base = torch.cuda.memory_allocated(device.index)
            encoder.encode([longest] * size)
            peak = torch.cuda.max_memory_allocated(device.index) - base
        except torch.cuda.OutOfMemoryError:
            torch.cuda.empty_cache()
            break
        if peak > budget:
            break
        peaks[size] = peak
        seconds = []
        for _ in range(REPEATS):  # the same workload in batches of `size`, as the pipeline sends it
            t0 = time.perf_counter()
            for start in range(0, len(work), size):
                encoder.encode(work[start : start + size])  # returns numpy: the device is done
            seconds.append(time.perf_counter() - t0)
        rates[size] = len(work) / statistics.median(seconds)
    torch.cuda.empty_cache()
    if not rates:  # not even the smallest batch fits in the share: the smallest, as the CPU's
        return BATCHES[0], rates, peaks
    best = max(rates.values())
    return min(b for b, r in rates.items() if r >= 0.95 * best), rates, peaks


def _save(path: Path, record: dict) -> None:
    """Written whole or not at all; a cache dir that cannot be written calibrates again next process."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".calibrating-")
        with os.fdopen(fd, "w") as f:
            json.dump(record, f, indent=1)
        os.replace(tmp, path)
    except OSError as e:
        _LOG.warning(f"could not record the GPU calibration in {path} ({e}): it is measured again next time")
