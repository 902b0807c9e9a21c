"""A local sentence-transformers model on torch, on a device at a precision (the CPU's float32 by default)."""

from __future__ import annotations

import logging

import numpy as np

from rag_core.common.extras import require
from rag_core.common.local_models import weights_path
from resources.devices import CPU, Device


class TorchEncoder:
    """sentence-transformers on torch, on a device at a precision (the CPU's float32 by default)."""

    backend = "torch"
    batch_size: int | None = None  # None: the caller's; on a GPU, the batch measured to fit

    def __init__(self, model: str, device: Device = CPU, precision: str = "float32"):
        require("torch", f"embedding {model} with torch")
        from sentence_transformers import SentenceTransformer

        # token counts of long chunks are taken on purpose (the truncation warning is ours, with advice):
        # the tokenizer's own "sequence length is longer" warning only alarms
        logging.getLogger("transformers.tokenization_utils_base").setLevel(logging.ERROR)
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()  # "Loading weights": a bar per process, for no one
        self.model = SentenceTransformer(weights_path(model), device=device.name)
        if precision == "float16":
            self.model.half()
        self.device, self.precision, self.why = device, precision, ""
        self.max_tokens = int(self.model.max_seq_length)

    def encode(self, texts: list[str]) -> np.ndarray:
        if self.precision == "float32":
            vectors = self.model.encode(
                texts, batch_size=max(1, len(texts)), normalize_embeddings=True, show_progress_bar=False
            )
            return np.asarray(vectors, dtype=np.float32)
        # a lower precision's vectors are normalized in float32: a float16 norm is off by ~1e-3
        vectors = self.model.encode(texts, batch_size=max(1, len(texts)), show_progress_bar=False)
        vectors = np.asarray(vectors, dtype=np.float32)
        return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)

    def token_ids(self, texts: list[str]) -> list[list[int]]:
        return [list(ids) for ids in self.model.tokenizer(texts, add_special_tokens=True)["input_ids"]]

    def token_counts(self, texts: list[str]) -> list[int]:
        return [len(ids) for ids in self.token_ids(texts)]

    def token_offsets(self, texts: list[str]) -> list[list[tuple[int, int]]]:
        enc = self.model.tokenizer(
            texts, add_special_tokens=False, return_offsets_mapping=True, verbose=False
        )
        return [[tuple(o) for o in offsets] for offsets in enc["offset_mapping"]]
