"""The embedding cache keeps what a killed run embedded and never trusts a damaged part."""

from __future__ import annotations

import numpy as np
import pytest

from resources.embedders import EmbeddingService

MODEL = "all-MiniLM-L6-v2"
TEXTS = [f"passage number {i} about topic {i % 3}" for i in range(10)]


class Killed(Exception):
    pass


def _service(tmp_path) -> EmbeddingService:
    return EmbeddingService(cache_dir=str(tmp_path / "cache"), batch_size=2, checkpoint_texts=4)


def test_a_killed_embedding_keeps_its_checkpoints_and_the_rerun_embeds_only_the_rest(tmp_path):
    service = _service(tmp_path)

    def kill_after_six(done: int, total: int) -> None:
        if done >= 6:
            raise Killed  # dies in the second checkpoint's block

    with pytest.raises(Killed):
        service.embed(MODEL, TEXTS, kill_after_six)
    parts = sorted((tmp_path / "cache").rglob("*.parquet"))
    assert len(parts) == 1  # the first 4 texts survived as a whole part; the half-done block left nothing

    vectors, stats = service.embed(MODEL, TEXTS)
    assert stats.embedded == 6  # only the texts the killed run had not saved
    fresh, _ = EmbeddingService(cache_dir=str(tmp_path / "other")).embed(MODEL, TEXTS)
    np.testing.assert_allclose(vectors, fresh, atol=1e-5)
    assert len(list((tmp_path / "cache").rglob("*.parquet"))) == 3  # 4 + 4 + 2 texts


def test_a_damaged_cache_part_is_set_aside_and_its_texts_embedded_again(tmp_path):
    service = _service(tmp_path)
    vectors, _ = service.embed(MODEL, TEXTS)
    part = sorted((tmp_path / "cache").rglob("*.parquet"), key=lambda p: p.stat().st_mtime)[0]
    part.write_bytes(part.read_bytes()[:100])  # cut short, as a full disk would leave it

    again, stats = _service(tmp_path).embed(MODEL, TEXTS)  # a new run: nothing parsed in memory for it
    assert stats.embedded == 4  # the damaged part's texts, no more
    np.testing.assert_allclose(again, vectors, atol=1e-5)
    assert part.with_suffix(".damaged").exists() and not part.exists()


def test_a_local_model_replaced_under_the_same_path_is_another_model(tmp_path, slice_data, monkeypatch):
    """Replaced weights under one folder: new vectors (not the cache's), a new embeddings fingerprint."""
    import shutil

    # the model's ONNX exports (one per weights) go to this test's folder, not the user's cache
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))

    from sentence_transformers import SentenceTransformer

    from rag_core.common.local_models import weights_path
    from rag_core.planning.plan import Plan
    from rag_core.planning.spec import load_sweep
    from tests.conftest import write_sweep

    folder = tmp_path / "my-model"
    shutil.copytree(weights_path(MODEL), folder)
    sweep = write_sweep(
        tmp_path / "s.yaml",
        slice_data,
        embedding={"model": str(folder)},
        chunking={"method": "recursive", "chunk_size": 64, "chunk_overlap": 0, "unit": "tokens"},
        retrieval={"mode": "vector", "top_k": 3},
    )

    def fingerprints() -> dict[str, str]:
        fps = Plan.resolve(load_sweep(sweep)).fingerprints({"corpus": "c", "qa_set": "q"})
        return {stage: fp for (stage, _), fp in fps.items()}

    before, (old, _) = fingerprints(), _service(tmp_path).embed(str(folder), TEXTS)

    model = SentenceTransformer(str(folder), device="cpu")  # other weights, saved where the old ones were
    for p in model.parameters():
        p.data.add_(0.05 * torch_randn_like(p.data))
    model.save(str(folder))

    after, (new, stats) = fingerprints(), _service(tmp_path).embed(str(folder), TEXTS)
    assert stats.embedded == len(TEXTS)  # the old model's vectors were not served
    assert not np.allclose(new, old, atol=1e-3)
    # the chunkset (cut by the model's tokenizer), the embeddings and all below them are new artifacts
    assert after["chunksets"] != before["chunksets"] and after["embeddings"] != before["embeddings"]
    assert after["evaluations"] != before["evaluations"]


def torch_randn_like(t):
    import torch

    g = torch.Generator().manual_seed(0)
    return torch.randn(t.shape, generator=g, dtype=t.dtype)


def test_token_counts_are_the_tokenizers_and_each_text_is_tokenized_once(tmp_path, monkeypatch):
    from resources.local_encoders import local_encoder

    monkeypatch.setattr("resources.embedders._TOKEN_COUNTS", {})  # what other tests counted is not seen
    service = _service(tmp_path)
    longer = "a longer passage, with more words in it"
    tokenizer = local_encoder(MODEL, "torch").model.tokenizer  # the model's own (transformers) tokenizer
    direct = [len(ids) for ids in tokenizer(TEXTS + [longer])["input_ids"]]
    assert service.token_counts(MODEL, TEXTS[:4]) == direct[:4]
    calls = []
    encoder = service.encoder(MODEL)
    original = encoder.token_counts

    def counting(texts):
        calls.append(list(texts))
        return original(texts)

    monkeypatch.setattr(encoder, "token_counts", counting)
    mixed = [TEXTS[2], longer, TEXTS[0], TEXTS[7]]
    assert service.token_counts(MODEL, mixed) == [direct[2], direct[10], direct[0], direct[7]]
    assert calls == [[longer, TEXTS[7]]]  # only the texts not seen yet
