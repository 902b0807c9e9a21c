"""QA-set generation against the local OpenAI-protocol server: scripted good, malformed, failing,
unsupported, quoting and closed-book-answerable replies, each counted where it belongs."""

from __future__ import annotations

import json
import re

import dagster as dg
import numpy as np
import polars as pl
import pytest

from rag_core.data.datasets import load_qa
from rag_core.data.qa.generation import (
    QAGeneration,
    Sampler,
    generate_qa,
    near_duplicates,
    parse_reply,
    quotes_passage,
    sidecar,
    write_generated,
)
from resources.llm import LLMClient
from tests.conftest import cli
from tests.openai_stub import OpenAIStub

MODEL = "openai/stub-model"
DOCS = {
    "d1": ("Ada Lovelace", "Ada Lovelace was an English mathematician. She worked with Charles Babbage on the "
           "Analytical Engine in London."),
    "d2": ("Charles Babbage", "Charles Babbage designed the Difference Engine. He was born in London in 1791."),
    "d3": ("Blue River", "Blue River is a novel published in 1962 by Harold Finch. It sold two million copies."),
    "d4": ("Mount Kell", "Mount Kell rises 2,300 metres above the Verd valley. Its first ascent was in 1888."),
    "d5": ("Verd Valley", "The Verd valley lies below the mountain and is known for its orchards of pears."),
    "d6": ("Quiet Harbor", "Quiet Harbor is a fishing village with 400 residents and a stone lighthouse."),
}  # fmt: skip
CORPUS = pl.DataFrame(
    {"doc_id": list(DOCS), "title": [t for t, _ in DOCS.values()], "text": [x for _, x in DOCS.values()]}
)
WRITTEN = {  # title -> the reply to the prompt that writes a question from it
    "Ada Lovelace": {"question": "Who did Ada Lovelace work with on the Analytical Engine?", "answer": "Charles Babbage"},
    "Charles Babbage": {"question": "In which year was Charles Babbage born?", "answer": "1791"},
    "Blue River": "Sure! Here is a good question about the novel.",  # a reply, but no JSON: malformed
    "Mount Kell": {"question": "Is it true that Mount Kell rises 2,300 metres above the Verd valley?", "answer": "yes it is"},
    "Verd Valley": {"question": "Which fruit grows in the orchards of the Verd valley?", "answer": "apples"},
    "Quiet Harbor": None,  # the provider fails
}  # fmt: skip


def scripted(prompt: str):
    """The stub's reply to each kind of prompt the generator sends."""
    if prompt.startswith("Write one question that the passage"):
        reply = WRITTEN[re.search(r'from "(.+?)"', prompt).group(1)]
        if reply is None:
            return 500, "upstream error", 0.0
        return 200, (json.dumps(reply) if isinstance(reply, dict) else reply), 0.0
    if prompt.startswith("Write one question that needs BOTH"):
        a, b = re.findall(r'from "(.+?)"', prompt)
        return 200, json.dumps({"question": f"What links {a} and {b}?", "answer": "London"}), 0.0
    if prompt.startswith("Write one question on the topic"):
        title = re.search(r'from "(.+?)"', prompt).group(1)
        return 200, json.dumps({"question": f"Who painted a portrait of {title}?", "answer": ""}), 0.0
    if prompt.startswith("Passage:") and "Proposed answer: apples" in prompt:
        return 200, "No.", 0.0  # the passage says pears
    if prompt.startswith("Passage:") and "Does the passage answer the question?" in prompt:
        return 200, "no", 0.0
    if prompt.startswith("Passage:"):
        return 200, "Yes", 0.0
    if prompt.startswith("Answer the question in as few words"):
        return 200, ("1791" if "Charles Babbage born" in prompt else "unknown"), 0.0
    raise AssertionError(f"unexpected prompt: {prompt[:80]}")


def client(stub: OpenAIStub) -> LLMClient:
    return LLMClient(api_base=stub.api_base, api_key="k", max_retries=0)


def test_each_filter_and_each_failure_is_counted_and_only_good_questions_are_kept():
    settings = QAGeneration(model=MODEL, questions=6, types={"factoid": 1.0}, seed=3)
    with OpenAIStub(scripted) as stub:
        frame, report = generate_qa(CORPUS, settings, client(stub))
    first_round = [r["body"]["messages"][-1]["content"] for r in stub.requests][:6]
    titles = [re.search(r'from "(.+?)"', p).group(1) for p in first_round if p.startswith("Write")]
    assert sorted(titles) == sorted(t for t, _ in DOCS.values())  # stratified: every document once first
    assert frame["question"].to_list() == [WRITTEN["Ada Lovelace"]["question"]]
    assert frame.row(0, named=True)["relevant_doc_ids"] == ["d1"]
    assert frame.row(0, named=True)["answers"] == ["Charles Babbage"]
    assert report.kept == {"factoid": 1}
    r = report.rejected
    assert r["answerable_without_context"] >= 1  # Babbage's birth year, known closed-book
    assert r["quotes_passage"] >= 1  # Mount Kell's question copies its sentence
    assert r["unsupported"] >= 1  # apples, where the passage says pears
    assert r["near_duplicate"] >= 1  # later rounds draw Ada again: the same question is not kept twice
    assert report.malformed_replies >= 1 and report.failed_calls >= 1
    assert report.calls == len(stub.requests)  # every call counted, none made twice
    assert report.tokens > 0


def test_without_require_context_a_question_known_closed_book_is_kept():
    settings = QAGeneration(model=MODEL, questions=6, types={"factoid": 1.0}, require_context=False)
    with OpenAIStub(scripted) as stub:
        frame, report = generate_qa(CORPUS, settings, client(stub))
    assert "In which year was Charles Babbage born?" in frame["question"].to_list()
    assert "answerable_without_context" not in report.rejected
    assert not any(r["body"]["messages"][-1]["content"].startswith("Answer the") for r in stub.requests)


def test_the_budget_caps_the_calls_and_generation_ends_short_without_error():
    settings = QAGeneration(model=MODEL, questions=6, types={"factoid": 1.0}, max_calls=4)
    with OpenAIStub(scripted) as stub:
        frame, report = generate_qa(CORPUS, settings, client(stub))
    assert len(stub.requests) == report.calls == 4
    assert report.skipped_for_budget > 0
    assert frame.height <= 1


def test_multi_hop_pairs_documents_sharing_an_entity_and_unanswerable_has_no_gold():
    settings = QAGeneration(model=MODEL, questions=4, types={"multi_hop": 0.5, "unanswerable": 0.5}, seed=1)
    sampler = Sampler(CORPUS, settings)
    assert sampler.partner("d1") == "d2"  # Ada's text names Charles Babbage
    assert sampler.partner("d6") is None  # Quiet Harbor shares no name with any document
    with OpenAIStub(scripted) as stub:
        frame, report = generate_qa(CORPUS, settings, client(stub))
    hops = frame.filter(pl.col("question_type") == "multi_hop")
    assert hops.height == 2 and all(len(g) == 2 and g[0] != g[1] for g in hops["relevant_doc_ids"])
    none = frame.filter(pl.col("question_type") == "unanswerable")
    assert none.height == 2
    assert none["relevant_doc_ids"].to_list() == [[], []] and none["answers"].to_list() == [[], []]
    assert report.no_pair >= 0 and report.kept == {"multi_hop": 2, "unanswerable": 2}


def test_the_same_seed_gives_the_same_set_and_another_seed_another_order():
    def good(prompt: str):
        if prompt.startswith("Write"):
            title = re.search(r'from "(.+?)"', prompt).group(1)
            return 200, json.dumps({"question": f"What is {title} known for?", "answer": title}), 0.0
        return 200, ("unknown" if prompt.startswith("Answer") else "yes"), 0.0

    def run(seed: int) -> list[str]:
        settings = QAGeneration(model=MODEL, questions=4, types={"factoid": 1.0}, seed=seed)
        with OpenAIStub(good) as stub:
            frame, _ = generate_qa(CORPUS, settings, client(stub))
        return [ids[0] for ids in frame["relevant_doc_ids"]]

    first = run(7)
    assert len(first) == 4 and len(set(first)) == 4
    assert run(7) == first
    assert any(run(s) != first for s in (8, 9, 10))


def test_the_written_set_is_the_projects_qa_format_with_its_generation_sidecar(tmp_path):
    settings = QAGeneration(model=MODEL, questions=2, types={"factoid": 1.0})
    with OpenAIStub(scripted) as stub:
        frame, report = generate_qa(CORPUS, settings, client(stub))
    out = tmp_path / "qa.jsonl"
    write_generated(frame, report, out)
    qa = load_qa(out, set(DOCS))
    assert qa["question"].to_list() == frame["question"].to_list()
    meta = json.loads(sidecar(out).read_text())
    assert meta["generator_model"] == MODEL and meta["seed"] == 0
    assert meta["prompt_versions"]["factoid"] == "qa-factoid-v1"
    assert meta["calls"] == len(stub.requests) and meta["kept"] == {"factoid": frame.height}
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.parametrize(
    "reply, parsed",
    [
        ('{"question": "Who?", "answer": "Ada"}', ("Who?", "Ada")),
        ('```json\n{"question": "Who?", "answer": "Ada"}\n```', ("Who?", "Ada")),
        ("Here: {'question': 'Who?'}", None),  # not JSON
        ('{"question": "", "answer": "Ada"}', None),
        ('{"question": "Who?", "answer": "The"}', None),  # an answer that normalizes to nothing
        ('["Who?", "Ada"]', None),
    ],
)
def test_replies_that_are_not_a_question_and_answer_are_malformed(reply, parsed):
    assert parse_reply(reply, "factoid") == parsed


def test_quoting_and_near_duplicate_filters():
    passage = "The Verd valley lies below the mountain and is known for its orchards of pears."
    assert quotes_passage("Which place lies below the mountain and is known for its orchards?", [passage], 6)
    assert not quotes_passage("Which fruit grows in the Verd valley?", [passage], 6)
    v = np.array([[1.0, 0.0], [0.999, 0.0447], [0.0, 1.0]], dtype=np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    assert near_duplicates(v, None, 0.95) == [False, True, False]
    assert near_duplicates(v[2:], v[:1], 0.95) == [False]
    assert near_duplicates(v[:1], v[1:2], 0.95) == [True]


def test_type_weights_split_the_questions_and_bad_weights_are_refused():
    assert QAGeneration(model=MODEL, questions=10).targets() == {"factoid": 8, "multi_hop": 2}
    t = QAGeneration(
        model=MODEL, questions=5, types={"factoid": 1, "multi_hop": 1, "unanswerable": 1}
    ).targets()
    assert sum(t.values()) == 5
    with pytest.raises(ValueError, match="types"):
        QAGeneration(model=MODEL, types={"factoid": 0})
    with pytest.raises(ValueError):
        QAGeneration(model=MODEL, types={"trivia": 1.0})


def slice_responder(prompt: str):
    """Replies for any corpus: a question naming the passage's title, answered by the title."""
    if prompt.startswith("Write one question that needs BOTH"):
        a, b = re.findall(r'from "(.+?)"', prompt)
        return 200, json.dumps({"question": f"What connects {a} with {b}?", "answer": a}), 0.0
    if prompt.startswith("Write"):
        title = re.search(r'from "(.+?)"', prompt).group(1)
        return (
            200,
            json.dumps({"question": f"Which subject is the article {title} about?", "answer": title}),
            0.0,
        )
    return 200, ("unknown" if prompt.startswith("Answer the question") else "yes"), 0.0


@pytest.mark.slow
def test_generate_qa_command_writes_a_set_with_its_estimate_and_keeps_a_reviewed_copy(
    slice_data, tmp_path, monkeypatch, capsys
):

    out = (
        tmp_path / "new folder" / "generated.jsonl"
    )  # made when the set is written (it crashed after the calls)
    args = ["generate-qa", str(slice_data["corpus"]), "--model", MODEL, "--out", str(out), "--questions", "5"]
    args += ["--data-dir", str(tmp_path / "data"), "--types", "factoid=0.6,multi_hop=0.4"]
    assert (r := cli(*[*args, "--dry-run"])).returncode == 0
    assert "estimated: ~15 LLM calls" in r.stdout and not out.exists()
    with OpenAIStub(slice_responder) as stub:
        monkeypatch.setenv("RAG_LLM_API_BASE", stub.api_base)
        monkeypatch.setenv("RAG_LLM_API_KEY", "sk-test")
        assert (r := cli(*args)).returncode == 0
        printed = r.stdout
        qa = load_qa(out, set(pl.read_parquet(slice_data["corpus"])["doc_id"]))
        assert qa.height == 5 and f"wrote 5 questions to {out}" in printed
        assert "answers found in their gold passages: " in printed
        assert stub.requests and stub.requests[0]["auth"] == "Bearer sk-test"
        assert (r := cli(*args)).returncode == 2  # the file is a reviewed copy now: never overwritten unasked
        assert "pass --overwrite" in r.stderr


def test_a_bad_out_path_is_refused_before_any_call(slice_data, tmp_path, monkeypatch):
    """--out naming a directory, or a path under a file, paid for every call and then crashed."""
    (tmp_path / "set.jsonl").mkdir()
    (tmp_path / "notes.txt").write_text("a file")
    with OpenAIStub(slice_responder) as stub:
        monkeypatch.setenv("RAG_LLM_API_BASE", stub.api_base)
        for out, said in (
            (tmp_path / "set.jsonl", "is a directory"),
            (tmp_path / "notes.txt" / "set.jsonl", "notes.txt is a file"),
        ):
            r = cli(
                "generate-qa",
                slice_data["corpus"],
                "--model",
                MODEL,
                "--out",
                out,
                "--data-dir",
                tmp_path / "d",
            )
            assert r.returncode == 2 and f"--out {out}: " in r.stderr and said in r.stderr, r.stderr
            assert "Traceback" not in r.stderr
        assert not stub.requests and not (tmp_path / "d").exists()  # nothing paid for, nothing made


@pytest.mark.slow
def test_a_sweep_from_documents_alone_generates_its_qa_set_once_and_evaluates_it(slice_data, tmp_path):
    """`qa_generation` in the sweep: the run writes the QA set through the Dagster asset, evaluates every
    config on it and records the generator; a rerun and an edited (reviewed) copy make no new call."""
    from mlflow import MlflowClient

    from rag_sweep.runner import run_sweep
    from tests.conftest import write_sweep

    qa_path = tmp_path / "generated_qa.jsonl"
    spec = write_sweep(
        tmp_path / "docs_only.yaml",
        {"corpus": slice_data["corpus"], "qa": qa_path},
        name="docs-only",
        chunking={"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
        retrieval={"mode": "bm25", "top_k": [2, 4]},
        qa_generation={
            "model": MODEL,
            "questions": 6,
            "types": {"factoid": 0.5, "multi_hop": 0.5},
            "seed": 2,
        },
    )
    with OpenAIStub(slice_responder) as stub:
        llm = LLMClient(api_base=stub.api_base, api_key="k", max_retries=0)
        run = run_sweep(str(spec), str(tmp_path / "data"), progress=False, resources={"llm": llm})
        calls = len(stub.requests)
        assert qa_path.exists() and calls >= 6 * 2
        assert run.board.height == 2 and run.board["n_queries"].to_list() == [6.0, 6.0]
        assert run.board["recall_at_k"].max() > 0  # the generated gold documents are found
        meta = run.instance.get_latest_materialization_event(
            dg.AssetKey(["docs_only", "qa_set"])
        ).asset_materialization.metadata
        assert meta["generator_model"].value == MODEL and meta["generation_seed"].value == 2
        client = MlflowClient(tracking_uri=f"sqlite:///{run.data / 'mlflow.db'}")
        exp = client.get_experiment_by_name("docs-only")
        params = [
            r.data.params for r in client.search_runs([exp.experiment_id]) if "config_key" in r.data.tags
        ]
        assert params and all(p["qa.generator_model"] == MODEL for p in params)

        lines = qa_path.read_text().splitlines()
        qa_path.write_text("\n".join(lines[:-1]) + "\n")  # a reviewer drops a question
        again = run_sweep(str(spec), str(tmp_path / "data"), progress=False, resources={"llm": llm})
        assert len(stub.requests) == calls  # the reviewed copy is used as is: no generation call
        assert again.board["n_queries"].to_list() == [5.0, 5.0]


def test_validate_and_plan_of_a_sweep_whose_qa_set_is_to_be_generated(tmp_path, capsys):
    from tests.conftest import write_sweep

    corpus = tmp_path / "corpus.parquet"
    CORPUS.write_parquet(corpus)
    sections = {
        "chunking": {"method": "paragraph", "chunk_size": 512, "chunk_overlap": 0},
        "retrieval": {"mode": "bm25", "top_k": 2},
    }
    data = {"corpus": corpus, "qa": tmp_path / "qa.jsonl"}
    spec = write_sweep(tmp_path / "s.yaml", data, qa_generation={"model": MODEL, "questions": 4}, **sections)
    assert (r := cli(*["validate", str(spec)])).returncode == 0
    out = r.stdout
    assert "4 questions (3 factoid, 1 multi_hop) to generate from 6 documents" in out
    assert "4 generated questions" in out
    assert (r := cli(*["plan", str(spec), "--data-dir", str(tmp_path / "d")])).returncode == 0
    assert "estimated: ~12 LLM calls" in r.stdout
    bad = write_sweep(tmp_path / "b.yaml", data, qa_generation={"model": MODEL, "questions": 0}, **sections)
    assert (r := cli(*["validate", str(bad)])).returncode == 2
    assert "qa_generation.questions" in r.stderr


def test_when_every_call_fails_the_cause_is_printed_once_per_kind(slice_data, tmp_path, monkeypatch):
    """A wrong key (the provider's 401) or no key at all: every call fails, and the CLI said only
    `14 calls, 14 failed`. It now names the kind of each failure and the first one's cause, redacted."""
    args = ["generate-qa", str(slice_data["corpus"]), "--model", MODEL, "--questions", "2"]
    monkeypatch.setenv("RAG_LLM_MAX_RETRIES", "0")
    with OpenAIStub(lambda prompt: (401, "Incorrect API key provided: sk-wrong-123", 0.0)) as stub:
        monkeypatch.setenv("RAG_LLM_API_BASE", stub.api_base)
        monkeypatch.setenv("RAG_LLM_API_KEY", "sk-wrong-123")
        r = cli(*args, "--out", tmp_path / "a.jsonl", "--data-dir", tmp_path / "d")
        assert stub.requests
    assert r.returncode == 1 and "no question was kept" in r.stderr, r.stderr
    (line,) = [x for x in r.stderr.splitlines() if "failed calls:" in x]
    assert re.search(r"failed calls: \d+ AuthenticationError; first: AuthenticationError: ", line), line
    assert "sk-wrong-123" not in r.stderr + r.stdout  # the key, redacted wherever it is echoed

    monkeypatch.setenv("RAG_LLM_API_BASE", "http://127.0.0.1:9")  # nothing listens: no call leaves anyway
    monkeypatch.delenv("RAG_LLM_API_KEY")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    r = cli(*args, "--out", tmp_path / "b.jsonl", "--data-dir", tmp_path / "d")
    assert r.returncode == 1 and "failed calls: " in r.stderr and "api_key" in r.stderr.lower(), r.stderr
