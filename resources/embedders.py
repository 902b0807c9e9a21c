"""Embedding models behind one resource, with a cache keyed by (model, its version, text hash).

The cache is a set of Parquet parts under `<data_dir>/embedding_cache/<model>[-<version>]/` (a local model's
version is its package version or the content hash of its folder, so replaced weights start a new cache);
every call embeds only
texts the cache has never seen, so an identical chunk is embedded once across configs and runs. New
vectors are written as a part every `checkpoint_texts` texts, atomically, so a killed run keeps every whole
part and a rerun embeds only what is left, and concurrent runs never corrupt each other's cache. A damaged
part (cut short by a full disk or a copy) is set aside as `*.damaged`, never read, and its texts embedded again.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import numpy as np
import polars as pl
import pyarrow as pa

from rag_core.common.fingerprint import short_hash, slug, text_hash
from rag_core.common.local_models import is_local, model_version
from rag_core.components.embedders import EMBEDDERS, Embedder, is_plugin_embedder
from resources.devices import CPU, Device, record_rate, resolve_device
from resources.local_encoders import describe, local_encoder
from resources.locks import shared_lock
from resources.storage import atomic_write_parquet, data_root, read_parquet, set_aside

# Cache parts are immutable once written (atomic, uuid-named): parse each once per process.
_PARTS: dict[Path, tuple[dict[str, np.ndarray], str]] = {}  # part -> (its vectors, where embedded)
_TOKEN_COUNTS: dict[tuple[str, str | None], dict[str, int]] = {}  # (model, version) -> text hash -> tokens
_LOCK = threading.Lock()
_LOG = logging.getLogger(__name__)


@dataclass
class EmbedStats:
    requested: int  # texts asked for
    unique: int  # distinct texts among them
    embedded: int  # texts sent to the model (cache misses)
    seconds: float
    device: str = ""  # where this call embedded them (describe()), "" when the cache held every text
    embedded_on: dict[str, int] | None = None  # of the distinct texts: where each one's vector was computed
    # of the token slots the model computed now, the share that was padding (a batch pads to its longest
    # text); None when nothing was embedded or the padding is not ours (a plug-in's or remote model)
    padding_share: float | None = None


def fixed_size_vectors(vectors: np.ndarray) -> pa.FixedSizeListArray:
    """float32 matrix -> Arrow fixed-size list array (the on-disk form of every embedding)."""
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    return pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), vectors.shape[1])


def vectors_from_column(column: pl.Series) -> np.ndarray:
    arr = column.to_arrow()
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    width = arr.type.list_size if pa.types.is_fixed_size_list(arr.type) else len(arr[0])
    return np.asarray(arr.flatten().to_numpy(zero_copy_only=False), dtype=np.float32).reshape(-1, width)


def chunk_vectors(embeddings: pl.DataFrame) -> dict[str, np.ndarray]:
    """chunk_id -> vector of an embeddings artifact (for MMR and context diversity)."""
    return dict(zip(embeddings["chunk_id"].to_list(), vectors_from_column(embeddings["vector"]), strict=True))


class PluginEncoder:
    """A plug-in embedding model (rag_core/components/embedders.py) behind the local encoders' interface: its
    vectors checked (one finite, non-zero row per text) and L2-normalized."""

    backend = "plug-in"
    batch_size = None  # the service's
    precision = "float32"

    def __init__(self, embedder: Embedder, origin: str):
        self.embedder, self.origin, self.device = embedder, origin, CPU
        self.max_tokens = embedder.max_tokens

    def encode(self, texts: list[str]) -> np.ndarray:
        got = self.embedder.encode(list(texts))
        vectors = np.asarray(got, dtype=np.float32) if got is not None else np.zeros((0, 0), np.float32)
        norms = np.linalg.norm(vectors, axis=1) if vectors.ndim == 2 else None
        if (
            norms is None
            or len(vectors) != len(texts)
            or not np.isfinite(vectors).all()
            or (norms == 0).any()
        ):
            raise ValueError(
                f"embedding model {self.embedder.name!r} ({self.origin}) returned "
                f"{'an array of shape ' + str(vectors.shape) if got is not None else 'None'} for {len(texts)} "
                "texts: expected one finite, non-zero vector per text"
            )
        return vectors / norms[:, None]

    def token_counts(self, texts: list[str]) -> list[int]:
        if self.embedder.count_tokens is not None:
            return list(self.embedder.count_tokens(texts))
        import litellm

        return [litellm.token_counter(model=self.embedder.name, text=t) for t in texts]


class EmbeddingService(dg.ConfigurableResource):
    """Embeds texts with a sentence-transformers model (local), an installed plug-in model
    (rag_core/components/embedders.py) or any `litellm.embedding` model. A local
    model runs in ONNX Runtime (`backend: onnx`, the default) when its export computes torch's vectors,
    else in torch (resources/local_encoders.py)."""

    cache_dir: str
    backend: str = "onnx"  # or "torch": sentence-transformers itself
    device: str = "auto"  # $RAG_DEVICE: auto, cpu, cuda, cuda:N (resources/devices.py)
    batch_size: int = 16  # on the CPU; on a GPU, the batch measured to fit (resources/gpu_encoders.py)
    checkpoint_texts: int = 256  # new vectors are saved every this many texts
    api_base: str | None = None  # for litellm models, e.g. a local OpenAI-compatible server

    def _cache_path(self, model: str) -> Path:
        # a local model's folder version; a plug-in model's package and version (an upgrade embeds again)
        version = EMBEDDERS.origin(model).pin if is_plugin_embedder(model) else model_version(model)
        return data_root(self.cache_dir) / (
            f"{slug(model)}-{short_hash(version, 12)}" if version else slug(model)
        )

    def _load_cache(self, model: str, origins: dict[str, str] | None = None) -> dict[str, np.ndarray]:
        """text hash -> vector of every whole part; `origins`, when given, gets text hash -> where it was
        embedded (a part's `embedded_on`; parts from before it was recorded: the CPU, the only device then)."""
        folder = self._cache_path(model)
        if not folder.exists():
            return {}
        cache: dict[str, np.ndarray] = {}
        for part in sorted(folder.glob("*.parquet")):
            with _LOCK:
                if part not in _PARTS:
                    try:
                        df = read_parquet(part)
                        vectors = dict(
                            zip(df["text_hash"].to_list(), vectors_from_column(df["vector"]), strict=True)
                        )
                        origin = (
                            df["embedded_on"][0]
                            if "embedded_on" in df.columns and df.height
                            else ("cpu" if is_local(model) else f"api ({model})")
                        )
                        _PARTS[part] = (vectors, origin)
                    except Exception as e:  # truncated or not a cache part: never trust it
                        _LOG.warning(
                            f"embedding cache part {part} is damaged ({e}); embedding its texts again"
                        )
                        try:
                            set_aside(part, ".damaged")
                        except OSError as moved:  # skipped all the same: it is never read
                            _LOG.warning(f"could not set {part} aside ({moved}); it stays unread")
                        continue
            vectors, origin = _PARTS[part]
            cache.update(vectors)
            if origins is not None:
                origins.update(dict.fromkeys(vectors, origin))
        return cache

    def local_device(self) -> Device:
        """The device this setting means here; `cuda` where there is none: DeviceUnavailable."""
        return resolve_device(self.device)

    def encoder(self, model: str, texts: list[str] | None = None):
        """The local model's encoder (`texts`: the first asked for, checked on when an export or a GPU's
        precision is checked now), or a plug-in model's."""
        if is_plugin_embedder(model):
            return PluginEncoder(EMBEDDERS.get(model), str(EMBEDDERS.origin(model)))
        return local_encoder(model, self.backend, texts, self.local_device())

    def _model_embed(self, model: str, texts: list[str], encoder, progress=None) -> np.ndarray:
        """`texts`' vectors from the local `encoder` (None: the litellm model), in its batches (a GPU's,
        measured) or the service's."""
        out = []
        size = (encoder.batch_size if encoder is not None else None) or self.batch_size
        busy = 0.0  # the model's own seconds: what a device's measured rate is made of
        for i in range(0, len(texts), size):
            batch = texts[i : i + size]
            t0 = time.perf_counter()
            if encoder is not None:
                vecs = encoder.encode(batch)
            else:
                import litellm

                resp = litellm.embedding(model=model, input=batch, api_base=self.api_base)
                vecs = np.array([d["embedding"] for d in resp.data], dtype=np.float32)
                vecs /= np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
            busy += time.perf_counter() - t0
            out.append(np.asarray(vecs, dtype=np.float32))
            if progress:
                progress(min(i + size, len(texts)), len(texts))
        if encoder is not None:
            record_rate(
                model_version(model) or model,
                encoder.device,
                describe(encoder),
                len(texts),
                sum(map(len, texts)),
                busy,
            )
        return np.concatenate(out)

    def token_offsets(self, model: str, texts: list[str]) -> list[list[tuple[int, int]]]:
        """Character offsets of each text's tokens in the model's tokenizer (token-sized chunking)."""
        if not is_local(model):
            kind = "a plug-in" if is_plugin_embedder(model) else "a remote"
            raise ValueError(
                f"token-sized chunks need a local tokenizer's offsets; {model!r} is {kind} model: use unit: chars"
            )
        return self.encoder(model, texts).token_offsets(texts)

    def token_counts(self, model: str, texts: list[str]) -> list[int]:
        """Length of each text in tokens of the model's own tokenizer (litellm's counter for remote models)."""
        if is_plugin_embedder(model):
            return self.encoder(model).token_counts(texts)
        if is_local(model):
            # every config over a chunkset counts its chunks again (report and chunk-quality metrics):
            # tokenize each text once per process and model version
            known = _TOKEN_COUNTS.setdefault((model, model_version(model)), {})
            hashes = [text_hash(t) for t in texts]
            new = {h: t for h, t in zip(hashes, texts, strict=True) if h not in known}
            if new:
                known.update(
                    zip(new, self.encoder(model, texts).token_counts(list(new.values())), strict=True)
                )
            return [known[h] for h in hashes]
        import litellm

        return [litellm.token_counter(model=model, text=t) for t in texts]

    def cached_hashes(self, model: str) -> set[str]:
        """Text hashes the cache holds vectors for (what a run would not embed again)."""
        return set(self._load_cache(model))

    def max_tokens(self, model: str) -> int | None:
        """The longest input the model reads, in its tokens (special tokens included); longer texts are cut.
        None when unknown (a remote model litellm has no limit for)."""
        if is_local(model) or is_plugin_embedder(model):
            return self.encoder(model).max_tokens
        import litellm

        try:
            return litellm.get_model_info(model).get("max_input_tokens")
        except Exception:  # a model litellm does not know
            return None

    def vectors_of(self, model: str):
        """`embed` with one model, as the stage functions take it: texts in, their vectors out."""
        return lambda texts: self.embed(model, texts)[0]

    def embed(self, model: str, texts: list[str], progress=None) -> tuple[np.ndarray, EmbedStats]:
        """Vectors (L2-normalized float32, one row per text) and what it cost."""
        t0 = time.perf_counter()
        hashes = [text_hash(t) for t in texts]
        origins: dict[str, str] = {}
        cache = self._load_cache(model, origins)
        missing = {h: t for h, t in zip(hashes, texts, strict=True) if h not in cache}
        device, padding = "", None
        with _embedding(self._cache_path(model)) if missing else contextlib.nullcontext():
            if missing:  # another process may have embedded them while this one waited
                cache = self._load_cache(model, origins)
                missing = {h: t for h, t in zip(hashes, texts, strict=True) if h not in cache}
            if missing:  # the encoder is loaded (and checked, on first use) with the texts it is for
                local = is_local(model) or is_plugin_embedder(model)
                encoder = self.encoder(model, list(missing.values())) if local else None
                device = describe(encoder) if encoder is not None else f"api ({model})"
                padding = self._embed_missing(model, missing, cache, progress, encoder, device, origins)
        matrix = np.stack([cache[h] for h in hashes]) if hashes else np.zeros((0, 0), np.float32)
        embedded_on: dict[str, int] = {}
        for h in set(hashes):
            embedded_on[origins[h]] = embedded_on.get(origins[h], 0) + 1
        stats = EmbedStats(
            len(texts), len(set(hashes)), len(missing), time.perf_counter() - t0, device, embedded_on, padding
        )
        return matrix, stats

    def _padded_lengths(self, model: str, texts: list[str], encoder) -> list[int] | None:
        """Each text's length in the model's tokens as a batch pads it (cut at what the model reads), for a
        local model's encoder; None for a plug-in's or remote model (its batches are the service's)."""
        if encoder is None or isinstance(encoder, PluginEncoder):
            return None
        return [min(n, encoder.max_tokens) for n in self.token_counts(model, texts)]

    def _embed_missing(
        self, model: str, missing: dict[str, str], cache: dict, progress, encoder, device: str, origins: dict
    ) -> float | None:
        """Embeds `missing` into the cache, in parts; the share of the token slots that was padding."""
        items = list(missing.items())
        tokens = self._padded_lengths(model, [text for _, text in items], encoder)
        # longest first, so each batch holds texts of about one length: a batch pads to its longest text
        # (unsorted batches of chunks spent half of the model's time on padding). By the token counts the
        # tokenizer gives (once per text and process) where the model is ours: by characters 16% of the
        # example's document slots were padding, by tokens 1.4%. A fixed count per batch, not a token
        # budget: on the CPU the time follows the slots computed, and larger batches of short texts padded
        # more than they saved (benchmarks/fused_encoder.py)
        lengths = tokens if tokens is not None else [len(text) for _, text in items]
        order = sorted(range(len(items)), key=lengths.__getitem__, reverse=True)
        todo = [items[i] for i in order]
        size = (encoder.batch_size if encoder is not None else None) or self.batch_size
        real = slots = 0
        # a GPU's batches are large: a part holds several of them (a part per 256 texts is ~20 a second there)
        every = max(self.checkpoint_texts, 8 * ((encoder.batch_size if encoder is not None else None) or 0))
        for start in range(0, len(todo), every):
            block = todo[start : start + every]
            if tokens is not None:  # the batches _model_embed makes of this block
                for at in range(start, start + len(block), size):
                    batch = [tokens[i] for i in order[at : min(at + size, start + len(block))]]
                    real, slots = real + sum(batch), slots + max(batch) * len(batch)

            def block_progress(done: int, _: int, start: int = start) -> None:
                if progress:
                    progress(start + done, len(todo))

            new = self._model_embed(model, [text for _, text in block], encoder, block_progress)
            part = pl.DataFrame({"text_hash": [h for h, _ in block]}).with_columns(
                pl.Series("vector", fixed_size_vectors(new)), pl.lit(device).alias("embedded_on")
            )
            atomic_write_parquet(part, self._cache_path(model) / f"{uuid.uuid4().hex}.parquet")
            cache.update(zip((h for h, _ in block), new, strict=True))
            origins.update(dict.fromkeys((h for h, _ in block), device))
        return 1 - real / slots if slots else None


def _embedding(folder: Path):
    """Held while texts missing from a model's cache are embedded: a second process (another worker
    evaluating another config over the same chunks) waits, then finds them cached, so each text is
    embedded once (resources/locks.py: on the deployment's database when it has one)."""
    return shared_lock(f"embedding {folder}", folder / ".embedding.lock")
