"""The filter format (parse, reference semantics, filterable fields) and the in-process BM25."""

from __future__ import annotations

import json
import math

import pytest

from rag_core.data.filters import FilterError, filterable_attributes, matches, parse_filter
from rag_core.planning.plan import Plan
from rag_core.planning.spec import SpecError, sweep_from_dict
from rag_core.retrieval.bm25 import BM25Index, idf, term_weights, tokenize


def test_parse_flattens_ranges_and_and():
    conds = parse_filter(
        {"year": {"$gte": 2000, "$lt": 2010}, "$and": [{"lang": "en"}, {"n": {"$in": [1, 2]}}]}
    )
    assert [(c.field, c.op, c.value) for c in conds] == [
        ("year", "$gte", 2000),
        ("year", "$lt", 2010),
        ("lang", "$eq", "en"),
        ("n", "$in", (1, 2)),
    ]
    assert parse_filter(None) == () and parse_filter({}) == ()


@pytest.mark.parametrize(
    "where, message",
    [
        ({"year": {"$between": [1, 2]}}, "field 'year': unknown operator '\\$between'"),
        ({"year": {"$gt": "2000"}}, "field 'year': '\\$gt' compares numbers"),
        ({"lang": {"$in": []}}, "'\\$in' takes a non-empty list"),
        ({"lang": {"$in": "en"}}, "'\\$in' takes a non-empty list"),
        ({"$or": [{"a": 1}]}, "unknown filter operator '\\$or'"),
        ({"tags": ["a"]}, "field 'tags': '\\$eq' takes a str/int/float/bool value"),
        ({"year": {}}, "field 'year': empty operator mapping"),
    ],
)
def test_bad_filters_name_the_field(where, message):
    with pytest.raises(FilterError, match=message):
        parse_filter(where)


def test_reference_semantics():
    rec = {"doc_id": "d1", "year": 2001, "draft": True, "lang": None}
    assert matches(parse_filter({"year": {"$gt": 2000, "$lte": 2001}}), rec)
    assert not matches(parse_filter({"year": {"$gt": 2001}}), rec)
    assert not matches(parse_filter({"lang": "en"}), rec)  # null never matches
    assert not matches(parse_filter({"missing": 1}), rec)  # nor does a missing field
    assert matches(parse_filter({"draft": True}), rec)
    assert not matches(parse_filter({"draft": 1}), rec)  # a bool is not the number 1
    assert not matches(parse_filter({"year": True}), {"year": 1})
    assert matches(parse_filter({"doc_id": {"$in": ["d0", "d1"]}}), rec)


def test_filterable_attributes_types_and_exclusions():
    rows = [
        {
            "doc_id": "a",
            "metadata": json.dumps({"n": 1, "x": 1.5, "s": "u", "b": True, "l": [1], "bad key": 1}),
        },
        {"doc_id": "b", "metadata": json.dumps({"n": 2.5, "x": 2, "s": 3, "text": "reserved"})},
        {"doc_id": "c", "metadata": "{}"},
    ]
    fields, values = filterable_attributes(rows)
    # ints and floats mix as float; str mixed with int, lists, reserved and non-identifier keys are left out
    assert fields == {"doc_id": "str", "n": "float", "x": "float", "b": "bool"}
    assert values == [
        {"doc_id": "a", "n": 1.0, "x": 1.5, "b": True},
        {"doc_id": "b", "n": 2.5, "x": 2.0},
        {"doc_id": "c"},
    ]


def test_bm25_by_hand():
    texts = ["the cat sat", "the dog", "cat cat cat"]
    index = BM25Index(texts)
    avg = 8 / 3
    # "cat" is in 2 of 3 documents
    w_cat_0 = 1 * 2.2 / (1 + 1.2 * (0.25 + 0.75 * 3 / avg))
    w_cat_2 = 3 * 2.2 / (3 + 1.2 * (0.25 + 0.75 * 3 / avg))
    expected = [(2, idf(3, 2) * w_cat_2), (0, idf(3, 2) * w_cat_0)]
    got = index.search("Cat?", 10)
    assert [i for i, _ in got] == [2, 0] and all(
        math.isclose(a[1], b[1]) for a, b in zip(got, expected, strict=True)
    )
    assert index.search("bird", 10) == [] and index.search("cat", 10, allowed={0}) == [(0, got[1][1])]
    assert idf(3, 2) == pytest.approx(math.log(1 + 1.5 / 2.5))
    assert term_weights(tokenize("a a b"), 3.0)["a"] > term_weights(tokenize("a a b"), 3.0)["b"]


def test_sweep_spec_validates_filters_and_stores(tmp_path):
    base = {
        "name": "f",
        "data": {"corpus": "c.jsonl", "qa": "q.jsonl"},
        "chunking": {"method": "fixed", "chunk_size": 100, "chunk_overlap": 0},
    }
    with pytest.raises(SpecError, match=r"field 'retrieval.filter': .*'year': '\$gt' compares numbers"):
        sweep_from_dict(
            {**base, "retrieval": {"mode": "vector", "top_k": 3, "filter": {"year": {"$gt": "x"}}}},
            tmp_path / "s.yaml",
        )
    with pytest.raises(SpecError, match="field 'index.store'"):
        sweep_from_dict(
            {**base, "index": {"store": "pinecone"}, "retrieval": {"mode": "vector", "top_k": 3}},
            tmp_path / "s.yaml",
        )
    sweep = sweep_from_dict(
        {
            **base,
            "index": {"store": ["lancedb", "qdrant"]},
            "retrieval": {"mode": "vector", "top_k": 3, "filter": [None, {"year": {"$gte": 2000}}]},
        },
        tmp_path / "s.yaml",
    )
    plan = Plan.resolve(sweep)
    assert (
        len(sweep.configs) == 4 and len(plan.keys("embeddings")) == 1 and len(plan.keys("vector_index")) == 2
    )
    assert len(plan.keys("retrievals")) == 4
