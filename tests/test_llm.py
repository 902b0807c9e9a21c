"""The litellm path against a local OpenAI-protocol server (hosted LLMs are unreachable from here)."""

from __future__ import annotations

import time
from pathlib import Path

import dagster as dg
import polars as pl
import pytest

from rag_sweep.runner import run_sweep
from resources.llm import LLMClient
from tests.conftest import write_sweep
from tests.openai_stub import MALFORMED, GoldAnswers, OpenAIStub, TurnsWrong

MODEL = "openai/stub-model"


def test_completion_ok_with_usage():
    with OpenAIStub(lambda p: (200, "Paris", 0.0)) as stub:
        out = LLMClient(api_base=stub.api_base, api_key="sk-test").complete(MODEL, "Capital of France?")
    assert out.text == "Paris" and out.error is None and out.attempts == 1
    assert out.prompt_tokens == 3 and out.completion_tokens == 1
    assert stub.requests[0]["path"] == "/v1/chat/completions"
    assert stub.requests[0]["body"]["model"] == "stub-model"
    assert stub.requests[0]["auth"] == "Bearer sk-test"


def test_failing_request_is_retried_then_recorded():
    with OpenAIStub(lambda p: (500, "boom", 0.0)) as stub:
        client = LLMClient(api_base=stub.api_base, api_key="sk-test", max_retries=2, retry_backoff_s=0.01)
        out = client.complete(MODEL, "q")
    assert out.text == "" and out.attempts == 3
    assert "boom" in out.error or "500" in out.error
    assert len(stub.requests) == 3


def test_recovers_after_a_transient_failure():
    calls = []

    def flaky(prompt):
        calls.append(prompt)
        return (503, "overloaded", 0.0) if len(calls) == 1 else (200, "ok", 0.0)

    with OpenAIStub(flaky) as stub:
        out = LLMClient(api_base=stub.api_base, api_key="k", max_retries=2, retry_backoff_s=0.01).complete(
            MODEL, "q"
        )
    assert out.text == "ok" and out.error is None and out.attempts == 2


def test_slow_request_times_out_and_is_recorded():
    with OpenAIStub(lambda p: (200, "late", 3.0)) as stub:
        client = LLMClient(
            api_base=stub.api_base, api_key="k", timeout_s=0.5, max_retries=1, retry_backoff_s=0.01
        )
        t0 = time.perf_counter()
        out = client.complete(MODEL, "q")
        elapsed = time.perf_counter() - t0
    assert out.error is not None and out.text == ""
    assert "timeout" in out.error.lower() or "timed out" in out.error.lower()
    assert elapsed < 2.9  # two 0.5 s attempts, not the server's 3 s


@pytest.mark.parametrize(
    ("status", "text", "expect"),
    [
        (429, "rate limit reached", "RateLimitError"),
        (500, "internal error", "InternalServerError"),
        (MALFORMED, '{"choices": [{"message": ', "Expecting value"),  # cut-off JSON with status 200
        (200, "", "EmptyCompletion"),
        (200, "   ", "EmptyCompletion"),
    ],
)
def test_every_kind_of_failed_call_is_retried_then_recorded_as_an_error(status, text, expect):
    with OpenAIStub(lambda p: (status, text, 0.0)) as stub:
        client = LLMClient(api_base=stub.api_base, api_key="k", max_retries=1, retry_backoff_s=0.01)
        out = client.complete(MODEL, "q")
    assert out.error and out.text == "" and out.attempts == 2 and len(stub.requests) == 2
    assert expect in out.error


@pytest.mark.slow
def test_sweep_with_llm_generation_keeps_failed_queries_and_marks_an_outage(slice_data, tmp_path, capsys):
    """One model fails on one question (kept, counted); another is down for every call: its config is
    ranked last as 'too many errors', not as a config of low quality, and the sweep still finishes."""
    from mlflow import MlflowClient

    from rag_core.decision.leaderboard import terminal_columns, to_terminal

    qa = pl.read_parquet(slice_data["qa"])
    gold = GoldAnswers(qa)
    failing = qa["question"][0]

    def respond(prompt: str):
        question = gold.question(prompt)
        return (500, "upstream error", 0.0) if question == failing else (200, gold.answer[question], 0.0)

    gen = {"temperature": 0.0, "max_tokens": 16}
    spec = write_sweep(
        tmp_path / "llm.yaml",
        slice_data,
        name="llm-slice",
        chunking={"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
        retrieval={"mode": "bm25", "top_k": 3},
        generation=[{"model": MODEL, **gen}, {"model": "openai/down-model", **gen}],
    )
    outage = (503, "service unavailable", 0.0)
    with OpenAIStub(lambda p, model: respond(p) if model == "stub-model" else outage, by_model=True) as stub:
        llm = LLMClient(api_base=stub.api_base, api_key="sk-test", max_retries=1, retry_backoff_s=0.01)
        run = run_sweep(str(spec), str(tmp_path / "data"), progress=False, resources={"llm": llm})
    board = run.board
    row, down = board.row(0, named=True), board.row(1, named=True)
    assert "stub-model" in row["config_key"] and "down-model" in down["config_key"]
    assert row["n_generation_errors"] == 1.0 and row["vs_leader"] == "leader"
    assert row["exact_match"] == pytest.approx(19 / 20)  # every other query got its gold answer back
    assert row["n_queries"] == 20.0  # the failed query is kept, not dropped
    assert down["n_generation_errors"] == 20.0 and down["vs_leader"] == "too many errors"
    assert down["too_many_errors"] and not row["too_many_errors"]
    prompts = [
        r["body"]["messages"][-1]["content"] for r in stub.requests if "stub-model" in r["body"]["model"]
    ]
    assert sum(failing in p for p in prompts) == 2  # first try + one retry
    assert all("[1]" in p and "Question:" in p for p in prompts)

    # what `rag-sweep run` prints: the error counts are shown when non-zero
    header = to_terminal(board, terminal_columns(board)).splitlines()[0]
    assert "gen errors" in header and "vs leader" in header
    client = MlflowClient(tracking_uri=f"sqlite:///{run.data / 'mlflow.db'}")
    exp = client.get_experiment_by_name("llm-slice")
    runs = client.search_runs([exp.experiment_id], filter_string="tags.config_key != ''")
    errors = {r.data.tags["config_key"]: r.data.metrics["n_generation_errors"] for r in runs}
    assert errors == {row["config_key"]: 1.0, down["config_key"]: 20.0}


def test_llm_judge_parses_verdicts_and_counts_failures():
    from rag_core.evaluation.evaluate import judge
    from rag_core.metrics import evaluate_queries, summarize
    from rag_core.metrics.judge import JUDGE_PROMPT_VERSION, parse_verdict

    assert parse_verdict("0.75") == 0.75 and parse_verdict("Score: 1") == 1.0 and parse_verdict("85%") == 0.85
    assert parse_verdict("banana") is None and parse_verdict("7") is None and parse_verdict("") is None
    replies = {"q1": (200, "0.9", 0.0), "q2": (200, "I cannot tell", 0.0), "q3": (500, "down", 0.0)}

    def respond(prompt: str):
        qid = next(q for q in replies if f"QUESTION: {q}?" in prompt)
        return replies[qid]

    qa = pl.DataFrame(
        {
            "query_id": ["q1", "q2", "q3", "q4"],
            "question": ["q1?", "q2?", "q3?", "q4?"],
            "answers": [["a"]] * 4,
            "relevant_doc_ids": [["d"]] * 4,
        }
    )
    ret = pl.DataFrame(
        {
            "query_id": ["q1", "q2", "q3", "q4"],
            "chunk_ids": [["c"]] * 4,
            "doc_ids": [["d"]] * 4,
            "titles": [["T"]] * 4,
            "texts": [["context"]] * 4,
            "latency_ms": [1.0] * 4,
        }
    )
    ans = pl.DataFrame(
        {
            "query_id": ["q1", "q2", "q3", "q4"],
            "answer": ["x", "y", "z", ""],
            "error": [None] * 4,
            "latency_ms": [1.0] * 4,
        },
        schema_overrides={"error": pl.String},
    )
    with OpenAIStub(respond) as stub:
        llm = LLMClient(api_base=stub.api_base, api_key="k", max_retries=0)
        scores, spent = judge(llm, MODEL, qa, ret, ans)
    assert scores == {"q1": 0.9, "q2": None, "q3": None, "q4": 0.0}
    assert len(stub.requests) == 3  # the empty answer needs no call
    assert spent["tokens"] > 0 and spent["cost_usd"] == 0.0  # the stub model has no price
    assert "[1] T: context" in stub.requests[0]["body"]["messages"][0]["content"]
    summary = summarize(evaluate_queries(qa, ret, ans, 1, judge_scores=scores))
    assert summary["n_judge_failures"] == 2.0
    assert summary["faithfulness_judge"] == pytest.approx(0.45)  # mean of 0.9 and 0.0; failures left out
    assert JUDGE_PROMPT_VERSION == "faithfulness-v1"


def test_the_call_cache_answers_a_repeated_call_and_never_keeps_a_failure(tmp_path):
    from resources.llm_cache import LLMCache

    calls = []

    def respond(prompt: str):
        calls.append(prompt)
        return (500, "down", 0.0) if len(calls) == 1 else (200, "Paris", 0.0)

    with OpenAIStub(respond) as stub:
        cache = tmp_path / "llm_cache.sqlite"
        client = LLMClient(api_base=stub.api_base, api_key="k", max_retries=0, cache_path=str(cache))
        failed = client.complete(MODEL, "Capital of France?")
        assert failed.error and not failed.cached and LLMCache(cache).spent() == (0, 0.0)
        first = client.complete(MODEL, "Capital of France?")  # the failure was not kept: asked again
        again = client.complete(MODEL, "Capital of France?")
        assert len(stub.requests) == 2
        # another endpoint, model or max_tokens is another call
        other = LLMClient(api_base=stub.api_base, api_key="k", cache_path=str(cache))
        assert other.complete(MODEL, "Capital of France?", max_tokens=5).cached is False
    assert first.text == again.text == "Paris" and not first.cached and again.cached
    assert (again.prompt_tokens, again.latency_ms) == (first.prompt_tokens, first.latency_ms)
    assert LLMCache(cache).spent()[0] == 2 and LLMCache(cache).spent(since=time.time() + 1) == (0, 0.0)


@pytest.mark.slow
def test_failed_calls_are_never_reused_a_rerun_asks_only_them(slice_data, tmp_path, monkeypatch):
    """An outage's failures are not results: the rerun with the provider back asks exactly the calls that
    failed (the rest come from the call cache), the board has no error left, and MLflow holds one run
    per config and one leaderboard run (the recomputed ones replace the earlier)."""
    from mlflow import MlflowClient

    qa = pl.read_parquet(slice_data["qa"])
    gold = GoldAnswers(qa)
    down = set(qa["question"][:3])
    healthy = False

    def respond(prompt: str):
        question = gold.question(prompt)
        return (
            (500, "upstream error", 0.0)
            if question in down and not healthy
            else (200, gold.answer[question], 0.0)
        )

    spec = write_sweep(
        tmp_path / "retry.yaml",
        slice_data,
        name="retry",
        chunking={"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
        retrieval={"mode": "bm25", "top_k": 3},
        generation={"model": MODEL, "max_tokens": 16},
    )
    data = str(tmp_path / "data")
    with OpenAIStub(respond) as stub:
        monkeypatch.setenv("RAG_LLM_API_BASE", stub.api_base)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        monkeypatch.setenv("RAG_LLM_MAX_RETRIES", "0")
        first = run_sweep(str(spec), data, progress=False)
        asked = len(stub.requests)
        healthy = True
        second = run_sweep(str(spec), data, progress=False)
        again = [r["body"]["messages"][-1]["content"] for r in stub.requests[asked:]]
    assert first.board["n_generation_errors"][0] == 3.0 and asked == 20
    assert len(again) == 3 and {next(q for q in down if q in p) for p in again} == down
    assert second.board["n_generation_errors"][0] == 0.0
    assert second.board["exact_match"][0] > first.board["exact_match"][0]
    client = MlflowClient(tracking_uri=f"sqlite:///{second.data / 'mlflow.db'}")
    exp = client.get_experiment_by_name("retry")
    (config_run,) = client.search_runs([exp.experiment_id], filter_string="tags.config_key != ''")
    assert config_run.data.metrics["n_generation_errors"] == 0.0
    assert len(client.search_runs([exp.experiment_id], filter_string="tags.kind = 'leaderboard'")) == 1


def test_a_new_call_cache_takes_many_writers_at_once(tmp_path):
    """Steps in several processes, each with several threads, set up and write one new cache at once.
    (A CI run once failed a step with "database is locked" on the WAL switch of a new cache, which
    SQLite does not wait for; set-up is now once per process and retried across processes.)"""
    import subprocess
    import sys

    script = (
        "import sys, threading; sys.path.insert(0, '.')\n"
        "from rag_core.common.completion import Completion\n"
        "from resources.llm_cache import LLMCache\n"
        "cache = LLMCache(sys.argv[1])\n"
        "def put(i):\n"
        "    for j in range(10):\n"
        "        cache.get(f'{sys.argv[2]}-{i}-{j}')\n"
        "        cache.put(f'{sys.argv[2]}-{i}-{j}', 'm', Completion('ok', None, 1, 1.0))\n"
        "ts = [threading.Thread(target=put, args=(i,)) for i in range(8)]\n"
        "[t.start() for t in ts]; [t.join() for t in ts]\n"
    )
    root = Path(__file__).resolve().parents[1]
    for round_ in range(3):
        path = tmp_path / f"cache{round_}.sqlite"
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", script, str(path), str(p)], cwd=root, stderr=subprocess.PIPE
            )
            for p in range(6)
        ]
        errors = [p.communicate()[1].decode() for p in procs]
        assert [p.returncode for p in procs] == [0] * 6, errors
        from resources.llm_cache import LLMCache

        assert LLMCache(path).spent()[0] == 6 * 8 * 10


def test_a_deleted_call_cache_is_set_up_again_in_the_same_process(tmp_path):
    """The README says: delete llm_cache.sqlite to ask again. A long-lived process (Dagster's code server)
    then writes to a new, empty file, which needs its table again."""
    from rag_core.common.completion import Completion
    from resources.llm_cache import LLMCache

    path = tmp_path / "llm_cache.sqlite"
    LLMCache(path).put("k1", "m", Completion("ok", None, 1, 1.0))
    path.unlink()
    for wal in tmp_path.glob("llm_cache.sqlite-*"):
        wal.unlink()
    assert LLMCache(path).get("k1") is None
    LLMCache(path).put("k2", "m", Completion("ok", None, 1, 1.0))
    assert LLMCache(path).get("k2").text == "ok" and LLMCache(path).spent()[0] == 1


@pytest.mark.parametrize("header", ["2", "http-date"])
def test_a_429_is_retried_after_the_wait_the_provider_asks_for(header):
    """Retry-After in seconds or as an HTTP date: the retry comes after it, not after the 0.01 s backoff;
    the wait is not counted as the model's latency."""
    import email.utils

    def limited(prompt):
        if len(stub.requests) == 1:
            value = "2" if header == "2" else email.utils.formatdate(time.time() + 3, usegmt=True)
            return 429, "rate limit reached", 0.0, {"Retry-After": value}
        return 200, "ok", 0.0

    with OpenAIStub(limited) as stub:
        client = LLMClient(api_base=stub.api_base, api_key="k", max_retries=2, retry_backoff_s=0.01)
        out = client.complete(MODEL, "q")
    gap = stub.requests[1]["t"] - stub.requests[0]["t"]
    assert out.text == "ok" and out.attempts == 2
    assert gap >= 1.0, gap  # HTTP dates have whole seconds: at least 1 s of the 2-3 s asked for
    assert out.latency_ms < 1000 * gap - 500  # the wait is not latency


def test_a_retry_after_longer_than_the_limit_waits_the_limit():
    def limited(prompt):
        return (
            (429, "slow down", 0.0, {"Retry-After": "3600"}) if len(stub.requests) == 1 else (200, "ok", 0.0)
        )

    with OpenAIStub(limited) as stub:
        client = LLMClient(api_base=stub.api_base, api_key="k", max_retries=1, max_retry_after_s=0.5)
        t0 = time.perf_counter()
        out = client.complete(MODEL, "q")
    assert out.text == "ok" and 0.5 <= time.perf_counter() - t0 < 5


def test_concurrent_calls_start_within_the_providers_quota_and_the_wait_is_not_latency():
    """8 calls on 4 threads at 240 requests/minute: their starts at the server are ~0.25 s apart (a burst
    would land at once), and each call's latency is the server's 0.05 s plus the client's own time, not the
    time queued for a slot (up to 1.75 s for the last)."""
    from rag_core.common.concurrency import map_concurrently

    with OpenAIStub(lambda p: (200, "ok", 0.05)) as stub:
        # litellm's one-time set-up in a process (its first call) holds calls that already have their slot,
        # and they then reach the server together: measure the steady state after it
        LLMClient(api_base=stub.api_base, api_key="k").complete(MODEL, "warm up")
        stub.requests.clear()
        client = LLMClient(api_base=stub.api_base, api_key="k", requests_per_minute=240, max_concurrency=4)
        outs = map_concurrently(lambda i: client.complete(MODEL, f"q{i}"), range(8), client.max_concurrency)
        starts = sorted(r["t"] for r in stub.requests)
    assert all(o.error is None for o in outs) and len(starts) == 8
    gaps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
    assert min(gaps) >= 0.15, gaps  # 0.25 s apart, less the client's jitter between its slot and the server
    assert starts[-1] - starts[0] >= 1.6
    assert max(o.latency_ms for o in outs) < 1000, [o.latency_ms for o in outs]

    # without a quota the same calls arrive four at a time
    with OpenAIStub(lambda p: (200, "ok", 0.05)) as stub:
        client = LLMClient(api_base=stub.api_base, api_key="k", max_concurrency=4)
        map_concurrently(lambda i: client.complete(MODEL, f"q{i}"), range(8), client.max_concurrency)
        starts = sorted(r["t"] for r in stub.requests)
    assert starts[3] - starts[0] < 0.5  # the quota above would have spread them over 0.75 s


@pytest.mark.slow
def test_no_holdout_question_reaches_a_selection_step_of_a_halving_search(slice_data, tmp_path, monkeypatch):
    """Halving over two generators on the selection split: every call for a holdout question comes after
    the last call of the search and the leaderboard, and only for the finalist (6 holdout questions of 20)."""
    from rag_assets.board_files import read_decision
    from rag_core.decision.holdout import holdout_ids

    qa = pl.read_parquet(slice_data["qa"])
    gold = GoldAnswers(qa)
    held = {
        q
        for q, i in zip(qa["question"], qa["query_id"], strict=True)
        if i in holdout_ids(qa["query_id"].to_list(), 0.3, 0)
    }

    def respond(prompt: str, model: str):
        question = gold.question(prompt)
        return 200, (gold.answer[question] if model.endswith("right") else "no idea"), 0.0

    spec = write_sweep(
        tmp_path / "halving.yaml",
        slice_data,
        name="held",
        chunking={"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
        retrieval={"mode": "bm25", "top_k": 3},
        generation={"model": ["openai/right", "openai/wrong"], "max_tokens": 16},
        search={"strategy": "halving", "start_questions": 4, "growth": 2.0},
        decision={"holdout": 0.3},
    )
    with OpenAIStub(respond, by_model=True) as stub:
        monkeypatch.setenv("RAG_LLM_API_BASE", stub.api_base)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        out = run_sweep(str(spec), str(tmp_path / "data"), progress=False)
    asked = [(gold.question(r["body"]["messages"][-1]["content"]), r["body"]["model"]) for r in stub.requests]
    on_holdout = [i for i, (q, _) in enumerate(asked) if q in held]
    assert len(held) == 6 and len(on_holdout) == 6  # the finalist, once per holdout question
    assert min(on_holdout) > max(i for i, (q, _) in enumerate(asked) if q not in held)
    assert {asked[i][1] for i in on_holdout} == {"right"}
    decision = read_decision(out.data, "held")
    assert decision["questions"] == 14 and decision["finalists"] == [out.board["config_key"][0]]
    assert decision["holdout"]["confirmed"] is True and decision["holdout"]["n_questions"] == 6
    assert out.board["holdout_overall_score"][0] is not None
    # the holdout's assets hold the finalist's partitions, no other config's (each materialized)
    finalist_key = decision["finalists"][0] + "~holdout"
    assert out.instance.get_dynamic_partitions(out.plan.finalists_partitions) == [finalist_key]
    for stage in ("retrievals", "rerankings", "answers", "evaluations"):
        held_asset = dg.AssetKey(["held", f"holdout_{stage}"])
        assert out.instance.get_materialized_partitions(held_asset) == {finalist_key}, stage
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{out.data / 'mlflow.db'}")
    exp = client.get_experiment_by_name("held")
    (finalist,) = client.search_runs(  # its run on the whole selection split (not a halving rung's)
        [exp.experiment_id], filter_string=f"tags.eval_fingerprint = '{out.board['fingerprint'][0]}'"
    )
    assert finalist.data.metrics["holdout_overall_score"] == pytest.approx(
        out.board["holdout_overall_score"][0]
    )
    assert "winners_curse_drop" in finalist.data.metrics
    (board_run,) = client.search_runs([exp.experiment_id], filter_string="tags.kind = 'leaderboard'")
    assert board_run.data.tags["holdout_confirmed"] == "true"
    assert not client.search_runs([exp.experiment_id], filter_string="tags.config_key LIKE '%holdout%'")
    # the nightly schedule re-asks every config and the finalist on the holdout, all forced
    import datetime

    from rag_sweep.definitions import build_definitions

    nightly = build_definitions([out.plan], str(out.data)).get_schedule_def("held__evaluate_nightly")
    when = datetime.datetime(2026, 11, 26, 2, tzinfo=datetime.UTC)
    requests = list(nightly(dg.build_schedule_context(instance=out.instance, scheduled_execution_time=when)))
    (request,) = requests  # one run for the batch (rag_assets/batch.py)
    every = out.plan.keys("evaluations")
    start, end = (request.tags[f"dagster/asset_partition_range_{e}"] for e in ("start", "end"))
    import json

    listed = request.tags.get("rag/partitions")
    keys = json.loads(listed) if listed else every[every.index(start) : every.index(end) + 1]
    assert keys == out.plan.config_keys and request.tags["rag/force"] == "true"
    # ... and its holdout schedule the finalist, whose partition the run added to the holdout's assets
    held = build_definitions([out.plan], str(out.data)).get_schedule_def("held__evaluate_holdout_nightly")
    (request,) = list(held(dg.build_schedule_context(instance=out.instance, scheduled_execution_time=when)))
    # one run of the holdout's chain, from the answers
    assert json.loads(request.tags["rag/partitions"]) == [decision["finalists"][0] + "~holdout"]
    assert request.tags["rag/holdout_from"] == "answers" and request.tags["rag/force"] == "true"


@pytest.mark.slow
def test_a_forced_rerun_asks_the_provider_again_and_sees_it_change(slice_data, tmp_path, monkeypatch):
    """The nightly re-evaluation (`--force`) must measure today's provider: a generator that turns wrong
    after the first run scores 0 on the forced rerun (it scored 1 from the cache before). The call cache
    keeps both answers (the ledger counts every call paid), and answers an unforced rerun with the newest."""
    from resources.llm_cache import LLMCache

    respond = TurnsWrong(pl.read_parquet(slice_data["qa"]))

    spec = write_sweep(
        tmp_path / "drift.yaml",
        slice_data,
        name="drift",
        chunking={"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
        retrieval={"mode": "bm25", "top_k": 3},
        generation={"model": MODEL, "max_tokens": 16},
        decision={"holdout": 0.3},
    )
    data = tmp_path / "data"
    with OpenAIStub(respond) as stub:
        monkeypatch.setenv("RAG_LLM_API_BASE", stub.api_base)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        first = run_sweep(str(spec), str(data), progress=False)
        respond.right = False
        forced = run_sweep(str(spec), str(data), force=True, progress=False)
        asked = len(stub.requests)
        unforced = run_sweep(str(spec), str(data), progress=False)
    assert first.board["exact_match"][0] == 1.0 and forced.board["exact_match"][0] == 0.0
    assert asked == 40 and len(stub.requests) == 40  # 20 questions twice; the unforced rerun asks nothing
    assert unforced.board["exact_match"][0] == 0.0  # the newest answers
    assert LLMCache(data / "llm_cache.sqlite").spent()[0] == 40


@pytest.mark.slow
def test_a_random_generator_answers_each_question_n_times_and_the_variance_is_split(
    slice_data, tmp_path, monkeypatch
):
    """evaluation.samples: 3 with a generator at temperature 0.7 that is right on a question's 1st and 3rd
    call and wrong on its 2nd: every question scores 2/3, all of its variance within the question
    (sampling), none between questions. A rerun pays nothing; samples 4 pays one more call per question."""
    qa = pl.read_parquet(slice_data["qa"])
    gold = GoldAnswers(qa)
    seen: dict[str, int] = {}

    def respond(prompt: str):
        question = gold.question(prompt)
        seen[question] = seen.get(question, 0) + 1
        return 200, (gold.answer[question] if seen[question] % 2 else "no idea"), 0.0

    def spec(samples: int) -> str:
        return str(
            write_sweep(
                tmp_path / f"sampled{samples}.yaml",
                slice_data,
                name="sampled",
                chunking={"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
                retrieval={"mode": "bm25", "top_k": 3},
                generation={"model": MODEL, "max_tokens": 16, "temperature": 0.7},
                evaluation={"samples": samples},
                weights={"exact_match": 1.0},
            )
        )

    data = str(tmp_path / "data")
    with OpenAIStub(respond) as stub:
        monkeypatch.setenv("RAG_LLM_API_BASE", stub.api_base)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        three = run_sweep(spec(3), data, progress=False)
        paid = len(stub.requests)
        run_sweep(spec(3), data, progress=False)
        again = len(stub.requests)
        four = run_sweep(spec(4), data, progress=False)
    row = three.board.row(0, named=True)
    assert paid == 60 and again == 60 and len(stub.requests) == 80  # 20 questions x 3, then one more each
    assert row["n_samples"] == 3.0 and row["exact_match"] == pytest.approx(2 / 3)
    assert row["score_var_within_questions"] == pytest.approx(1 / 3)  # var of (1, 0, 1), ddof 1
    assert row["score_var_between_questions"] == pytest.approx(0.0) and row[
        "sampling_share"
    ] == pytest.approx(1.0)
    assert four.board["exact_match"][0] == pytest.approx(0.5) and four.board["n_samples"][0] == 4.0


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_a_damaged_call_cache_is_set_aside_named_and_begun_anew(tmp_path, caplog, damage):
    """A call cache that is not SQLite, or cut short, was a traceback (generate-qa) or an error that did
    not name the file (run): it is set aside beside itself, named in a warning, and a new one answers."""
    import sqlite3

    from rag_core.common.completion import Completion
    from resources.llm_cache import LLMCache

    path = tmp_path / "llm_cache.sqlite"
    if damage == "garbage":
        path.write_bytes(b"this is no database\n" * 100)
    else:
        with sqlite3.connect(path) as conn:
            conn.execute(
                "CREATE TABLE calls (key TEXT, model TEXT, text TEXT, prompt_tokens INTEGER, "
                "completion_tokens INTEGER, cost_usd REAL, latency_ms REAL, attempts INTEGER, created REAL)"
            )
            conn.executemany(
                "INSERT INTO calls VALUES (?, 'm', ?, 1, 1, 0.0, 1.0, 1, 0.0)",
                [(f"k{i}", "x" * 500) for i in range(2000)],
            )
        whole = path.read_bytes()
        path.write_bytes(whole[: len(whole) // 2])
    cache = LLMCache(path)
    with caplog.at_level("WARNING"):
        assert cache.get("k1") is None
    assert str(path) in caplog.text and "damaged" in caplog.text
    assert (tmp_path / "llm_cache.sqlite.damaged").exists()
    cache.put("k1", "m", Completion("Paris", None, 1, 1.0))
    assert cache.get("k1").text == "Paris" and cache.spent()[0] == 1


class _Active:
    """A responder that answers the gold answer (without `gold`: `reply`) after `delay` s and counts the
    calls it is answering at once: in all (`most`) and by model (`models_together`: the most models in
    flight at one moment)."""

    def __init__(self, gold: GoldAnswers | None, delay: float, reply: str = "ok"):
        import threading

        self.gold, self.delay, self.reply, self.lock = gold, delay, reply, threading.Lock()
        self.active: dict[str, int] = {}
        self.most = self.models_together = 0

    def __call__(self, prompt: str, model: str = MODEL):
        with self.lock:
            self.active[model] = self.active.get(model, 0) + 1
            self.most = max(self.most, sum(self.active.values()))
            self.models_together = max(self.models_together, sum(1 for n in self.active.values() if n))
        time.sleep(self.delay)
        with self.lock:
            self.active[model] -= 1
        return 200, (self.gold.answer[self.gold.question(prompt)] if self.gold else self.reply), 0.0


def test_calls_in_flight_are_the_clients_limit_over_every_map_of_the_process():
    """Two stages (or configs) each mapping 6 calls over 6 threads, to one endpoint whose client takes 3 at
    once: never more than 3 reach the server together, 3 do, and the time a call queued for its slot is
    not its latency."""
    import threading

    from rag_core.common.concurrency import map_concurrently

    active = _Active(None, 0.1)
    with OpenAIStub(active) as stub:
        client = LLMClient(api_base=stub.api_base, api_key="k", max_concurrency=3)
        client.warm(MODEL)
        outs: list = []

        def stage(name: str) -> None:
            outs.extend(map_concurrently(lambda i: client.complete(MODEL, f"{name} {i}"), range(6), 6))

        stages = [threading.Thread(target=stage, args=(n,)) for n in ("a", "b")]
        for t in stages:
            t.start()
        for t in stages:
            t.join()
    assert len(outs) == 12 and all(o.error is None for o in outs)
    assert active.most == 3, active.most  # 12 calls queued for 3 slots: full, never over
    # the last ones queued ~0.3 s for a slot: a latency is the server's 0.1 s and the client's own time
    assert max(o.latency_ms for o in outs) < 280, sorted(o.latency_ms for o in outs)


def _side_by_side(responder, spec: Path, tmp_path: Path):
    """(the run, the stub) of `spec` against a stub answering by model through `responder`, with a client
    that keeps up to 8 calls in flight: room for several configs' calls at once."""
    with OpenAIStub(responder, by_model=True) as stub:
        llm = LLMClient(api_base=stub.api_base, api_key="sk-test", max_concurrency=8)
        run = run_sweep(str(spec), str(tmp_path / "data"), progress=False, resources={"llm": llm})
    return run, stub


def test_a_batchs_llm_generators_answer_side_by_side_within_the_clients_limit(slice_data, tmp_path):
    """Three LLM generators and the reader in one answers batch: the generators' calls are in flight
    together (one config's 20 questions would leave slots empty as it winds down), never more than the
    client's limit, and each config gets its own questions' answers."""
    qa = pl.read_parquet(slice_data["qa"])
    active = _Active(GoldAnswers(qa), 0.05)
    gen = {"temperature": 0.0, "max_tokens": 16}
    spec = write_sweep(
        tmp_path / "side.yaml",
        slice_data,
        name="side-by-side",
        chunking={"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
        retrieval={"mode": "bm25", "top_k": 3},
        generation=[{"model": "extractive"}, *({"model": f"openai/m{i}", **gen} for i in range(3))],
        decision={"holdout": 0},
    )
    run, stub = _side_by_side(active, spec, tmp_path)
    assert len(stub.requests) == 3 * qa.height
    assert active.most <= 8 and active.models_together >= 2, (active.most, active.models_together)
    board = run.board
    llm_rows = board.filter(pl.col("config_key").str.contains("openai"))
    assert llm_rows.height == 3 and llm_rows["exact_match"].to_list() == [1.0, 1.0, 1.0]
    assert board.height == 4


def test_a_batchs_evaluations_are_judged_side_by_side_within_the_clients_limit(slice_data, tmp_path):
    """Four configs of 3 questions each, judged by an LLM in one evaluations batch: more than one config's
    questions are judged at once (one config alone has 3), never more than the client's limit, and every
    verdict is its own config's (each answer judged once, faithfulness_judge 1.0 everywhere)."""
    judge = _Active(None, 0.2, reply="1")  # every judge prompt: a verdict
    spec = write_sweep(
        tmp_path / "judged.yaml",
        slice_data,
        name="judged-side-by-side",
        chunking={"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
        retrieval={"mode": "bm25", "top_k": [1, 2, 3, 4]},
        evaluation={"judge_model": "openai/judge"},
        decision={"holdout": 0},
        max_queries=3,
    )
    run, stub = _side_by_side(judge, spec, tmp_path)
    judged = [r for r in stub.requests if r["body"]["model"] == "judge"]
    assert len(judged) == 4 * 3
    assert 3 < judge.most <= 8, judge.most
    assert run.board["faithfulness_judge"].to_list() == [1.0] * 4


def test_one_call_asked_at_once_from_two_threads_reaches_the_provider_once(tmp_path):
    """Two configs side by side whose retrievals gave the same prompt: the second waits for the first's
    answer instead of asking again (the call cache's promise, also while the first is still out)."""
    import threading

    with OpenAIStub(lambda p: (200, "Paris", 0.3)) as stub:
        client = LLMClient(api_base=stub.api_base, api_key="k", cache_path=str(tmp_path / "cache.sqlite"))
        client.warm(MODEL)
        outs: list = []
        callers = [
            threading.Thread(target=lambda: outs.append(client.complete(MODEL, "q"))) for _ in range(3)
        ]
        for t in callers:
            t.start()
        for t in callers:
            t.join()
    assert len(stub.requests) == 1 and [o.text for o in outs] == ["Paris"] * 3


def test_a_batchs_llm_rerankers_rank_side_by_side_within_the_clients_limit(slice_data, tmp_path):
    """Four LLM rerankers (each its own model) of one retrieval, 3 questions each, in one rerankings batch:
    more than one config's questions are ranked at once (one config alone has 3), never more than the
    client's limit, and every ranking is its own (each question asked once per model, none fell back)."""
    ranker = _Active(None, 0.2, reply="3, 2, 1")  # every rerank prompt: its 3 candidates reversed
    spec = write_sweep(
        tmp_path / "ranked.yaml",
        slice_data,
        name="ranked-side-by-side",
        chunking={"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
        retrieval={"mode": "bm25", "top_k": 3},
        rerank=[{"method": "llm", "model": f"openai/r{i}", "candidates": 3} for i in range(4)],
        decision={"holdout": 0},
        max_queries=3,
    )
    run, stub = _side_by_side(ranker, spec, tmp_path)
    assert sorted(r["body"]["model"] for r in stub.requests) == sorted(
        f"r{i}" for i in range(4) for _ in range(3)
    )
    assert 3 < ranker.most <= 8 and ranker.models_together >= 2, (ranker.most, ranker.models_together)
    assert run.board["n_rerank_fallbacks"].to_list() == [0.0] * 4
