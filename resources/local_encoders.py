"""A local sentence-transformers model as an encoder: texts to L2-normalized vectors, and its tokenizer.

Two backends compute the same vectors. `torch` is sentence-transformers itself (the torch extra). `onnx`,
the default, runs the model's transformer in ONNX Runtime (fp32, the graph fused by ONNX Runtime's
transformer optimizer, every session optimization; THREADS) and pools in numpy: it starts in ~0.3 s where
importing sentence-transformers, transformers and torch takes ~8 s, and it needs no torch.

The ONNX graph is built from the model's safetensors weights (resources/bert_onnx.py: BERT-family models) and
fused once per machine, model version, fusions and library versions (into the user's cache dir, whole or not
at all), and checked the moment it is built: its tokens and offsets must equal the torch tokenizer's and every
vector be within cosine 0.9999 of torch's. For the packaged model the check is against torch's tokens and
vectors carried with the code (resources/encoder_reference.py: the fixed probes and texts of the example
data), so no torch is imported; for any other local model, against live torch on the first texts the run asks
for plus the probes. That bar is far stricter than "close enough" on purpose: the two backends share the
embedding cache and every fingerprint, so the graph must compute the same numbers up to float rounding
(torch's own vectors move by ~1e-7 with the batch a text is in). A failed check is recorded, warned about and
torch used; a model the builder does not cover (pooling other than mean, another architecture) uses torch;
where torch is not installed, that is one error naming the extra.

On a CUDA device (resources/devices.py) the encoder is torch, at the lowest precision whose vectors pass
the same check against the CPU's, in batches measured to fit (resources/gpu_encoders.py).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import logging
import os
import shutil
import tempfile
import threading
from pathlib import Path

import numpy as np

from rag_core.common.extras import MissingExtra
from rag_core.common.fingerprint import short_hash, slug
from rag_core.common.local_models import model_version, weights_path
from resources import bert_onnx
from resources.devices import CPU, Device
from resources.encoder_check import MIN_COSINE, PROBES, SAMPLE_TEXTS, check, sample
from resources.encoder_reference import carried
from resources.environment import user_cache_dir
from resources.torch_encoder import TorchEncoder

__all__ = ["MIN_COSINE", "PROBES", "SAMPLE_TEXTS", "TorchEncoder", "check", "sample"]  # read here by tests

BACKENDS = ("onnx", "torch")
EXPORT_FORMAT = 3  # bump when the graph or its check changes: older builds are then made again
# 2: the graph built from the weights (resources/bert_onnx.py), checked against the carried reference
# 3: that graph fused by ONNX Runtime's transformer optimizer (bert_onnx.FUSION, also in the key)
_LOG = logging.getLogger(__name__)
_LOCK = threading.Lock()
_BUILDING = threading.RLock()  # a GPU encoder that falls back to the CPU asks again within
_ENCODERS: dict[tuple, object] = {}  # (model, version, backend, device) -> encoder


def _threads() -> dict:
    """ONNX Runtime's threads for the encoder: one operator at a time (a BERT graph is a chain: the
    parallel executor measured x0.65), each split over the cores this process may use. On 2 cores shared
    with other work one thread measured faster (x1.28 of the unfused graph against x1.21); alone on them,
    the run's embedding step keeps ~1.7 cores busy with two."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return {"intra_op_num_threads": cores, "inter_op_num_threads": 1}


THREADS = _threads()


class OnnxEncoder:
    """The exported transformer in ONNX Runtime, mean pooling and normalization in numpy."""

    backend = "onnx"
    batch_size: int | None = None
    device, precision, why = CPU, "float32", ""

    def __init__(self, folder: Path):
        import onnxruntime as ort
        from tokenizers import Tokenizer

        meta = json.loads((folder / "meta.json").read_text())
        self.max_tokens = int(meta["max_tokens"])
        self.inputs = list(meta["inputs"])
        # the file may hold the padding or truncation of the call it was saved after: each is set here
        self.counter = Tokenizer.from_file(str(folder / "tokenizer.json"))  # whole texts: lengths, offsets
        self.counter.no_padding()
        self.counter.no_truncation()
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.enable_truncation(self.max_tokens)
        self.tokenizer.enable_padding(pad_id=int(meta["pad_id"]), pad_token=meta["pad_token"])
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3  # errors only
        for key, value in THREADS.items():
            setattr(options, key, value)
        # the pool's threads spin between calls by default: a core busy for nothing while the run does
        # its other work (measured: ~20 ms spun after each call)
        options.add_session_config_entry("session.force_spinning_stop", "1")
        # and inside a call, waiting for each other at every operator: on shared cores the spinning thread
        # takes the core its partner needs (benchmarks/fused_encoder.py, 2 cores: texts per CPU-s x1.32 of
        # the unfused graph without spinning, x1.12 with it)
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(
            str(folder / "model.onnx"), options, providers=["CPUExecutionProvider"]
        )

    def encode(self, texts: list[str]) -> np.ndarray:
        encodings = self.tokenizer.encode_batch(texts)
        feed = {
            "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
            "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),
            "token_type_ids": np.array([e.type_ids for e in encodings], dtype=np.int64),
        }
        (hidden,) = self.session.run(None, {name: feed[name] for name in self.inputs})
        mask = feed["attention_mask"][..., None].astype(np.float32)
        pooled = (hidden * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9)
        return (pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)).astype(np.float32)

    def token_counts(self, texts: list[str]) -> list[int]:
        return [len(e.ids) for e in self.counter.encode_batch(texts, add_special_tokens=True)]

    def token_offsets(self, texts: list[str]) -> list[list[tuple[int, int]]]:
        encodings = self.counter.encode_batch(texts, add_special_tokens=False)
        return [[tuple(o) for o in e.offsets] for e in encodings]


def export_folder(model: str) -> Path:
    """Where this model's graph lives: keyed by the model's version, every library that shapes it and the
    reference it is checked against."""
    reference = carried(model)
    versions = [model_version(model), EXPORT_FORMAT, reference.model_version if reference else "live torch"]
    versions += [bert_onnx.FUSION]
    versions += [importlib.metadata.version(d) for d in ("onnx", "onnxruntime", "tokenizers", "safetensors")]
    return user_cache_dir() / "onnx" / f"{slug(model)}-{short_hash(json.dumps(versions), 12)}"


def mean_pooled(model: str) -> bool:
    """The export covers Transformer -> mean Pooling (-> Normalize) models, the common sentence encoder."""
    folder = Path(weights_path(model))
    try:
        modules = json.loads((folder / "modules.json").read_text())
        kinds = [m["type"].rsplit(".", 1)[-1] for m in modules]
        pooling = next(m for m in modules if m["type"].endswith(".Pooling"))
        config = json.loads((folder / pooling["path"] / "config.json").read_text())
    except (OSError, ValueError, KeyError, StopIteration):
        return False
    modes = {k for k, v in config.items() if k.startswith("pooling_mode") and v is True}
    return kinds in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"]) and modes == {
        "pooling_mode_mean_tokens"
    }


def _export(model: str, folder: Path, fused: bool = True) -> None:
    """The model's transformer as an ONNX graph built from its weights (dynamic batch and length), fused
    (bert_onnx.FUSION) unless not `fused`, and the tokenizer it is fed by, as the model folder has it."""
    import onnx
    from tokenizers import Tokenizer

    source = Path(weights_path(model))
    graph = bert_onnx.build(source, fused)
    onnx.save(graph, str(folder / "model.onnx"))
    shutil.copyfile(source / "tokenizer.json", folder / "tokenizer.json")
    pad_token = _setting(source, "tokenizer_config.json", "pad_token") or "[PAD]"
    pad_token = pad_token["content"] if isinstance(pad_token, dict) else pad_token
    pad_id = Tokenizer.from_file(str(source / "tokenizer.json")).token_to_id(pad_token)
    if pad_id is None:
        raise bert_onnx.Unsupported(f"its pad token {pad_token!r} is not in its tokenizer")
    meta = {
        "max_tokens": max_tokens(source),
        "inputs": list(bert_onnx.INPUTS),
        "pad_id": pad_id,
        "pad_token": pad_token,
        "fused": bert_onnx.fused_ops(graph),  # e.g. {"Attention": 6, "BiasGelu": 6}: what the fusions matched
    }
    (folder / "meta.json").write_text(json.dumps(meta))


def graph_encoder(model: str, folder: Path, fused: bool = True) -> OnnxEncoder:
    """An encoder on the model's graph built into `folder` now, fused or not, unchecked and outside the
    cache: today's and the fused graph side by side (benchmarks/fused_encoder.py, tests)."""
    folder.mkdir(parents=True, exist_ok=True)
    _export(model, folder, fused)
    return OnnxEncoder(folder)


def _setting(folder: Path, file: str, key: str):
    try:
        return json.loads((folder / file).read_text()).get(key)
    except (OSError, ValueError):
        return None


def max_tokens(folder: Path) -> int:
    """The tokens the model reads, as sentence-transformers takes them: its max_seq_length, else the
    tokenizer's limit, at most the position embeddings'."""
    if limit := _setting(folder, "sentence_bert_config.json", "max_seq_length"):
        return int(limit)
    positions = int(_setting(folder, "config.json", "max_position_embeddings") or 512)
    return min(int(_setting(folder, "tokenizer_config.json", "model_max_length") or positions), positions)


def describe(encoder) -> str:
    """Where and how an encoder computes: "cpu · onnx", "cuda:0 (NVIDIA H100) · torch float16 · batch 256"."""
    parts = [
        encoder.device.label,
        encoder.backend + (f" {encoder.precision}" if encoder.device.is_cuda else ""),
    ]
    return " · ".join(parts + ([f"batch {encoder.batch_size}"] if encoder.batch_size else []))


def _onnx_encoder(model: str, texts: list[str]) -> OnnxEncoder | None:
    """The checked ONNX encoder of `model`: exported and checked now on `texts` if not yet on this machine.
    None when the model is not covered, the check failed (now or before), or the cache cannot be written."""
    if not mean_pooled(model):
        return None
    folder = export_folder(model)
    try:
        if not (folder / "check.json").exists():
            _build(model, folder, texts)
        outcome = json.loads((folder / "check.json").read_text())
        if not outcome["passed"]:
            _LOG.warning(
                f"the ONNX export of {model} is not used ({outcome}; it needs the torch tokenizer's tokens and "
                f"cosine >= {MIN_COSINE} to torch's vectors): embedding with torch"
            )
            return None
        return OnnxEncoder(folder)
    except MissingExtra:
        raise
    except Exception as e:  # no writable cache dir, a damaged export
        _LOG.warning(f"no ONNX Runtime encoder for {model} ({type(e).__name__}: {e}): embedding with torch")
        if (folder / "check.json").exists():
            shutil.rmtree(folder, ignore_errors=True)  # a damaged export: the next run builds it again
        return None


def _build(model: str, folder: Path, texts: list[str]) -> None:
    """Build and check in a temporary folder, then rename it into place: whole or not at all. A build that
    fails is recorded as a failed check, so each run does not try it again; one that fails on the install (a
    check that needs torch where it is not installed, a library missing) records nothing: repairing the
    install lets the next run build and check."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=".building-"))
    try:
        try:
            _export(model, tmp)
            reference = carried(model)
            if reference is not None:  # torch's tokens and vectors, carried: no torch needed
                outcome = check(OnnxEncoder(tmp), reference, reference.texts)
                outcome["reference"] = f"carried ({reference.model_version})"
            else:
                outcome = check(OnnxEncoder(tmp), _torch(model), sample(texts))
                outcome["reference"] = "torch"
        except (MissingExtra, ImportError):
            # the install, not the graph: nothing recorded, so the run after it is repaired builds again
            raise
        except Exception as e:  # an architecture the builder or ONNX Runtime does not take
            outcome = {"passed": False, "error": f"{type(e).__name__}: {e}"}
        (tmp / "check.json").write_text(json.dumps(outcome))
        with contextlib.suppress(OSError):  # a concurrent builder's graph is as good
            os.rename(tmp, folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _torch(model: str) -> TorchEncoder:
    """torch on the CPU: an encoder of its own, and the reference every other encoder is checked against."""
    key = (model, model_version(model), "torch", "cpu")
    with _LOCK:
        if key not in _ENCODERS:
            _ENCODERS[key] = TorchEncoder(model)
        return _ENCODERS[key]


def local_encoder(model: str, backend: str = "onnx", texts: list[str] | None = None, device: Device = CPU):
    """The encoder of a local model, loaded once per process, version, backend and device. On the CPU,
    `onnx` falls back to torch when the ONNX export is not available (see the module's docstring); on a CUDA
    device the encoder is torch (resources/gpu_encoders.py), or the CPU's when no precision passes the
    check there. `texts` are the first texts asked for, part of a check made now."""
    if backend not in BACKENDS:
        raise ValueError(f"embedding backend {backend!r}: expected one of {', '.join(BACKENDS)}")
    key = (model, model_version(model), backend, device.name)
    # threads of one process wait for one export or calibration instead of each making their own
    with _BUILDING:
        with _LOCK:
            known = _ENCODERS.get(key)
        if known is None:
            if device.is_cuda:
                from resources.gpu_encoders import gpu_encoder

                known = gpu_encoder(model, texts or [], device, lambda: _torch(model))
                if known is None:  # no precision passed the check on the GPU: the CPU's encoder
                    known = local_encoder(model, backend, texts, CPU)
            elif backend == "torch":
                known = _torch(model)
            else:
                known = _onnx_encoder(model, texts or []) or _torch(model)
            with _LOCK:
                _ENCODERS[key] = known
    return known
