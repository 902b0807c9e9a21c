"""Cross-encoders: a sentence-transformers CrossEncoder from a local folder, and its scores of (query, text) pairs.

float32 on every device: its scores decide an order, and a lower precision could flip near-ties. A question's
candidates are one batch on a GPU (the reranker's latency is per question, as the leaderboard reports it),
halved for that model while they do not fit the device's memory; 32 pairs a batch on the CPU, as
sentence-transformers' default.
"""

from __future__ import annotations

import threading

import numpy as np

from rag_core.common.extras import require
from rag_core.common.local_models import model_version

_CROSS_ENCODERS: dict[tuple[str, str | None, str], object] = {}  # (path, version, device) -> the model
_GPU_BATCH: dict[tuple, int] = {}  # the largest batch known to fit, per loaded model on a GPU
CPU_BATCH = 32  # sentence-transformers' default
_LOCK = threading.Lock()


def cross_encoder(path: str, device: str = "cpu"):
    """A sentence-transformers CrossEncoder from a local folder, loaded once per process, version and device."""
    key = (path, model_version(path), device)
    with _LOCK:
        if key not in _CROSS_ENCODERS:
            require("torch", "the cross_encoder reranker")
            from sentence_transformers import CrossEncoder

            _CROSS_ENCODERS[key] = CrossEncoder(path, device=device)
        return _CROSS_ENCODERS[key]


def cross_scores(model, pairs: list[tuple[str, str]]) -> np.ndarray:
    """The model's scores of (query, text) pairs: on a GPU in one batch, halved while it does not fit."""
    if model.device.type != "cuda":
        return np.asarray(model.predict(pairs, batch_size=CPU_BATCH, show_progress_bar=False))
    import torch

    key = id(model)
    while True:
        size = min(len(pairs), _GPU_BATCH.get(key, len(pairs))) or 1
        try:
            return np.asarray(model.predict(pairs, batch_size=size, show_progress_bar=False))
        except torch.cuda.OutOfMemoryError:
            torch.cuda.empty_cache()
            if size == 1:
                raise
            _GPU_BATCH[key] = size // 2
