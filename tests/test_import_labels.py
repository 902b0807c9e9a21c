"""`rag-sweep import-labels`: human feedback on an app's MLflow traces becomes the labels file calibrate-judge
reads; traces it cannot use are counted by reason, never guessed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from rag_core.metrics.judge_agreement import read_labels
from tests.conftest import ROOT

pytestmark = pytest.mark.slow  # an MLflow store and three CLI processes: ~25 s

TRACES = """
import time

import mlflow
from mlflow.entities import AssessmentSource, Document, SpanType

mlflow.set_experiment("rag-app")
HUMAN = AssessmentSource(source_type="HUMAN", source_id="alice")
JUDGE = AssessmentSource(source_type="LLM_JUDGE", source_id="gpt")


def trace(question, answer, docs=None, context=None):
    with mlflow.start_span(name="app", span_type=SpanType.CHAIN) as root:
        root.set_inputs({"question": question, **({"context": context} if context else {})})
        if docs:
            with mlflow.start_span(name="search", span_type=SpanType.RETRIEVER) as span:
                span.set_inputs({"query": question})
                span.set_outputs([Document(page_content=d) for d in docs])
        root.set_outputs({"answer": answer})
        trace_id = root.trace_id
    mlflow.flush_trace_async_logging()
    return trace_id


def feedback(trace_id, value, source=HUMAN, name="supported"):
    mlflow.log_feedback(trace_id=trace_id, name=name, value=value, source=source)
    time.sleep(0.01)  # the latest feedback is the later one


feedback(trace("Who wrote Hamlet?", "Shakespeare", ["Hamlet is a play by Shakespeare.", "It is set in Denmark."]), True)
feedback(trace("Capital of France?", "Lyon", ["Paris is the capital of France."]), "no")
changed = trace("Largest planet?", "Saturn", ["Jupiter is the largest planet."])
feedback(changed, True)
feedback(changed, False)  # a second look: the latest verdict stands
feedback(trace("Boiling point?", "100 C", context="Water boils at 100 C at sea level."), "yes")
feedback(trace("Who painted it?", "Monet", ["Water Lilies is by Monet."]), True, source=JUDGE)
feedback(trace("Tallest tree?", "A redwood", ["Coast redwoods grow tallest."]), "maybe")
trace("Unlabelled?", "yes", ["text"])
"""


def _cli(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "rag_sweep.cli", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
    )


def test_human_feedback_on_mlflow_traces_becomes_the_labels_file(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    script = tmp_path / "traces.py"
    script.write_text(textwrap.dedent(TRACES))
    made = subprocess.run(
        [sys.executable, str(script)],
        env={**os.environ, "MLFLOW_TRACKING_URI": uri},
        capture_output=True,
        text=True,
    )
    assert made.returncode == 0, made.stderr[-2000:]

    out = tmp_path / "labels.jsonl"
    r = _cli("import-labels", "rag-app", "--out", out, "--tracking-uri", uri)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    got = {row["question"]: (row["answer"], row["context"], row["supported"]) for row in rows}
    assert got == {
        "Who wrote Hamlet?": (
            "Shakespeare",
            "Hamlet is a play by Shakespeare.\n\nIt is set in Denmark.",
            True,
        ),
        "Capital of France?": ("Lyon", "Paris is the capital of France.", False),
        "Largest planet?": ("Saturn", "Jupiter is the largest planet.", False),
        "Boiling point?": ("100 C", "Water boils at 100 C at sea level.", True),
    }
    assert all(row["trace_id"].startswith("tr-") for row in rows)
    # an LLM judge's feedback is not a person's; a verdict that is not yes/no is no label; nor is none
    assert "skipped 3 trace(s): no human 'supported' feedback with a yes/no value" in r.stdout
    assert "4 labels (2 supported, 2 not) from 7 traces" in r.stdout
    # the file is what calibrate-judge and evaluation.judge_labels read
    labelled, labels = read_labels(out)
    assert len(labelled) == 4 and sorted(labels) == [False, False, True, True]

    none = _cli("import-labels", "rag-app", "--out", out, "--tracking-uri", uri, "--assessment", "helpful")
    assert none.returncode == 2 and "none of the 7 traces of 'rag-app' gives a label" in none.stderr
    missing = _cli("import-labels", "no-such-app", "--out", out, "--tracking-uri", uri)
    assert missing.returncode == 2 and "no MLflow experiment 'no-such-app'" in missing.stderr
