import json

import polars as pl
import pytest

from rag_core.data.datasets import DatasetError, DataWarning, load_corpus, load_qa


def jsonl(path, rows):
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return path


def test_corpus_formats(tmp_path):
    p = jsonl(
        tmp_path / "c.jsonl",
        [{"doc_id": "a", "text": "x", "metadata": {"k": 1}}, {"doc_id": "b", "text": "y", "title": "B"}],
    )
    df = load_corpus(p)
    assert df["doc_id"].to_list() == ["a", "b"] and df["title"].to_list() == ["", "B"]
    assert json.loads(df["metadata"][0]) == {"k": 1}
    (tmp_path / "docs" / "sub").mkdir(parents=True)
    (tmp_path / "docs" / "one.md").write_text("# One")
    (tmp_path / "docs" / "sub" / "two.txt").write_text("two")
    (tmp_path / "docs" / "skip.bin").write_bytes(b"\0")
    df = load_corpus(tmp_path / "docs")
    assert df["doc_id"].to_list() == ["one.md", "sub/two.txt"]


@pytest.mark.parametrize(
    "rows,message",
    [
        ([{"doc_id": "a", "text": "x"}, {"doc_id": "b"}], "line 2: field 'text' is missing"),
        ([{"doc_id": "a", "text": "x"}, {"doc_id": "a", "text": "y"}], "line 2: field 'doc_id': duplicate"),
        ([{"doc_id": 5, "text": "x"}], "line 1: field 'doc_id' must be a string"),
        ([{"doc_id": "a", "text": "  "}], "line 1: field 'text' is empty"),
        (['{"doc_id": "a", "text": "x"}', "{not json"], "line 2: invalid JSON"),
        (
            [{"doc_id": "a", "text": "x", "metadata": "year=2001"}],
            "line 1: field 'metadata' is a string but not JSON",
        ),
        (
            [{"doc_id": "a", "text": "x", "metadata": ["a", "b"]}],
            "line 1: field 'metadata' must be a JSON object",
        ),
        (
            [{"doc_id": "a", "text": "x", "metadata": "[1, 2]"}],
            "line 1: field 'metadata' must be a JSON object",
        ),
    ],
)
def test_corpus_errors_name_file_row_and_field(tmp_path, rows, message):
    p = jsonl(tmp_path / "c.jsonl", rows)
    with pytest.raises(DatasetError) as e:
        load_corpus(p)
    assert str(p) in str(e.value) and message in str(e.value)


def test_parquet_rows_are_numbered(tmp_path):
    p = tmp_path / "c.parquet"
    pl.DataFrame({"doc_id": ["a", "b"], "text": ["x", None]}).write_parquet(p)
    with pytest.raises(DatasetError, match=r"c.parquet: row 2: field 'text' is missing"):
        load_corpus(p)


def test_qa_validation(tmp_path):
    ok = {"query_id": "q1", "question": "?", "answers": ["x"], "relevant_doc_ids": ["d1"]}
    p = jsonl(tmp_path / "q.jsonl", [ok, {**ok, "query_id": "q2", "relevant_doc_ids": []}])
    assert load_qa(p, {"d1"}).height == 2
    assert load_qa(p, {"d1"}, max_queries=1).height == 1
    bad = jsonl(tmp_path / "bad.jsonl", [ok, {**ok, "query_id": "q2", "answers": "a"}])
    with pytest.raises(DatasetError, match="line 2: field 'answers' must be a list of strings"):
        load_qa(bad)
    for field, value in (("answers", 7), ("relevant_doc_ids", 3), ("answers", {"a": 1})):
        bad = jsonl(tmp_path / "bad2.jsonl", [{**ok, field: value}])
        with pytest.raises(DatasetError, match=f"line 1: field '{field}' must be a list of strings"):
            load_qa(bad)
    unknown = jsonl(tmp_path / "u.jsonl", [{**ok, "relevant_doc_ids": ["nope"]}])
    with pytest.raises(DatasetError, match="line 1: field 'relevant_doc_ids'"):
        load_qa(unknown, {"d1"})
    with pytest.raises(DatasetError, match="file not found"):
        load_qa(tmp_path / "missing.jsonl")


@pytest.mark.parametrize("answer", ["", "The", "...", " a ", "."])
def test_a_gold_answer_that_normalizes_to_nothing_is_dropped_and_counted(tmp_path, answer):
    """CLAP NQ's dev split has a gold answer '.': the whole set was refused. Nothing can match such an
    answer (an empty reply would, EM 1): it is dropped with a warning naming it and counting what is left
    without a reference answer."""
    ok = {"query_id": "q1", "question": "?", "answers": ["Paris"], "relevant_doc_ids": []}
    rows = [
        ok,
        {**ok, "query_id": "q2", "question": "??", "answers": ["Paris", answer]},
        {**ok, "query_id": "q3", "question": "???", "answers": [answer]},
    ]
    p = jsonl(tmp_path / "q.jsonl", rows)
    with pytest.warns(DataWarning) as caught:
        qa = load_qa(p)
    assert qa["answers"].to_list() == [["Paris"], ["Paris"], []]
    message, blank = [str(w.message) for w in caught]
    assert "q.jsonl: field 'answers': 2 gold answer(s) empty once normalized" in message
    assert f"q.jsonl: line 2 answer 2 ({answer!r})" in message
    assert "1 question(s) left with no reference answer" in message
    # q3 has no gold document either: nothing but a judge can score it
    assert "1 question(s) with no reference answer and no gold document (" in blank and "'q3'" in blank


def test_graded_relevance(tmp_path):
    base = {"question": "?", "answers": ["x"], "relevant_doc_ids": ["d1", "d2"]}
    p = jsonl(
        tmp_path / "g.jsonl",
        [
            {**base, "query_id": "q1", "relevant_doc_grades": [3, 1]},
            {**base, "query_id": "q2", "question": "??"},
        ],
    )
    df = load_qa(p)
    assert df["relevant_doc_grades"].to_list() == [[3.0, 1.0], [1.0, 1.0]]
    assert (
        "relevant_doc_grades" not in load_qa(jsonl(tmp_path / "b.jsonl", [{**base, "query_id": "q"}])).columns
    )
    bad = jsonl(tmp_path / "bad.jsonl", [{**base, "query_id": "q1", "relevant_doc_grades": [3]}])
    with pytest.raises(DatasetError, match="line 1: field 'relevant_doc_grades'"):
        load_qa(bad)


def test_graded_ndcg_flows_through_evaluation(tmp_path):
    import math

    from rag_core.metrics import evaluate_queries

    qa = pl.DataFrame(
        {
            "query_id": ["q"],
            "question": ["?"],
            "answers": [["a"]],
            "relevant_doc_ids": [["d1", "d2"]],
            "relevant_doc_grades": [[1.0, 3.0]],
        }
    )
    ret = pl.DataFrame(
        {
            "query_id": ["q"],
            "chunk_ids": [["c1", "c2"]],
            "doc_ids": [["d1", "d2"]],
            "texts": [["a", "b"]],
            "latency_ms": [1.0],
        }
    )
    ans = pl.DataFrame(
        {"query_id": ["q"], "answer": ["a"], "error": [None], "latency_ms": [1.0]},
        schema_overrides={"error": pl.String},
    )
    ndcg = evaluate_queries(qa, ret, ans, top_k=2)["ndcg_at_k"][0]
    assert ndcg == pytest.approx((1 + 3 / math.log2(3)) / (3 + 1 / math.log2(3)))


def test_corpus_metadata_as_json_text_and_unreadable_files(tmp_path):
    """Parquet often stores metadata as JSON text: it is read as the object it encodes. A file of a
    directory corpus that is not UTF-8 is an error naming the file, not a UnicodeDecodeError."""
    p = tmp_path / "c.parquet"
    pl.DataFrame({"doc_id": ["a"], "text": ["x"], "metadata": ['{"year": 2001}']}).write_parquet(p)
    assert json.loads(load_corpus(p)["metadata"][0]) == {"year": 2001}
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "good.txt").write_text("fine")
    (folder / "bad.txt").write_bytes("caf\xe9".encode("latin-1"))
    with pytest.raises(DatasetError, match=r"bad\.txt: not UTF-8 text \(byte 3"):
        load_corpus(folder)
