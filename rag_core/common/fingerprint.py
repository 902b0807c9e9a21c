"""Content fingerprints and readable slugs.

A fingerprint is the SHA-256 of the canonical JSON of its parts (sorted keys, no whitespace), so it is
stable across processes and independent of the key order of the YAML it came from.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def fingerprint(*parts: Any) -> str:
    return hashlib.sha256(canonical_json(list(parts)).encode()).hexdigest()


def short_hash(text: str, n: int = 8) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:n]


def text_hash(text: str) -> str:
    """Identity of a text for the embedding cache."""
    return hashlib.sha256(text.encode()).hexdigest()


def file_hash(path: str | Path) -> str:
    """SHA-256 of a file's bytes, or of a directory's files (relative path + bytes, in sorted order)."""
    path = Path(path)
    h = hashlib.sha256()
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for f in files:
        if path.is_dir():
            h.update(str(f.relative_to(path)).encode() + b"\0")
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def slug(text: str) -> str:
    """Lowercase, with runs of anything but [a-z0-9.] turned into '-'."""
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-") or "x"
