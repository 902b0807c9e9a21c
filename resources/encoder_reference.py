"""Torch's vectors and tokens of the packaged model on fixed texts, carried with the code (encoder_reference.npz).

The ONNX graph built from the packaged model's weights (resources/bert_onnx.py) is checked against these, so
the default install needs no torch to know its encoder computes torch's numbers. They were computed once with
sentence-transformers on the CPU in float32 (`python -m resources.encoder_reference`, with the torch extra)
and belong to one model version: another version has no carried reference and is checked against live torch.
The texts: the check's fixed probes (resources/encoder_check.py) and passages and questions of the example
data, from a word to past the model's 256 tokens, in several scripts.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import numpy as np

from rag_core.common.local_models import is_packaged, model_version

FILE = Path(__file__).with_name("encoder_reference.npz")
ROOT = Path(__file__).resolve().parents[1]
PACKAGED = "all-MiniLM-L6-v2"


class CarriedReference:
    """The carried texts' token ids, counts, offsets and vectors, answering as an encoder does on them."""

    backend = "carried"

    def __init__(self, path: Path = FILE):
        with np.load(path, allow_pickle=False) as data:
            self.meta = json.loads(str(data["meta"]))
            self.texts = [str(t) for t in data["texts"]]
            ids, offsets = data["ids"].tolist(), data["offsets"].tolist()
            counts, offset_counts = data["counts"].tolist(), data["offset_counts"].tolist()
            self.vectors = data["vectors"].astype(np.float32)
        self.model_version = self.meta["model_version"]
        self._row = {t: i for i, t in enumerate(self.texts)}
        self._ids = _split(ids, counts)
        self._offsets = [[tuple(o) for o in row] for row in _split(offsets, offset_counts)]

    def token_ids(self, texts: list[str]) -> list[list[int]]:
        return [self._ids[self._row[t]] for t in texts]

    def token_counts(self, texts: list[str]) -> list[int]:
        return [len(ids) for ids in self.token_ids(texts)]

    def token_offsets(self, texts: list[str]) -> list[list[tuple[int, int]]]:
        return [self._offsets[self._row[t]] for t in texts]

    def encode(self, texts: list[str]) -> np.ndarray:
        return self.vectors[[self._row[t] for t in texts]]


def _split(flat: list, counts: list[int]) -> list[list]:
    out, at = [], 0
    for n in counts:
        out.append(flat[at : at + n])
        at += n
    return out


@cache
def _load() -> CarriedReference | None:
    return CarriedReference() if FILE.exists() else None


def carried(model: str) -> CarriedReference | None:
    """The carried reference of `model`: the packaged model at the version it was computed for, else None."""
    if not is_packaged(model):
        return None
    reference = _load()
    return reference if reference is not None and reference.model_version == model_version(model) else None


def reference_texts() -> list[str]:
    """The probes and 60 texts of the example data spread over their lengths (passages and questions)."""
    import polars as pl

    from resources.encoder_check import PROBES

    data = ROOT / "examples" / "data"
    passages = pl.read_parquet(data / "hotpotqa_distractor_100" / "corpus.parquet")["text"].to_list()
    questions = pl.read_parquet(data / "hotpotqa_distractor_100" / "queries.parquet")["question"].to_list()
    multilingual = sorted(
        {str(q) for f in sorted((data / "xquad_multilingual").glob("*.parquet")) for q in _questions(f)}
    )
    spread = sorted(set(passages), key=len)
    texts = (
        spread[:: max(1, len(spread) // 30)][:30]
        + questions[:15]
        + multilingual[:: max(1, len(multilingual) // 15)][:15]
    )
    return list(dict.fromkeys(PROBES + texts))


def _questions(path: Path) -> list[str]:
    import polars as pl

    frame = pl.read_parquet(path)
    return frame["question"].to_list() if "question" in frame.columns else []


def write(path: Path = FILE) -> None:
    """Compute the reference with torch (sentence-transformers on the CPU, float32) and save it."""
    import importlib.metadata

    from resources.torch_encoder import TorchEncoder

    texts = reference_texts()
    encoder = TorchEncoder(PACKAGED)
    ids = encoder.token_ids(texts)
    offsets = encoder.token_offsets(texts)
    by_length = sorted(range(len(texts)), key=lambda i: -len(texts[i]))  # batches as the check makes them
    vectors = np.zeros((len(texts), encoder.encode(texts[:1]).shape[1]), np.float32)
    for start in range(0, len(by_length), 16):
        rows = by_length[start : start + 16]
        vectors[rows] = encoder.encode([texts[i] for i in rows])
    meta = {
        "model_version": model_version(PACKAGED),
        "computed_with": {
            d: importlib.metadata.version(d) for d in ("torch", "transformers", "sentence-transformers")
        },
        "max_tokens": encoder.max_tokens,
    }
    np.savez_compressed(
        path,
        meta=np.array(json.dumps(meta)),
        texts=np.array(texts),
        ids=np.array([i for row in ids for i in row], np.int32),
        counts=np.array([len(row) for row in ids], np.int32),
        offsets=np.array([o for row in offsets for o in row], np.int32).reshape(-1, 2),
        offset_counts=np.array([len(row) for row in offsets], np.int32),
        vectors=vectors,
    )


if __name__ == "__main__":
    write()
    print(f"{FILE}: {len(CarriedReference().texts)} texts, {FILE.stat().st_size} bytes")
