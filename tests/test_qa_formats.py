"""The QA formats teams already have (BEIR, Ragas, an MLflow evaluation dataset), read from small files
the tests write, and the QA-set quality figures on good and bad sets."""

from __future__ import annotations

import json

import polars as pl
import pytest

from rag_core.data.datasets import DatasetError, load_corpus, load_qa
from rag_core.data.qa.checks import qa_quality


def jsonl(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def beir(tmp_path):
    root = tmp_path / "scifact"
    jsonl(
        root / "corpus.jsonl",
        [
            {"_id": "10", "title": "Aspirin", "text": "Aspirin reduces the risk of heart attack."},
            {"_id": "11", "title": "Statins", "text": "Statins lower cholesterol in the blood."},
            {"_id": "12", "title": "Vitamin C", "text": "Vitamin C does not prevent the common cold."},
        ],
    )
    jsonl(
        root / "queries.jsonl",
        [
            {"_id": "q1", "text": "Does aspirin lower heart attack risk?"},
            {"_id": "q2", "text": "What lowers cholesterol?"},
            {"_id": "q3", "text": "A query no split judges"},
        ],
    )
    (root / "qrels").mkdir()
    (root / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\nq1\t10\t2\nq1\t11\t1\nq2\t11\t1\nq2\t12\t0\n"
    )
    return root


def test_a_beir_dataset_is_read_with_graded_relevance(beir):
    corpus = load_corpus(beir)
    assert corpus["doc_id"].to_list() == ["10", "11", "12"] and corpus["title"][0] == "Aspirin"
    qa = load_qa(beir, set(corpus["doc_id"]))
    assert qa["query_id"].to_list() == ["q1", "q2"]  # q3 is judged by no split: BEIR leaves it out
    row = qa.row(0, named=True)
    assert row["relevant_doc_ids"] == ["10", "11"] and row["relevant_doc_grades"] == [2.0, 1.0]
    assert qa.row(1, named=True)["relevant_doc_ids"] == ["11"]  # score 0: judged not relevant
    assert row["answers"] == []  # BEIR has no reference answers: the answer metrics are undefined
    assert load_qa(beir / "qrels" / "test.tsv").height == 2  # the split's file names the split


def test_bad_beir_files_are_named_with_their_line_and_field(beir):
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\t10\thigh\n")
    with pytest.raises(DatasetError, match=r"test.tsv: line 2: field 'score': 'high'"):
        load_qa(beir)
    (beir / "qrels" / "test.tsv").write_text("q9\t10\t1\n")
    with pytest.raises(DatasetError, match=r"test.tsv: field 'query-id': \['q9'\] have no query"):
        load_qa(beir)
    (beir / "qrels" / "test.tsv").write_text("q1\t99\t1\n")
    with pytest.raises(
        DatasetError, match=r"queries.jsonl: line 1: field 'relevant_doc_ids': \['99'\] not in"
    ):
        load_qa(beir, {"10", "11", "12"})
    (beir / "qrels" / "test.tsv").unlink()
    (beir / "qrels" / "dev.tsv").write_text("q1\t10\t1\n")
    (beir / "qrels" / "train.tsv").write_text("q2\t11\t1\n")
    with pytest.raises(DatasetError, match="several qrels splits"):
        load_qa(beir)


def test_a_qrels_file_without_header_keeps_its_first_row(beir):
    """Line 1 was a header whenever its score was not a number: `q0 d0 x` dropped q0 silently, though the
    same row on line 2 was an error."""
    qrels = beir / "qrels" / "test.tsv"
    qrels.write_text("q1\t10\tx\nq2\t11\t1\n")
    with pytest.raises(DatasetError, match=r"test.tsv: line 1: field 'score': 'x' is not a finite number"):
        load_qa(beir)
    qrels.write_text("q1\t10\t2\nq2\t11\t1\n")
    assert load_qa(beir)["query_id"].to_list() == ["q1", "q2"]


@pytest.mark.parametrize(
    "header",
    [
        "query-id\tcorpus-id\tscore",
        "QUERY-ID\tCorpus-Id\tScore",
        "qid\tdocid\tscore",
        "query_id\tdoc_id\tscore",
    ],
)
def test_a_qrels_header_is_known_by_its_column_names(beir, header):
    qrels = beir / "qrels" / "test.tsv"
    qrels.write_text(f"{header}\nq1\t10\t2\nq2\t11\t1\n")
    assert load_qa(beir)["query_id"].to_list() == ["q1", "q2"]
    qrels.write_bytes(f"\ufeff{header}\nq1\t10\t2\n".encode())  # a byte-order mark before it
    assert load_qa(beir)["query_id"].to_list() == ["q1"]


@pytest.mark.parametrize("score", ["nan", "NaN", "inf", "-inf", "Infinity", "1_0", "1e999", "\u0661", ""])
def test_a_qrels_grade_must_be_a_finite_decimal_number(beir, score):
    """`nan` dropped its query silently, `inf` made nDCG NaN, `1_0` was read as 10 (float() reads them)."""
    for lineno, text in ((2, f"query-id\tcorpus-id\tscore\nq1\t10\t{score}\n"), (1, f"q1\t10\t{score}\n")):
        (beir / "qrels" / "test.tsv").write_text(text)
        with pytest.raises(
            DatasetError, match=rf"test.tsv: line {lineno}: field 'score': .* not a finite number"
        ):
            load_qa(beir)


def test_a_native_grade_must_be_a_finite_number(tmp_path):
    """JSON's NaN and Infinity, which Python's json reads, passed as grades."""
    base = {"query_id": "q1", "question": "?", "answers": ["Paris"], "relevant_doc_ids": ["d1"]}
    for grade in ("NaN", "Infinity", "-Infinity"):
        path = tmp_path / "qa.jsonl"
        path.write_text(json.dumps(base)[:-1] + f', "relevant_doc_grades": [{grade}]}}\n')
        with pytest.raises(
            DatasetError, match=r"qa.jsonl: line 1: field 'relevant_doc_grades': .* not a finite"
        ):
            load_qa(path)
    pl.DataFrame([{**base, "relevant_doc_grades": [float("inf")]}]).write_parquet(tmp_path / "qa.parquet")
    with pytest.raises(DatasetError, match=r"qa.parquet: row 1: field 'relevant_doc_grades': inf is not"):
        load_qa(tmp_path / "qa.parquet")
    assert load_qa(jsonl(tmp_path / "ok.jsonl", [{**base, "relevant_doc_grades": [2]}]))[
        "relevant_doc_grades"
    ].to_list() == [[2.0]]


def test_a_duplicate_beir_query_id_is_refused_naming_both_lines(beir):
    """A second `_id` was dropped silently (the first text kept, whichever the qrels meant)."""
    queries = beir / "queries.jsonl"
    queries.write_text(queries.read_text() + '{"_id": "q2", "text": "Another text under the same id"}\n')
    with pytest.raises(
        DatasetError, match=r"queries.jsonl: line 4: field '_id': duplicate id 'q2' \(first at line 2\)"
    ):
        load_qa(beir)


def test_a_ragas_test_set_finds_its_gold_documents_in_the_corpus(beir, tmp_path):
    corpus = load_corpus(beir)
    path = jsonl(
        tmp_path / "ragas.jsonl",
        [
            {
                "user_input": "What does aspirin reduce?",
                "reference": "The risk of heart attack",
                "reference_contexts": ["aspirin  reduces the RISK of heart attack"],  # spacing and case aside
                "synthesizer_name": "single_hop_specifc_query_synthesizer",
            },
            {
                "user_input": "What do statins and vitamin C do?",
                "reference": "Lower cholesterol; nothing for colds",
                "reference_contexts": ["Statins lower cholesterol", "does not prevent the common cold"],
            },
        ],
    )
    qa = load_qa(path, set(corpus["doc_id"]), corpus=corpus)
    assert qa["question"][0] == "What does aspirin reduce?"
    assert qa["relevant_doc_ids"].to_list() == [["10"], ["11", "12"]]
    assert qa["answers"][0].to_list() == ["The risk of heart attack"]
    assert qa["query_id"].to_list() == ["ragas-1", "ragas-2"]
    bad = jsonl(
        tmp_path / "other.jsonl",
        [{"user_input": "Q?", "reference": "A", "reference_contexts": ["a passage of some other corpus"]}],
    )
    with pytest.raises(DatasetError, match=r"other.jsonl: line 1: field 'reference_contexts': none of its 1"):
        load_qa(bad, corpus=corpus)
    with pytest.raises(DatasetError, match="needs the corpus"):
        load_qa(path)


def test_an_mlflow_evaluation_dataset_export_is_read(tmp_path):
    rows = [
        {
            "dataset_record_id": "dr-1",
            "inputs": {"question": "What does aspirin reduce?"},
            "expectations": {
                "expected_response": "The risk of heart attack",
                "expected_retrieved_context": [{"doc_uri": "10", "content": "Aspirin reduces ..."}],
            },
        },
        {"inputs": {"query": "What lowers cholesterol?"}, "expectations": {"expected_document_ids": ["11"]}},
    ]
    path = tmp_path / "eval.parquet"
    pl.DataFrame(rows).write_parquet(path)  # the export keeps inputs and expectations as structs
    qa = load_qa(path, {"10", "11"})
    assert qa["query_id"].to_list() == ["dr-1", "mlflow-2"]
    assert qa["question"].to_list() == ["What does aspirin reduce?", "What lowers cholesterol?"]
    assert qa["relevant_doc_ids"].to_list() == [["10"], ["11"]]
    assert qa["answers"].to_list() == [["The risk of heart attack"], []]
    bad = jsonl(tmp_path / "bad.jsonl", [{"inputs": {"question": 3, "context": 4}, "expectations": {}}])
    with pytest.raises(DatasetError, match=r"bad.jsonl: line 1: field 'inputs': no question"):
        load_qa(bad)


def test_quality_figures_flag_what_a_run_can_use_but_a_team_should_look_at(beir):
    corpus = load_corpus(beir)
    qa = pl.DataFrame(
        {
            "query_id": ["a", "b", "c", "a"],
            "question": ["What lowers cholesterol?", "what lowers  CHOLESTEROL", "", "Aspirin?"],
            "answers": [["Statins"], ["insulin"], ["x"], ["heart attack"]],
            "relevant_doc_ids": [["11"], ["11"], [], ["10", "404"]],
        }
    )
    q = qa_quality(qa, corpus)
    assert q.duplicate_questions == ["what lowers  CHOLESTEROL"] and q.duplicate_query_ids == ["a"]
    assert q.empty_questions == 1 and q.missing_gold_ids == ["404"]
    assert q.without_gold == 1 and q.without_gold_share == 0.25
    assert q.answer_in_gold == pytest.approx(2 / 3) and q.answer_in_gold_of == 3  # insulin is not in doc 11
    good = load_qa(beir, set(corpus["doc_id"]))
    assert qa_quality(good, corpus).answer_in_gold is None  # no reference answers: undefined, not 0
