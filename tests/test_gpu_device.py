"""The local models on a CUDA device: skipped where torch sees none (CI), run on a GPU machine.

Light on purpose (numpy, torch, sentence-transformers; no polars or Dagster), so it runs on a bare GPU
machine with `--noconftest`. `RAG_GPU_TEST_MODEL` names a sentence-transformers folder to use instead of
the packaged all-MiniLM-L6-v2 (a machine without the project's packages)."""

from __future__ import annotations

import json
import logging
import os

import numpy as np
import pytest

from resources import devices, encoder_check
from resources import local_encoders as le
from tests.test_local_encoders import HELD_OUT  # texts the check never saw

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")
MODEL = os.environ.get("RAG_GPU_TEST_MODEL") or "all-MiniLM-L6-v2"


@pytest.fixture(autouse=True)
def fresh(monkeypatch, tmp_path):
    monkeypatch.setattr(le, "_ENCODERS", {})
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    devices.resolve_device.cache_clear()


def test_auto_takes_the_gpu_and_a_device_it_lacks_is_one_clear_error():
    gpu = devices.resolve_device("auto")
    assert gpu.name == "cuda:0" and torch.cuda.get_device_name(0) in gpu.label and "auto" in gpu.why
    assert devices.resolve_device("cuda") == devices.Device(
        "cuda:0", gpu.label, gpu.why.replace("auto", "cuda")
    )
    missing = f"cuda:{torch.cuda.device_count()}"
    with pytest.raises(devices.DeviceUnavailable, match=rf"RAG_DEVICE={missing}: .*cuda:0\.\.cuda:"):
        devices.resolve_device(missing)


def test_the_gpu_encoder_computes_the_cpus_vectors_in_a_batch_measured_to_fit():
    from resources.gpu_encoders import record_path

    gpu = devices.resolve_device("cuda")
    encoder = le.local_encoder(MODEL, "onnx", ["the first text of a run", "and a second one, longer"], gpu)
    assert (
        encoder.backend == "torch" and encoder.device == gpu and encoder.precision in ("float16", "float32")
    )
    record = json.loads(record_path(MODEL, gpu).read_text())
    assert record["checks"][encoder.precision]["passed"] and encoder.batch_size == record["batch_size"] >= 16
    assert max(record["batches"].values()) * 0.95 <= record["batches"][str(encoder.batch_size)]
    cpu = le.local_encoder(MODEL, "torch")
    ours, theirs = encoder.encode(HELD_OUT), cpu.encode(HELD_OUT)
    assert (ours * theirs).sum(axis=1).min() >= encoder_check.MIN_COSINE
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-6)
    assert "batch" in le.describe(encoder) and gpu.label in le.describe(encoder)
    from resources.environment import TOKENIZER_THREADS_CHOSEN

    if not TOKENIZER_THREADS_CHOSEN:  # the CPU feeds the GPU: the tokenizer on every core
        assert os.environ["TOKENIZERS_PARALLELISM"] == "true"


def test_a_later_process_reads_the_calibration_instead_of_measuring_again(monkeypatch):
    import resources.gpu_encoders as ge

    gpu = devices.resolve_device("cuda")
    first = le.local_encoder(MODEL, "onnx", ["a text"], gpu)
    monkeypatch.setattr(le, "_ENCODERS", {})

    def measured_again(*args):
        raise AssertionError("calibrated twice")

    monkeypatch.setattr(ge, "calibrate", measured_again)
    again = le.local_encoder(MODEL, "onnx", ["a text"], gpu)
    assert (again.precision, again.batch_size) == (first.precision, first.batch_size)


def test_a_model_no_precision_passes_on_the_gpu_is_embedded_on_the_cpu(monkeypatch, caplog):
    monkeypatch.setattr(encoder_check, "MIN_COSINE", 1.5)  # nothing passes
    with caplog.at_level(logging.WARNING):
        encoder = le.local_encoder(MODEL, "torch", ["a text"], devices.resolve_device("cuda"))
    assert not encoder.device.is_cuda
    assert "no precision computes the CPU's vectors" in caplog.text


def test_the_cross_encoder_scores_as_on_the_cpu(tmp_path):
    from transformers import AutoTokenizer, BertForSequenceClassification

    from rag_core.common.local_models import weights_path
    from rag_core.retrieval.cross_encoders import cross_encoder, cross_scores

    torch.manual_seed(0)
    folder = tmp_path / "ce"
    BertForSequenceClassification.from_pretrained(weights_path(MODEL), num_labels=1).save_pretrained(folder)
    AutoTokenizer.from_pretrained(weights_path(MODEL)).save_pretrained(folder)
    pairs = [("who directed Ed Wood?", t) for t in HELD_OUT * 10]
    on_gpu = cross_scores(cross_encoder(str(folder), "cuda:0"), pairs)
    on_cpu = cross_scores(cross_encoder(str(folder), "cpu"), pairs)
    assert np.abs(on_gpu - on_cpu).max() < 1e-4
    assert list(np.argsort(-on_gpu, kind="stable")) == list(np.argsort(-on_cpu, kind="stable"))
