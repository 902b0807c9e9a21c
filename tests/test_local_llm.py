"""Every LLM stage against a real model: llama.cpp's server with the packaged Gemma 3 270M (the local-llm
extra; tests/servers.py), not the stub that answers at once in the format asked for (tests/openai_stub.py).

A small model answers late, out of format and past its context. Each reply must be used or counted as
fallen back, never silently defaulted: a proxy keeps what the server answered, and every count the product
reports (the board, MLflow, the saved rows) is checked against a count made here from those replies.
The server never outlives what started it: a `with` block, the session, or `python -m resources.local_llm`.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter

import mlflow
import polars as pl
import pytest

from resources.llm import LLMClient
from resources.local_llm import MODEL
from tests.conftest import ROOT, write_sweep
from tests.servers import RecordingProxy, local_llm, prompt_of, reply_text

# the stack tier: every test starts llama-server (the session's, or one of its own)
pytestmark = [pytest.mark.slow, pytest.mark.stack]

# how each stage's prompt (rag_core/planning/prompts.py, rag_core/metrics/judge.py) starts or ends
GENERATION = "Answer the question using only the context."
JUDGE = "You are grading a question-answering system."
REWRITE = "Rewrite the question into a short, specific search query"
RERANK = "Rank the passages by how useful they are to answer the question."
COMPRESS = "Copy the sentences of the passage that help answer the question"
HOPS = ("ENOUGH:", "NEXT QUERY:")
# and the prompts outside a sweep's stages: a QA set's question writer (rag_core/data/qa/generation.py) and
# GEPA's reflection (its default instruction proposal)
WRITE_QA = "Write one question that the passage below answers, and its answer."
REFLECTION = "I provided an assistant with the following instructions to perform a task for me:"


STARTS = {
    "generation": GENERATION,
    "judge": JUDGE,
    "rewrite": REWRITE,
    "rerank": RERANK,
    "compress": COMPRESS,
}


def _kind(exchange: dict) -> str:
    """The sweep stage whose prompt the exchange holds; `other`: none a stage writes."""
    prompt = prompt_of(exchange)
    kind = next((kind for kind, start in STARTS.items() if prompt.startswith(start)), None)
    return kind or ("hops" if prompt.rstrip().endswith(HOPS) else "other")


def _asked(prompt: str) -> str:
    """The question a stage's prompt asks about (its `QUESTION:` or `Question:` line)."""
    return re.search(r"^(?:QUESTION|Question): (.*)$", prompt, re.M).group(1)


def _client(server, proxy: RecordingProxy, in_flight: int = 2) -> LLMClient:
    # no retries and no cache: each of the product's calls is one exchange the proxy saw
    return LLMClient(
        api_base=proxy.api_base,
        api_key=server.api_key,
        max_retries=0,
        max_concurrency=in_flight,
        timeout_s=120,
    )


def _alive(pid: int) -> bool:
    """Whether the process runs (a zombie has ended: only its parent has not looked yet)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


# ---- one sweep with every stage, through the recording proxy ---------------------------------------


QUESTIONS = 4  # a few hundred tokens a call at tens of tokens a second on a busy core: every call counts


@pytest.fixture(scope="module")
def real_run(local_llm_server, tmp_path_factory):
    """4 questions, 2 configs: a rewritten query, or a 2-hop loop the model steers; each answered by the
    model, and each answer judged by the model. Short chunks keep the prompts short."""
    from rag_sweep.runner import run_sweep
    from tests.conftest import _write_slice

    root = tmp_path_factory.mktemp("local_llm")
    spec = write_sweep(
        root / "local.yaml",
        _write_slice(root, QUESTIONS, 6),
        name="local_llm",
        chunking={"method": "recursive", "chunk_size": 400, "chunk_overlap": 0},
        retrieval=[
            {"mode": "bm25", "top_k": 2, "query_transform": "rewrite", "query_model": MODEL},
            {"mode": "bm25", "top_k": 1, "max_hops": 2, "hop_policy": "llm", "hop_model": MODEL},
        ],
        generation={"model": MODEL, "max_tokens": 16},
        evaluation={"judge_model": MODEL},
    )
    before = local_llm_server.metrics()
    t0 = time.perf_counter()
    with RecordingProxy(local_llm_server.api_base) as proxy:
        run = run_sweep(
            str(spec), str(root / "data"), progress=False, resources={"llm": _client(local_llm_server, proxy)}
        )
    seconds = time.perf_counter() - t0
    after = local_llm_server.metrics()
    spent = {k: after[k] - before.get(k, 0.0) for k in after if k.endswith("_total")}
    print(
        f"\nlocal LLM sweep: {len(proxy.exchanges)} calls in {seconds:.0f} s; server: "
        f"{spent.get('prompt_tokens_total', 0):.0f} prompt tokens in {spent.get('prompt_seconds_total', 0):.1f} s, "
        f"{spent.get('tokens_predicted_total', 0):.0f} generated in "
        f"{spent.get('tokens_predicted_seconds_total', 0):.1f} s"
    )
    return {"run": run, "exchanges": proxy.exchanges, "spent": spent}


def _board(real_run) -> list[dict]:
    return list(real_run["run"].board.iter_rows(named=True))


def _of(real_run, starts: str = "", ends: str | tuple[str, ...] = "") -> list[dict]:
    """The exchanges of a sweep (`real_run`, `reranked_run`) whose prompt starts and ends so."""
    return [
        e
        for e in real_run["exchanges"]
        if prompt_of(e).startswith(starts) and prompt_of(e).rstrip().endswith(ends)
    ]


def _tokens(batch: list[dict]) -> int:
    """The tokens of the replies the product used: a reply that came back empty is a failed call, and its
    usage is not counted (resources/llm.py), though a provider bills it."""
    used = [e for e in batch if (reply_text(e) or "").strip()]
    return sum(e["reply"]["usage"]["total_tokens"] for e in used)


def _by_prompt(batch: list[dict]) -> dict[str, dict]:
    """The exchanges by their prompt, each prompt asked once."""
    prompts = {prompt_of(e): e for e in batch}
    assert len(prompts) == len(batch), "a prompt was asked twice"
    return prompts


def _logged(run, key: str) -> dict[str, float]:
    """The metrics MLflow holds for config `key`'s run."""
    client = mlflow.MlflowClient(run.defs.resources["tracking"].resolved_uri())
    exp = client.get_experiment_by_name(run.plan.sweep.name)
    (logged,) = client.search_runs([exp.experiment_id], f"tags.config_key = '{key}'")
    return logged.data.metrics


def _share(row: dict, stage: str, failed: str, calls: str, counts: bool = True) -> None:
    """The board's share of the stage's failed calls is theirs, and over 10% the config is not ranked
    (a judge's: where it `counts`, its metric weighted)."""
    from rag_core.decision.qualification import MAX_ERROR_SHARE

    share = row[failed] / row[calls] if row[calls] else 0.0
    assert row[f"failed_share_{stage}"] == pytest.approx(share), (row["config_key"], stage)
    if share > MAX_ERROR_SHARE and counts:
        assert row["too_many_errors"] and stage in row["failed_stages"], row["config_key"]
    if not counts:
        assert stage not in row["failed_stages"], row["config_key"]


def test_every_call_is_one_the_server_answered_and_the_tokens_are_its(real_run):
    """Each call the stages made is a reply of the server's (no retries, no cache here), and the tokens
    the board reports for a stage are those the server's replies counted."""
    exchanges = real_run["exchanges"]
    kinds = Counter(_kind(e) for e in exchanges)
    assert kinds["other"] == 0 and kinds["rewrite"] == QUESTIONS
    assert kinds["generation"] == 2 * QUESTIONS
    assert kinds["rerank"] == kinds["compress"] == 0  # (reranked_run's stages)
    assert all(e["request"]["model"] == MODEL.split("/", 1)[1] for e in exchanges)

    board = _board(real_run)
    assert sum(r["tokens_generation"] for r in board) == _tokens(_of(real_run, GENERATION))
    assert sum(r["tokens_judge"] for r in board) == _tokens(_of(real_run, JUDGE))
    assert sum(r["tokens_query_transform"] for r in board) == _tokens(_of(real_run, REWRITE))
    assert sum(r.get("tokens_hops") or 0 for r in board) == _tokens(_of(real_run, ends=HOPS))
    assert sum(r["tokens_rerank"] + r["tokens_context"] for r in board) == 0
    assert real_run["spent"]["prompt_tokens_total"] > 0  # the server's own counters moved


def test_generation_uses_every_reply_or_counts_it_as_an_error(real_run):
    """Each answer is the text of one of the server's replies, or an empty answer with its error, counted
    in n_generation_errors (the board and MLflow alike); never a default."""
    run, plan = real_run["run"], real_run["run"].plan
    replies = [reply_text(e) for e in _of(real_run, GENERATION)]
    failed = sum(1 for t in replies if not (t or "").strip())
    answers = pl.concat([run.artifact("answers", plan.key_of(c)) for c in plan.configs])
    assert answers.height == len(replies) == 2 * QUESTIONS
    used = answers.filter(pl.col("error").is_null())
    assert Counter(used["answer"]) == Counter(t.strip() for t in replies if (t or "").strip())
    assert (used["answer"].str.strip_chars() != "").all()
    errors = answers.filter(pl.col("error").is_not_null())
    assert errors.height == failed and (errors["answer"] == "").all()
    board = {r["config_key"]: r for r in _board(real_run)}
    assert sum(r["n_generation_errors"] for r in board.values()) == failed
    client = mlflow.MlflowClient(run.defs.resources["tracking"].resolved_uri())
    exp = client.get_experiment_by_name("local_llm")
    for key, row in board.items():
        (logged,) = client.search_runs([exp.experiment_id], f"tags.config_key = '{key}'")
        assert logged.data.metrics["n_generation_errors"] == row["n_generation_errors"], key
        assert row["n_generation_calls"] == QUESTIONS
        _share(row, "generation", "n_generation_errors", "n_generation_calls")
    print(f"\ngeneration: {failed} of {len(replies)} replies empty or failed")


def test_a_judge_verdict_is_parsed_or_counted_and_an_unparsable_judge_is_not_trusted(real_run):
    """Each judge score is the number the server's reply holds; a reply with none is no score (null,
    counted in n_judge_failures), and a judge failing more than 10% of its calls leaves its config
    unranked where its metric is weighted."""
    from rag_core.decision.qualification import judge_is_weighted
    from rag_core.metrics.judge import parse_verdict

    run, plan = real_run["run"], real_run["run"].plan
    replies = [reply_text(e) for e in _of(real_run, JUDGE)]
    verdicts = [None if t is None else parse_verdict(t) for t in replies]
    unparsed = sum(v is None for v in verdicts)
    scores, failures, empty = [], 0, 0
    for key in plan.config_keys:
        per_query = run.artifact("evaluations", key, "per_query")
        answers = run.artifact("answers", plan.key_of(plan.config(key)))
        # an empty answer is scored 0 without a call
        no_call = set(answers.filter(pl.col("answer").str.strip_chars() == "")["query_id"])
        empty += len(no_call)
        judged = per_query.filter(~pl.col("query_id").is_in(list(no_call)))["faithfulness_judge"]
        scores += judged.drop_nulls().to_list()
        failures += judged.null_count()
    assert len(replies) == 2 * QUESTIONS - empty  # a call per non-empty answer
    assert failures == unparsed
    assert Counter(scores) == Counter(v for v in verdicts if v is not None)
    board = _board(real_run)
    assert sum(r["n_judge_failures"] for r in board) == unparsed
    counts = judge_is_weighted(plan.sweep.weights)  # unweighted, its failures set nothing aside
    for row in board:
        assert row["n_judge_calls"] == QUESTIONS
        _share(row, "judge", "n_judge_failures", "n_judge_calls", counts)
    print(f"\njudge: {unparsed} of {len(replies)} verdicts unparsed; replies e.g. {replies[:3]}")


def test_a_rewritten_query_is_searched_or_the_question_is_and_that_is_counted(real_run):
    from rag_core.retrieval.query_transform import parse_reply

    run, plan = real_run["run"], real_run["run"].plan
    exchanges = _of(real_run, REWRITE)
    parsed = {_asked(prompt_of(e)): parse_reply("rewrite", reply_text(e) or "") for e in exchanges}
    config = next(c for c in plan.configs if c.retrieval.query_transform == "rewrite")
    retrieved = run.artifact("retrievals", plan.key_of(config, "retrievals"))
    qa = run.artifact("qa_set")
    question = dict(zip(qa["query_id"], qa["question"], strict=True))
    for r in retrieved.iter_rows(named=True):
        asked = question[r["query_id"]]
        if parsed[asked]:
            assert r["queries"] == parsed[asked] and not r["transform_fallback"]
        else:  # nothing usable came back: the question itself was searched
            assert r["queries"] == [asked] and r["transform_fallback"]
    fell_back = sum(not p for p in parsed.values())
    for row in _board(real_run):
        if "-rw-" in row["config_key"]:
            assert row["n_query_transform_fallbacks"] == fell_back
            _share(row, "query_transform", "n_query_transform_fallbacks", "n_query_transform_calls")
    print(f"\nrewrite: {fell_back} of {len(parsed)} fell back; e.g. {list(parsed.values())[:3]}")


def test_the_hop_policy_stops_and_counts_each_decision_it_could_not_read(real_run):
    """Every question's loop ends within max_hops with a reason; the model's YES stops it there; each reply
    that is neither YES nor NO, or an empty next query, falls back to the names rule and is counted."""
    from rag_core.retrieval.hops import STOPS, parse_yes

    run, plan = real_run["run"], real_run["run"].plan
    sufficiency = _of(real_run, ends="ENOUGH:")
    refine = _of(real_run, ends="NEXT QUERY:")
    unread = sum(parse_yes(reply_text(e) or "") is None for e in sufficiency)
    unread += sum(not (reply_text(e) or "").strip() for e in refine)
    said_yes = {_asked(prompt_of(e)) for e in sufficiency if parse_yes(reply_text(e) or "")}
    config = next(c for c in plan.configs if c.retrieval.max_hops == 2)
    retrieved = run.artifact("retrievals", plan.key_of(config, "retrievals"))
    qa = run.artifact("qa_set")
    question = dict(zip(qa["query_id"], qa["question"], strict=True))
    assert retrieved["hops"].max() <= 2 and set(retrieved["hop_stop"]) <= set(STOPS)
    assert retrieved["hop_calls"].sum() == len(sufficiency) + len(refine)
    assert retrieved["hop_fallbacks"].sum() == unread
    for r in retrieved.iter_rows(named=True):
        if question[r["query_id"]] in said_yes:
            assert r["hop_stop"] == "sufficient", r["query_id"]
    for row in _board(real_run):
        if plan.config(row["config_key"]).retrieval.max_hops == 2:
            assert row["hop_llm_calls"] == len(sufficiency) + len(refine)
            assert row["n_hop_fallbacks"] == unread
            _share(row, "hops", "n_hop_fallbacks", "hop_llm_calls")
    stops = Counter(retrieved["hop_stop"])
    print(f"\nhops: {unread} of {len(sufficiency) + len(refine)} decisions unread; stops {dict(stops)}")


# ---- LLM reranking and context compression: a sweep of their own ------------------------------------

RERANKED = 2  # questions: the model writes each reply of these two stages to its token limit


@pytest.fixture(scope="module")
def reranked_run(local_llm_server, tmp_path_factory):
    """2 questions, 1 config: the model orders the 2 candidates BM25 found (rerank: llm), compresses the
    one kept (generation.context: compress), then answers. A sweep of its own: this model writes reranking
    and compression replies to their limit (128 and 256 tokens, 15 to 50 s each on 2 busy cores), and in
    `real_run` both stages would cross both configs (47 calls, 280 s instead of 27 calls, 60 s)."""
    from rag_sweep.runner import run_sweep
    from tests.conftest import _write_slice

    root = tmp_path_factory.mktemp("local_llm_rerank")
    spec = write_sweep(
        root / "reranked.yaml",
        _write_slice(root, RERANKED, 2),
        name="local_llm_rerank",
        chunking={"method": "recursive", "chunk_size": 400, "chunk_overlap": 0},
        retrieval={"mode": "bm25", "top_k": 1},
        rerank={"method": "llm", "model": MODEL, "candidates": 2},
        generation={"model": MODEL, "max_tokens": 16, "context": "compress", "context_model": MODEL},
    )
    t0 = time.perf_counter()
    with RecordingProxy(local_llm_server.api_base) as proxy:
        run = run_sweep(
            str(spec), str(root / "data"), progress=False, resources={"llm": _client(local_llm_server, proxy)}
        )
    print(f"\nrerank and compression sweep: {len(proxy.exchanges)} calls in {time.perf_counter() - t0:.0f} s")
    (config,) = run.plan.configs
    return {"run": run, "exchanges": proxy.exchanges, "config": config}


def _only_numbers(text: str) -> bool:
    """Whether a reranking reply is passage numbers alone (`3, 1, 2`, `[2] > [1]`), not prose."""
    return re.fullmatch(r"[\s\d\[\],;.>]*", text) is not None


def test_an_llm_reranking_keeps_the_order_each_reply_gives_or_the_retrieval_order_counted(reranked_run):
    """Each question's candidates are asked once; the kept chunks are those the reply orders first (read by
    parse_ordering), or, when it names no candidate, the retrieval's first, counted in n_rerank_fallbacks
    (the saved rows, the board and MLflow alike); the tokens are those of the replies."""
    from rag_core.retrieval.rerank import context_k, llm_rerank_prompt, parse_ordering

    run, config = reranked_run["run"], reranked_run["config"]
    kinds = Counter(_kind(e) for e in reranked_run["exchanges"])
    assert kinds["rerank"] == RERANKED and set(kinds) <= {"rerank", "compress", "generation"}
    asked = _by_prompt(_of(reranked_run, RERANK))
    qa = run.artifact("qa_set")
    question = dict(zip(qa["query_id"], qa["question"], strict=True))
    retrieved = run.artifact("retrievals", run.plan.key_of(config, "retrievals"))
    reranked = run.artifact("rerankings", run.plan.key_of(config, "rerankings"))
    kept = {r["query_id"]: r for r in reranked.iter_rows(named=True)}
    replies, fell_back = [], 0
    for r in retrieved.iter_rows(named=True):
        n = len(r["texts"])
        assert n == config.rerank.candidates  # each question's candidates, as many as asked for
        text = reply_text(
            asked.pop(llm_rerank_prompt(question[r["query_id"]], r["texts"], config.rerank.template))
        )
        order = parse_ordering(text or "", n)
        replies.append(text)
        fell_back += order is None
        first = (order or list(range(n)))[: context_k(config, r)]
        row = kept[r["query_id"]]
        assert row["chunk_ids"] == [r["chunk_ids"][i] for i in first], r["query_id"]
        assert row["texts"] == [r["texts"][i] for i in first]
        assert row["rerank_fallback"] == (order is None)
    assert not asked  # every reply was one question's
    (row,) = _board(reranked_run)
    assert row["n_rerank_calls"] == RERANKED and row["n_rerank_fallbacks"] == fell_back
    assert row["tokens_rerank"] == _tokens(_of(reranked_run, RERANK))
    assert _logged(run, row["config_key"])["n_rerank_fallbacks"] == fell_back
    _share(row, "rerank", "n_rerank_fallbacks", "n_rerank_calls")
    prose = sum(not _only_numbers(t or "") for t in replies)
    print(
        f"\nrerank: {fell_back} of {len(replies)} fell back; {prose} of {len(replies)} orders read out of "
        f"replies that are not passage numbers alone, e.g. {replies[:1]}"
    )


def test_each_compressed_passage_is_the_reply_or_the_passage_kept_and_counted(reranked_run):
    """Each passage the generator was to see is asked about once; it is replaced by the reply, dropped when
    the reply is NONE, or kept whole when no text came back or the text is not the passage's own words,
    counted in n_context_compression_fallbacks
    (the saved rows, the board and MLflow alike); the generator's prompt holds what was kept."""
    from rag_core.generation.context import compress_prompt, parse_compressed

    run, config = reranked_run["run"], reranked_run["config"]
    asked = _by_prompt(_of(reranked_run, COMPRESS))
    calls = len(asked)
    answered = {_asked(prompt_of(e)): prompt_of(e) for e in _of(reranked_run, GENERATION)}
    qa = run.artifact("qa_set")
    question = dict(zip(qa["query_id"], qa["question"], strict=True))
    reranked = {
        r["query_id"]: r
        for r in run.artifact("rerankings", run.plan.key_of(config, "rerankings")).iter_rows(named=True)
    }
    answers = run.artifact("answers", run.plan.key_of(config))
    assert answers.height == len(answered) == RERANKED
    fell_back, dropped, kept, copied = 0, 0, 0, 0
    for a in answers.iter_rows(named=True):
        asking = question[a["query_id"]]
        expected, fallbacks = [], 0
        for passage in reranked[a["query_id"]]["texts"]:
            prompt = compress_prompt(asking, passage, config.generation.context_prompt)
            # the built-in prompt's reply is held to the passage's own words
            short = parse_compressed(reply_text(asked.pop(prompt)) or "", passage)
            fallbacks += short is None
            dropped += short == ""
            if short:
                kept += 1
                copied += short in passage
            if short != "":
                expected.append(passage if short is None else short)
        assert a["context_texts"] == expected, a["query_id"]
        assert a["context_fallbacks"] == fallbacks
        assert a["context_calls"] == len(reranked[a["query_id"]]["texts"])
        assert all(text in answered[asking] for text in expected)  # what the generator was shown
        fell_back += fallbacks
    assert not asked  # every reply was one passage's
    (row,) = _board(reranked_run)
    assert row["n_context_compression_calls"] == calls
    assert row["n_context_compression_fallbacks"] == fell_back
    assert row["tokens_context"] == _tokens(_of(reranked_run, COMPRESS))
    assert _logged(run, row["config_key"])["n_context_compression_fallbacks"] == fell_back
    _share(row, "context_compression", "n_context_compression_fallbacks", "n_context_compression_calls")
    print(
        f"\ncompression: {fell_back} of {calls} fell back, {dropped} NONE; {copied} of {kept} kept texts are "
        f"in their passage word for word; e.g. {[reply_text(e) for e in _of(reranked_run, COMPRESS)][:1]}"
    )


# ---- QA generation and prompt optimization -----------------------------------------------------------


def test_qa_generation_uses_each_reply_or_counts_it_and_keeps_to_its_budget(
    local_llm_server, tmp_path, monkeypatch, capsys
):
    """`rag-sweep generate-qa`, 1 factoid question within 2 calls: each reply to the question writer is
    parsed into a question (then checked by the model) or counted malformed, a failed call counted failed,
    every candidate kept or counted rejected, and no call past the budget; with nothing kept nothing is
    written and the error gives the counts, as the server's replies make them."""
    import ast

    from rag_core.data.qa.generation import parse_reply
    from rag_sweep.cli import main
    from tests.conftest import _write_slice

    corpus = _write_slice(tmp_path, QUESTIONS, 6)["corpus"]
    out = tmp_path / "generated.jsonl"
    with RecordingProxy(local_llm_server.api_base) as proxy:
        for name, value in (
            ("RAG_LLM_API_BASE", proxy.api_base),
            ("RAG_LLM_API_KEY", local_llm_server.api_key),
            ("RAG_LLM_MAX_RETRIES", "0"),  # each call one exchange, as _client's
            ("RAG_LLM_MAX_CONCURRENCY", "2"),
            ("RAG_LLM_TIMEOUT_S", "120"),
        ):
            monkeypatch.setenv(name, value)
        args = ["generate-qa", str(corpus), "--model", MODEL, "--out", str(out), "--questions", "1"]
        code = main([*args, "--types", "factoid=1", "--max-calls", "2", "--data-dir", str(tmp_path / "d")])
    printed = capsys.readouterr()
    exchanges = proxy.exchanges
    written = [reply_text(e) for e in exchanges if prompt_of(e).startswith(WRITE_QA)]
    usable = [t for t in written if (t or "").strip()]
    questions = [q for q in (parse_reply(t, "factoid") for t in usable) if q is not None]
    failed = sum(not (reply_text(e) or "").strip() for e in exchanges)
    assert written and len(exchanges) <= 2
    if code == 1:  # nothing kept: nothing written, and the error says the counts
        assert not out.exists()
        kept = []
        said = re.search(
            r"\((?P<calls>\d+) calls, (?P<failed>\d+) failed, (?P<malformed>\d+) malformed replies, "
            r"rejected: (?P<rejected>\{.*?\})\)",
            printed.err,
        )
    else:
        assert code == 0, printed.err
        kept = [json.loads(line)["question"] for line in out.read_text().splitlines()]
        assert set(kept) <= {q for q, _ in questions}  # a question the model wrote
        said = re.search(
            r"rejected: (?P<rejected>\{.*?\}|none)\n  calls: (?P<calls>\d+) \((?P<failed>\d+) failed, "
            r"(?P<malformed>\d+) malformed",
            printed.out,
        )
    assert said, printed
    calls, failures, malformed = int(said["calls"]), int(said["failed"]), int(said["malformed"])
    rejected = ast.literal_eval(said["rejected"].replace("none", "{}"))
    assert (calls, failures, malformed) == (len(exchanges), failed, len(usable) - len(questions))
    assert len(questions) == sum(rejected.values()) + len(kept)  # each candidate kept or counted
    print(
        f"\nqa generation: {calls} calls, {malformed} of {len(usable)} replies malformed, {failures} failed, "
        f"kept {len(kept)}, rejected {rejected}; e.g. {written[:1]}"
    )


def test_a_prompt_optimization_on_the_smallest_budget_tries_a_proposal_and_reports_what_it_found(
    real_run, local_llm_server, tmp_path
):
    """GEPA on the rewrite config's answer prompt (the sweep's own contexts, its 4 questions: 2 to train on,
    2 to validate) with the least budget a sweep accepts, reflected on by the same model: it runs an
    iteration (it used to stop after scoring the seed), never passes the budget, pays one call per reply
    the server sent (no cache here), scores each question with one answer of the server's, a proposal
    without the prompt's placeholders with none, and reports a gain only for a candidate that validated
    better."""
    import litellm
    from gepa.strategies.instruction_proposal import InstructionProposalSignature

    from rag_core.optimization.contexts import Contexts
    from rag_core.optimization.evolve import optimize
    from rag_core.planning.prompts import missing
    from rag_core.planning.spec import OptimizeSpec

    run, plan = real_run["run"], real_run["run"].plan
    config = next(c for c in plan.configs if c.retrieval.query_transform == "rewrite")
    qa = run.artifact("qa_set")
    smallest = OptimizeSpec(reflection_model=MODEL, minibatch=2).min_metric_calls(qa.height)
    spec = OptimizeSpec(reflection_model=MODEL, minibatch=2, budget={"max_metric_calls": smallest})
    said: list[str] = []
    with RecordingProxy(local_llm_server.api_base) as proxy:
        found = optimize(
            config,
            spec,
            qa,
            Contexts(reranked=run.artifact("rerankings", plan.key_of(config, "rerankings"))),
            plan.sweep.weights,
            _client(local_llm_server, proxy),
            lambda t: litellm.token_counter(model=config.generation.model, text=t),
            run_dir=str(tmp_path / "gepa"),
            say=said.append,
        )
    reflections = [e for e in proxy.exchanges if prompt_of(e).startswith(REFLECTION)]
    answers = [e for e in proxy.exchanges if e not in reflections]
    assert any(line.startswith("Iteration 1:") for line in said), said  # past the seed's validation
    assert found.metric_calls <= smallest and found.stopped_by == "max_metric_calls"
    assert (found.paid_calls, found.cached_calls) == (len(proxy.exchanges), 0)
    # GEPA's proposal: the reply's text in its fence (an empty one or a prompt without {context} and
    # {query} scores 0 on its minibatch without a call)
    proposals = [
        InstructionProposalSignature.output_extractor(text.strip())["new_instruction"]
        for text in (reply_text(e) for e in reflections)
        if (text or "").strip()
    ]
    unusable = sum(bool(missing("prompt_template", p)) for p in proposals)
    assert len(answers) == found.metric_calls - unusable * spec.minibatch
    assert all(c.prompts["answer_prompt"] in proposals for c in found.candidates[1:])
    seed, best = found.candidates[0], found.candidates[found.best_index]
    assert found.improved == (found.best_index != 0) and set(seed.val_scores) == set(found.val_ids)
    if found.improved:
        assert best.val_score > seed.val_score and found.best != found.seed
    else:
        assert found.best == found.seed
    print(
        f"\ngepa: {len(reflections)} reflection(s), proposals {proposals!r} ({unusable} without the "
        f"placeholders); validation {seed.val_score:.3f} -> {best.val_score:.3f} "
        f"({'a gain' if found.improved else 'no gain'}); {found.metric_calls} of {smallest} questions scored, "
        f"{found.paid_calls} calls; stopped by {found.stopped_by}"
    )


# ---- a prompt past the context ---------------------------------------------------------------------


def test_a_prompt_longer_than_the_context_is_a_counted_failure_with_its_reason(
    small_slice, tmp_path, monkeypatch
):
    """A server whose slots hold 512 tokens: `plan` warns first, from the server's own context and
    tokenizer, with a longest prompt no prompt of the run exceeds; then a generation prompt past the
    context is refused (HTTP 400), kept as the question's error with the server's reason and counted, not
    answered with a default or a crash; the prompts that fit are answered. The server is gone once stopped."""
    from rag_sweep.runner import run_sweep
    from rag_sweep.runner.estimate import bill
    from resources.llm_context import ModelContext

    server = local_llm(ctx_size=512, parallel=1)
    try:
        spec = write_sweep(
            tmp_path / "small_context.yaml",
            small_slice,
            name="small_context",
            chunking={"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
            retrieval={"mode": "bm25", "top_k": 4},
            generation={"model": MODEL, "max_tokens": 16},
        )
        monkeypatch.setenv("RAG_LLM_API_BASE", server.api_base)
        monkeypatch.setenv("RAG_LLM_API_KEY", server.api_key)
        _, estimate = bill(str(spec), str(tmp_path / "data"))
        warned = [line for line in estimate.context_lines if line.startswith("warning:")]
        assert len(warned) == 1 and "past the 512 that" in warned[0] and "the server's n_ctx" in warned[0], (
            warned
        )
        longest = int(re.search(r"is ([\d,]+) tokens", warned[0]).group(1).replace(",", ""))
        with RecordingProxy(server.api_base) as proxy:
            client = _client(server, proxy, in_flight=1)
            run = run_sweep(str(spec), str(tmp_path / "data"), progress=False, resources={"llm": client})
        endpoint = ModelContext(server.api_base, server.api_key)
        sent = max(endpoint.count(MODEL, prompt_of(e)) for e in proxy.exchanges)
        pid = server.proc.pid
    finally:
        server.stop()
    assert not _alive(pid)
    assert 512 < sent + 16 <= longest  # the run's longest prompt is past the context, and no longer than said
    refused = [e for e in proxy.exchanges if e["status"] == 400]
    assert refused and all("context size" in e["reply"]["error"]["message"] for e in refused)
    empty = [e for e in proxy.exchanges if e["status"] == 200 and not (reply_text(e) or "").strip()]
    answers = run.artifact("answers", run.plan.key_of(run.plan.configs[0]))
    errors = answers.filter(pl.col("error").is_not_null())
    assert len(proxy.exchanges) == answers.height == 8
    assert errors.height == len(refused) + len(empty) and (errors["answer"] == "").all()
    assert errors.filter(pl.col("error").str.contains("context size")).height == len(refused)
    row = run.board.row(0, named=True)
    assert row["n_generation_errors"] == errors.height
    assert row["too_many_errors"] == (errors.height / 8 > 0.1)
    print(f"\n512-token context: {len(refused)} of {len(proxy.exchanges)} prompts refused")


# ---- the server never outlives what started it ------------------------------------------------------


def _wrapper_env(mark: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RAG_LLM_MAX_CONCURRENCY", "RAG_LLM_MAX_RETRIES")}
    return {**env, "RAG_TEST_MARK": mark}


def test_the_command_wrapper_gives_the_address_and_stops_the_server_when_the_command_ends():
    from tests.test_no_process_left import _left_by

    mark = f"local-llm-{uuid.uuid4().hex}"
    probe = (  # what the command sees: the address, the slots, and a server that answers with its key
        "import json, os, urllib.request as u; "
        "base = os.environ['RAG_LLM_API_BASE']; "
        "print(base, os.environ['RAG_LLM_MAX_CONCURRENCY'], os.environ['RAG_LLM_MAX_RETRIES']); "
        "auth = {'Authorization': 'Bearer ' + os.environ['RAG_LLM_API_KEY']}; "
        "print(json.load(u.urlopen(u.Request(base + '/models', headers=auth)))['data'][0]['id']); "
        "props = json.load(u.urlopen(u.Request(base[:-3] + '/props', headers=auth))); "
        "print(props['default_generation_settings']['params']['ignore_eos'])"
    )
    wrapper = subprocess.Popen(
        [
            *(sys.executable, "-m", "resources.local_llm", "--port", "0"),
            "--server-args=--ignore-eos",  # a llama-server flag of the user's, passed on
            *("--", sys.executable, "-c", probe),
        ],
        cwd=ROOT,
        env=_wrapper_env(mark),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = wrapper.communicate(timeout=180)
    if wrapper.returncode == 2 and "local-llm extra" in err:
        pytest.skip(err.strip())
    assert wrapper.returncode == 0, err
    base, slots, retries, model, ignore_eos = out.split()
    assert base.startswith("http://127.0.0.1:") and base.endswith("/v1")
    assert (slots, retries) == ("2", "0")  # calls in flight as the server has slots; no retries
    assert model == MODEL.split("/", 1)[1]
    assert ignore_eos == "True"
    assert _left_by(wrapper.pid, f"RAG_TEST_MARK={mark}".encode()) == {}


def test_sigterm_to_the_wrapper_stops_its_command_and_the_server():
    from tests.test_no_process_left import _left_by

    mark = f"local-llm-{uuid.uuid4().hex}"
    wrapper = subprocess.Popen(
        [sys.executable, "-m", "resources.local_llm", "--port", "0", "--", "sleep", "600"],
        cwd=ROOT,
        env=_wrapper_env(mark),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while "ready" not in (line := wrapper.stderr.readline()):
        if not line and wrapper.poll() is not None:
            err = wrapper.stderr.read()
            if wrapper.returncode == 2 and "local-llm extra" in line + err:
                pytest.skip(line + err)
            pytest.fail(f"the wrapper ended: {line}{err}")
        assert time.monotonic() < deadline
    wrapper.send_signal(signal.SIGTERM)
    assert wrapper.wait(timeout=30) == 128 + signal.SIGTERM
    assert _left_by(wrapper.pid, f"RAG_TEST_MARK={mark}".encode()) == {}
