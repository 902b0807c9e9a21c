"""Short config labels: only what differs, unique, readable."""

from __future__ import annotations

from rag_core.planning.labels import short_labels
from rag_core.planning.spec import load_sweep
from tests.conftest import ROOT


def test_labels_name_only_what_differs_between_configs():
    sweep = load_sweep(ROOT / "examples" / "sweeps" / "example.yaml")
    labels = short_labels(sweep.configs)
    assert len(set(labels.values())) == len(labels) == 12
    key = next(k for k in labels if k.startswith("paragraph-1024-0") and "hybrid" in k and "-k5__" in k)
    assert labels[key] == "para·hybrid·k5"
    assert max(len(v) for v in labels.values()) <= 16


def test_every_stage_sweep_labels_are_unique_and_short(tmp_path):
    sweep = load_sweep(ROOT / "examples" / "sweeps" / "every_stage.yaml")
    labels = short_labels(sweep.configs)
    assert len(set(labels.values())) == len(labels)
    assert all(len(v) < len(k) / 2 for k, v in labels.items())


def test_a_single_config_is_labelled_by_its_retrieval():
    sweep = load_sweep(ROOT / "examples" / "sweeps" / "example.yaml")
    (label,) = short_labels(sweep.configs[:1]).values()
    assert label == "vector·k2"
