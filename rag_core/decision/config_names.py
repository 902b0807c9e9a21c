"""Configs named as a reader sees them: by the board's short label (rag_core/planning/labels.py), the full
config key said once beside it, where a report or the CLI would otherwise repeat a key of 60 characters."""

from __future__ import annotations


def label_map(keys, labels) -> dict[str, str]:
    """config key -> its label, for the keys whose label differs from the key (a board's two columns)."""
    return {k: label for k, label in zip(keys, labels, strict=True) if label and label != k}


def in_labels(text: str, labels: dict[str, str]) -> str:
    """`text` with each config key it names as its short label (longest keys first: a key may hold a
    shorter one)."""
    for key in sorted(labels, key=len, reverse=True):
        if labels[key] and labels[key] != key:
            text = text.replace(key, labels[key])
    return text


def named(key: str | None, labels: dict[str, str]) -> str:
    """`label (config <key>)` where the key has a label, else the key; `none` for no config."""
    if not key:
        return "none"
    label = labels.get(key) or key
    return f"{label} (config {key})" if label != key else key


def reason(decision: dict) -> str:
    """The decision's why without the recommended config's key it opens with (the key is said once,
    beside its label)."""
    key = decision["recommended"]
    return decision["why"].removeprefix(f"{key}: ") if key else decision["why"]
