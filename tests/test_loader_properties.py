"""Property-based tests of the loaders (Hypothesis): whatever rows a corpus or QA file holds, loading it
gives a valid frame or one DatasetError that names the file; never another exception (a traceback)."""

from __future__ import annotations

import json
import math
import re
import warnings
from pathlib import Path

import polars as pl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rag_core.data.datasets import DatasetError, load_corpus, load_qa

# JSON values of every shape a hand-made or exported file holds in a field
scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=12))
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)
ids = st.one_of(st.text(min_size=1, max_size=4), st.integers(0, 5), values)
texts = st.one_of(st.text(max_size=30), values)


def field_or_missing(strategy):
    return st.one_of(strategy, st.just(...))  # ...: the field is left out


def row(fields: dict) -> st.SearchStrategy:
    return st.fixed_dictionaries({k: field_or_missing(v) for k, v in fields.items()}).map(
        lambda d: {k: v for k, v in d.items() if v is not ...}
    )


corpus_rows = row({"doc_id": ids, "text": texts, "title": texts, "metadata": values})
qa_rows = row(
    {
        "query_id": ids,
        "question": texts,
        "answers": st.one_of(st.lists(st.text(max_size=8), max_size=3), values),
        "relevant_doc_ids": st.one_of(st.lists(st.sampled_from(["d1", "d2", "zz"]), max_size=3), values),
        "relevant_doc_grades": st.one_of(st.lists(st.floats(), max_size=3), values),  # NaN, ±Infinity too
    }
)
SETTINGS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@SETTINGS
@given(rows=st.lists(corpus_rows, max_size=4))
def test_any_corpus_rows_load_or_fail_in_one_line_naming_the_file(tmp_path, rows):
    path = _write(tmp_path / "corpus.jsonl", rows)
    try:
        frame = load_corpus(path)
    except DatasetError as e:
        assert str(path) in str(e) and "\n" not in str(e)
        return
    assert frame.height == len(rows) and frame["doc_id"].n_unique() == frame.height
    assert frame["text"].dtype == pl.String


@SETTINGS
@given(rows=st.lists(qa_rows, max_size=4))
def test_any_qa_rows_load_or_fail_in_one_line_naming_the_file(tmp_path, rows):
    path = _write(tmp_path / "qa.jsonl", rows)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            frame = load_qa(path, {"d1", "d2"})
    except DatasetError as e:
        assert str(path) in str(e) and "\n" not in str(e)
        return
    assert frame.height == len(rows) and frame["query_id"].n_unique() == frame.height
    assert all(isinstance(a, str) and a for answers in frame["answers"].to_list() for a in answers)
    assert set(frame["relevant_doc_ids"].explode().drop_nulls()) <= {"d1", "d2"}
    if "relevant_doc_grades" in frame.columns:
        assert all(math.isfinite(g) and g > 0 for gs in frame["relevant_doc_grades"].to_list() for g in gs)


# a qrels score: any text a file can hold in a tab-separated field, and the spellings float() reads beyond
# plain decimals (NaN, infinity, underscores, non-ASCII digits, hexadecimal)
PLAIN_DECIMAL = re.compile(r" *[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)? *")
scores = st.one_of(
    st.text(max_size=8),
    st.from_regex(PLAIN_DECIMAL, fullmatch=True),
    st.floats().map(str),
    st.sampled_from(
        ["nan", "-NaN", "inf", "+Infinity", "1_0", "1e999", "0x1", "\u0661", "\uff11", "1.5\u00a0"]
    ),
).filter(lambda t: not set(t) & set('\t\r\n"'))  # one field of one line, unquoted


@SETTINGS
@given(score=scores, header=st.booleans())
def test_a_qrels_score_loads_only_as_a_plain_finite_decimal(tmp_path, score, header):
    root = tmp_path / "beir"
    (root / "qrels").mkdir(parents=True, exist_ok=True)
    _write(root / "queries.jsonl", [{"_id": "q1", "text": "?"}, {"_id": "q2", "text": "?"}])
    lines = ["query-id\tcorpus-id\tscore"] * header + ["q2\td2\t1", f"q1\td1\t{score}"]
    (root / "qrels" / "test.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    finite = PLAIN_DECIMAL.fullmatch(score) is not None and math.isfinite(float(score))
    try:
        frame = load_qa(root)
    except DatasetError as e:
        assert not finite, str(e)
        assert f"test.tsv: line {len(lines)}: field 'score'" in str(e)
        return
    assert finite
    grades = dict(zip(frame["query_id"], frame["relevant_doc_grades"].to_list(), strict=True))
    assert grades == ({"q1": [float(score)]} if float(score) > 0 else {}) | {"q2": [1.0]}


# a valid sweep's sections, each of which a generated spec may replace by any value or leave out
VALID = {
    "name": "prop",
    "data": {"corpus": "corpus.jsonl", "qa": "qa.jsonl"},
    "chunking": {"method": "recursive", "chunk_size": 300, "chunk_overlap": 40},
    "retrieval": {"mode": ["vector", "bm25"], "top_k": 4},
    "rerank": {"method": "none"},
    "generation": {"model": "extractive"},
    "search": {"strategy": "grid"},
    "decision": {"holdout": 0},
}
section_values = st.one_of(
    values,
    st.dictionaries(
        st.sampled_from(
            ["method", "chunk_size", "chunk_overlap", "mode", "top_k", "model", "strategy", "holdout"]
        ),
        values,
        max_size=3,
    ),
)


@SETTINGS
@given(
    changes=st.dictionaries(
        st.sampled_from([*VALID, "weights", "evaluation", "unknown"]),
        st.one_of(section_values, st.just(...)),
        max_size=3,
    )
)
def test_any_sweep_spec_loads_or_fails_in_one_line_naming_the_file(tmp_path, changes):
    import yaml

    from rag_core.planning.spec import SpecError, load_sweep

    _write(tmp_path / "corpus.jsonl", [{"doc_id": "d1", "text": "Paris is in France."}])
    _write(
        tmp_path / "qa.jsonl",
        [{"query_id": "q1", "question": "?", "answers": ["Paris"], "relevant_doc_ids": ["d1"]}],
    )
    spec = {k: v for k, v in {**VALID, **changes}.items() if v is not ...}
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(spec))
    try:
        sweep = load_sweep(path)
    except SpecError as e:
        assert str(path) in str(e), str(e)
        return
    assert sweep.configs
