"""The fused encoder graph computes the unfused graph's numbers: it passes the check against the carried
reference and ranks the example's documents for its questions as the unfused graph does. Batches sorted by
token counts keep each text's vector and place, with less padding than batches sorted by characters."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

from rag_core.common.local_models import model_version
from resources import local_encoders as le
from resources.embedders import EmbeddingService
from resources.encoder_check import MIN_COSINE, check
from resources.encoder_reference import ROOT, CarriedReference

MODEL = "all-MiniLM-L6-v2"
DATA = ROOT / "examples" / "data" / "hotpotqa_distractor_100"


@pytest.fixture(scope="module")
def graphs(tmp_path_factory):
    """The model's graph built fused and unfused, outside the cache (~5 s)."""
    root = tmp_path_factory.mktemp("graphs")
    return (
        le.graph_encoder(MODEL, root / "fused"),
        le.graph_encoder(MODEL, root / "unfused", fused=False),
        root,
    )


def by_tokens(encoder, texts: list[str], size: int = 16) -> np.ndarray:
    """Vectors in the texts' order, embedded longest first by tokens in batches of `size` (as the service)."""
    counts = encoder.token_counts(texts)
    order = sorted(range(len(texts)), key=counts.__getitem__, reverse=True)
    out = np.zeros((len(texts), 384), np.float32)
    for start in range(0, len(order), size):
        rows = order[start : start + size]
        out[rows] = encoder.encode([texts[i] for i in rows])
    return out


def test_the_fused_graph_passes_the_check_against_the_carried_reference(graphs):
    fused, unfused, root = graphs
    assert json.loads((root / "fused" / "meta.json").read_text())["fused"] == {"Attention": 6, "BiasGelu": 6}
    assert json.loads((root / "unfused" / "meta.json").read_text())["fused"] == {}
    reference = CarriedReference()
    outcome = check(fused, reference, reference.texts)  # the check a build must pass to be used
    assert outcome["same_tokens"] and outcome["passed"] and outcome["min_cosine"] >= MIN_COSINE
    assert check(unfused, reference, reference.texts)["passed"]


@pytest.mark.slow  # embeds the example's documents with both graphs
def test_the_fused_graph_ranks_the_examples_documents_as_the_unfused_graph(graphs):
    """The first 30 questions' top-5 over 300 of the example's documents: the 60 they need and the first
    others by doc id (~50 s for both graphs on 2 shared cores; benchmarks/fused_encoder.py takes the whole
    corpus)."""
    fused, unfused, _ = graphs
    queries = pl.read_parquet(DATA / "queries.parquet").head(30)
    corpus = pl.read_parquet(DATA / "corpus.parquet")
    needed = set(queries["relevant_doc_ids"].explode().to_list())
    others = corpus.filter(~pl.col("doc_id").is_in(list(needed))).head(300 - len(needed))
    docs = pl.concat([corpus.filter(pl.col("doc_id").is_in(list(needed))), others])["text"].to_list()
    questions = queries["question"].to_list()
    before, after = (by_tokens(e, questions) @ by_tokens(e, docs).T for e in (unfused, fused))
    assert np.abs(after - before).max() < 1e-5  # measured 2.4e-7; the closest 5th and 6th are 3.4e-4 apart
    top = [np.argsort(-scores, axis=1, kind="stable")[:, :5].tolist() for scores in (before, after)]
    assert top[1] == top[0]


def test_batches_by_tokens_keep_each_texts_vector_and_place_with_less_padding(graphs, tmp_path, monkeypatch):
    fused, _, _ = graphs
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))  # the measured rate is written there
    monkeypatch.setattr(le, "_ENCODERS", {(MODEL, model_version(MODEL), "onnx", "cpu"): fused})
    passages = pl.read_parquet(DATA / "corpus.parquet")["text"].to_list()[:24]
    # characters and tokens disagree: digits, CJK and URLs take a token per few characters, words one per many
    texts = (
        passages
        + [
            "Who wrote it?",
            "1998-2004, 12.5%, 3/4, #42",
            "東京と大阪と京都",
            "https://example.org/a/b?c=d&e=f",
            "The quick brown fox jumps over the lazy dog.",
            "Zürich, Kraków, Łódź",
            "a",
            passages[3],  # a text twice: one vector, in both places
        ]
        + [p[: 40 + 7 * i] for i, p in enumerate(passages[:16])]
    )
    service = EmbeddingService(cache_dir=str(tmp_path / "cache"), device="cpu", batch_size=8)
    vectors, stats = service.embed(MODEL, texts)
    alone = np.concatenate([fused.encode([t]) for t in texts])
    assert vectors.shape == (len(texts), 384)
    assert (vectors * alone).sum(axis=1).min() >= 0.99999  # each text's own vector, in its place
    np.testing.assert_array_equal(vectors[3], vectors[24 + 7])

    unique = list(dict.fromkeys(texts))
    tokens = [min(n, fused.max_tokens) for n in fused.token_counts(unique)]

    def share(lengths: list[int]) -> float:  # batches of 8, longest first by `lengths`
        order = sorted(range(len(unique)), key=lengths.__getitem__, reverse=True)
        batches = [[tokens[i] for i in order[s : s + 8]] for s in range(0, len(order), 8)]
        return 1 - sum(tokens) / sum(max(b) * len(b) for b in batches)

    by_characters = share([len(t) for t in unique])
    assert stats.padding_share == pytest.approx(share(tokens))
    assert stats.padding_share < by_characters
    _, again = service.embed(MODEL, texts)  # all cached: nothing computed, no padding to tell
    assert again.embedded == 0 and again.padding_share is None


def test_a_build_that_fails_on_the_install_records_nothing_one_that_fails_on_the_graph_is_recorded(
    tmp_path, monkeypatch
):
    """A library missing from the install (ONNX Runtime's optimizer without sympy) is not the graph's fault:
    nothing is recorded, so the run after the install is repaired builds and checks again. A graph that
    cannot be built is recorded as a failed check, so each run does not try it again."""
    folder = tmp_path / "onnx" / "model"

    def missing(model, out):
        raise ImportError("SymbolicShapeInferenceHelper is unavailable — missing 'sympy'")

    monkeypatch.setattr(le, "_export", missing)
    with pytest.raises(ImportError, match="sympy"):
        le._build("all-MiniLM-L6-v2", folder, ["a text"])
    assert not folder.exists() and list((tmp_path / "onnx").iterdir()) == []

    def unbuildable(model, out):
        raise ValueError("an operator ONNX Runtime does not take")

    monkeypatch.setattr(le, "_export", unbuildable)
    le._build("all-MiniLM-L6-v2", folder, ["a text"])
    outcome = json.loads((folder / "check.json").read_text())
    assert outcome == {"passed": False, "error": "ValueError: an operator ONNX Runtime does not take"}
