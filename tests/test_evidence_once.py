"""Evidence is counted once (issue 81): a question that appears twice in a QA set (the same normalized text
and gold documents, under another id) and a label row given twice are each counted once, said with their
count; the QA set's splits then cannot put one question on both sides."""

from __future__ import annotations

import json
import warnings

import pytest

from rag_core.data.datasets import DataWarning, load_qa, question_key
from rag_core.decision.holdout import split_rows


def _qa(tmp_path, rows) -> str:
    path = tmp_path / "qa.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _rows(n: int) -> list[dict]:
    return [
        {"query_id": f"q{i}", "question": f"Who founded company number {i}?", "answers": [f"founder {i}"],
         "relevant_doc_ids": [f"d{i}", f"e{i}"]}
        for i in range(n)
    ]  # fmt: skip


def _keys(f) -> set[str]:
    return {question_key(q, d) for q, d in zip(f["question"], f["relevant_doc_ids"], strict=True)}


def test_duplicate_questions_are_counted_once_with_their_answers_joined(tmp_path):
    rows = _rows(30)
    copies = [  # 15 copies under new ids: other case, spacing and punctuation, gold in another order
        {**r, "query_id": f"copy{i}", "question": "  " + r["question"].upper().replace("?", " ?"),
         "answers": [*r["answers"], f"alias {i}"], "relevant_doc_ids": r["relevant_doc_ids"][::-1]}
        for i, r in enumerate(rows[:15])
    ]  # fmt: skip
    with pytest.warns(
        DataWarning, match=r"15 duplicate question\(s\) .*'copy0' = 'q0'.* 30 questions remain"
    ):
        qa = load_qa(_qa(tmp_path, rows + copies))
    assert qa.height == 30 and qa["query_id"].to_list() == [f"q{i}" for i in range(30)]
    assert qa.filter(qa["query_id"] == "q3")["answers"].to_list() == [["founder 3", "alias 3"]]
    # every split of what loads sees each question once: none on both sides of the holdout
    for seed in range(20):
        held, chosen = (split_rows(qa, s, 0.3, seed) for s in ("holdout", "selection"))
        assert not _keys(held) & _keys(chosen) and held.height + chosen.height == 30


def test_the_same_question_with_other_gold_documents_is_another_question(tmp_path):
    rows = _rows(3) + [{**_rows(1)[0], "query_id": "other", "relevant_doc_ids": ["d9"]}]
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataWarning)
        assert load_qa(_qa(tmp_path, rows)).height == 4


def test_duplicate_label_rows_are_counted_once_and_conflicting_ones_refused(tmp_path):
    from rag_core.metrics.judge_agreement import LabelsError, read_labels

    rows = [
        {"question": f"q{i}", "answer": f"a{i}", "context": f"c{i}", "supported": i % 2 == 0}
        for i in range(10)
    ]
    path = tmp_path / "labels.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows + rows[:4] + [{**rows[5], "answer": " a5 "}]))
    with pytest.warns(DataWarning, match=r"5 duplicate label row\(s\) .*row 11 = row 1.* 10 labels remain"):
        got, labels = read_labels(path)
    assert len(got) == 10 and labels == [i % 2 == 0 for i in range(10)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows + [{**rows[2], "supported": False}]))
    with pytest.raises(
        LabelsError, match="rows 3 and 11: the same question, answer and context labelled both"
    ):
        read_labels(path)
