"""What the shipped model's `predict` does with what it is given: one output row per input row, in order; a
row that is not a question (null, a number, a list, a mapping, a boolean, blank text, a lone surrogate) is
that row's error with a null answer, the others are answered; no rows at all is an empty reply with the same
columns. Through `mlflow.pyfunc.load_model` too: the model's signature lets every row reach `predict`.

The model is built once, from a handful of documents chunked and embedded here (no sweep run): the index,
retrieval and extractive reader are the real ones."""

from __future__ import annotations

import json

import mlflow.pyfunc
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from resources.shipping.bundle import save
from resources.shipping.pipeline import OUTPUT, question_of, rows_of
from tests.small_model import small_bundle


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A hybrid-retrieval, extractive config over a few documents, saved and loaded as MLflow does."""
    tmp = tmp_path_factory.mktemp("serving")
    return mlflow.pyfunc.load_model(str(save(small_bundle(tmp), tmp / "model")))


QUESTION = "Which magazine was started first, Arthur's Magazine or First for Women?"


@pytest.mark.parametrize(
    ("value", "error"),
    [
        (None, "question is missing or not a string (got null)"),
        (float("nan"), "question is missing or not a string (got null)"),
        (pd.NA, "question is missing or not a string (got null)"),
        (3, "question is missing or not a string (got int)"),
        (1.5, "question is missing or not a string (got float)"),
        (True, "question is missing or not a string (got bool)"),
        (["a"], "question is missing or not a string (got list)"),
        ({"question": "a"}, "question is missing or not a string (got dict)"),
        ("", "question is empty"),
        (" \n", "question is empty"),
        ("why \ud800?", "question is not valid Unicode text (it holds a lone surrogate)"),
    ],
)
def test_a_value_that_is_not_a_question_says_why(value, error):
    assert question_of(value) == (None, error)


def test_questions_are_taken_as_they_are():
    assert question_of(QUESTION) == (QUESTION, None)
    assert question_of("naïve 東京 🙂") == ("naïve 東京 🙂", None)


def test_the_rows_of_each_input_format():
    assert rows_of(pd.DataFrame()) == []  # {"dataframe_records": []}: no rows, no columns
    assert rows_of(pd.DataFrame({"question": []})) == []
    assert rows_of(pd.DataFrame({"question": pd.Series(["a", None], dtype=object), "n": [1, 2]})) == [
        "a",
        None,
    ]
    assert rows_of(["a", None]) == ["a", None]
    assert rows_of([{"question": "a"}, {"q": "b"}]) == ["a", None]
    assert rows_of({"question": "a"}) == ["a"]
    assert rows_of({"question": ["a", 3]}) == ["a", 3]
    assert rows_of("a") == ["a"]
    with pytest.raises(ValueError, match="needs a 'question' column"):
        rows_of(pd.DataFrame({"q": ["a"]}))


def _check_rows(predicted: pd.DataFrame, values: list) -> None:
    """One row per value, in order: a question answered (its text, an answer, contexts), anything else
    that row's error with a null answer and no contexts."""
    assert list(predicted.columns) == list(OUTPUT)
    assert len(predicted) == len(values)
    for value, row in zip(values, predicted.to_dict("records"), strict=True):
        text, why = question_of(value)
        if why is None and row["error"] is None:
            assert row["question"] == text and isinstance(row["answer"], str)
            assert len(row["doc_ids"]) == len(row["texts"]) > 0
        else:
            assert row["answer"] is None and isinstance(row["error"], str) and row["error"]
            if why is not None:
                assert row["error"] == why and list(row["doc_ids"]) == []


def test_one_bad_row_is_its_own_error_through_the_loaded_model(model):
    """The loaded pyfunc model (its signature enforced as MLflow does) answers the questions of a batch
    holding a null, a lone surrogate, a number, a list, a mapping, a boolean and blank text."""
    values = [QUESTION, None, "\ud800", 3, ["a"], {"a": 1}, True, "", "Who wrote Arthur's Magazine?"]
    predicted = model.predict(pd.DataFrame({"question": values}))
    _check_rows(predicted, values)
    assert predicted["answer"].notna().tolist() == [True] + [False] * 7 + [True]
    assert predicted["error"][1] == "question is missing or not a string (got null)"
    assert predicted["question"][1] is None and predicted["question"][2] == "\\ud800"
    assert predicted["answer"][0] != "None" and "None" not in predicted["question"].dropna().tolist()


@pytest.mark.parametrize(
    "column",
    [[None], [None, QUESTION], [3], [1.5, None], [True, False], [QUESTION, "\ud800"]],
    ids=["null", "null-and-text", "int", "float", "bool", "surrogate"],
)
def test_a_column_of_one_type_reaches_predict(model, column):
    """A column pandas types as numbers or booleans, which a string signature rejects before predict. (A
    lone surrogate needs an object column: pandas' own string type cannot hold one.)"""
    dtype = object if any(isinstance(v, str) and v.startswith("\ud800") for v in column) else None
    _check_rows(model.predict(pd.DataFrame({"question": pd.Series(column, dtype=dtype)})), column)


@pytest.mark.parametrize(
    "frame", [pd.DataFrame(), pd.DataFrame({"question": []})], ids=["no-columns", "question"]
)
def test_no_rows_is_an_empty_reply(model, frame):
    predicted = model.predict(frame)
    assert len(predicted) == 0 and list(predicted.columns) == list(OUTPUT)


def test_served_rows_each_get_their_answer_or_error(model, monkeypatch):
    """As `mlflow models serve` parses and answers /invocations (its app, in process): a null stays a
    null, the rows are answered one by one, and no rows is an empty list of predictions."""
    from fastapi.testclient import TestClient
    from mlflow.pyfunc import scoring_server

    monkeypatch.delenv("_MLFLOW_IS_IN_SERVING_ENVIRONMENT", raising=False)  # init sets it: undone after
    client = TestClient(scoring_server.init(model))

    def post(body: str):
        reply = client.post("/invocations", content=body, headers={"Content-Type": "application/json"})
        assert reply.status_code == 200, reply.text
        return reply.json()["predictions"]

    assert post('{"dataframe_records": []}') == []
    records = [{"question": QUESTION}, {"question": None}, {"question": 3}, {"question": ["a"]}]
    body = json.dumps({"dataframe_records": records})[:-2] + ', {"question": "\\ud800"}]}'  # a lone surrogate
    predictions = post(body)
    assert [p["error"] is None for p in predictions] == [True, False, False, False, False]
    assert [p["answer"] is None for p in predictions] == [False, True, True, True, True]
    assert predictions[1]["error"] == "question is missing or not a string (got null)"
    assert predictions[4]["question"] == "\\ud800" and "surrogate" in predictions[4]["error"]


# text: any (hypothesis leaves surrogates out of it), text holding a lone surrogate, and real questions
TEXT = (
    st.text(max_size=20)
    | st.builds(str.__add__, st.text(max_size=5), st.characters(categories=["Cs"]))
    | st.sampled_from([QUESTION, "Who wrote Arthur's Magazine?"])
)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.lists(TEXT | JSON, max_size=6))  # half of the rows text, so that most batches ask something
def test_any_json_values_get_one_row_each_never_raising(model, values):
    """Any JSON values as the questions of a batch: exactly one output row per input row, in order, each
    an answer or an error."""
    # an object column (pandas' string type cannot hold a lone surrogate; typed columns: above)
    frame = pd.DataFrame({"question": pd.Series(values, dtype=object)}) if values else pd.DataFrame()
    _check_rows(model.predict(frame), values)


def test_a_question_the_pipeline_fails_on_is_its_row_error(model, monkeypatch):
    """When the pipeline raises on a batch, the questions are answered one at a time: the one it fails on
    is that row's error, the others are answered."""
    pipeline = model.unwrap_python_model()
    answer = type(pipeline)._answer

    def failing(self, questions):
        if "boom" in questions:
            raise RuntimeError("the store refused the query")
        return answer(self, questions)

    monkeypatch.setattr(type(pipeline), "_answer", failing)
    predicted = model.predict(pd.DataFrame({"question": [QUESTION, "boom", "Who wrote Arthur's Magazine?"]}))
    assert predicted["answer"].notna().tolist() == [True, False, True]
    assert predicted["error"].tolist() == [None, "RuntimeError: the store refused the query", None]
    assert predicted["question"].tolist()[1] == "boom" and list(predicted["doc_ids"][1]) == []
