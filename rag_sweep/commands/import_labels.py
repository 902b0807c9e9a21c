"""`rag-sweep import-labels`: people's verdicts on a RAG app's answers, recorded in MLflow as assessments of
its traces, as the labels file `calibrate-judge` and `evaluation.judge_labels` read.

A trace gives a row when it has a human feedback assessment named `--assessment` (default `supported`, a
yes/no value; the latest of several wins), a question and an answer. The question is the trace's input field
`question` (else `query`, `input`, or its only text input), the answer its output field `answer` (else
`output`, `response`, `text`, or a text output), and the context the texts of its retriever spans' documents,
in order (else an input or output field `context`). A trace lacking one of them is skipped and counted by
reason; none at all is an error. The file is JSONL, one row per trace with its `trace_id`, so the labels a
sweep is judged against stay a file of their own, with its own fingerprint.
"""

from __future__ import annotations

import json
from pathlib import Path

from rag_core.planning.spec import SpecError

QUESTION_FIELDS = ("question", "query", "input")
ANSWER_FIELDS = ("answer", "output", "response", "text")
TRUE, FALSE = {"true", "1", "1.0", "yes", "y"}, {"false", "0", "0.0", "no", "n"}


def add_parser(sub) -> None:
    cmd = sub.add_parser(
        "import-labels",
        help="people's verdicts recorded in MLflow (human feedback on traces) as a labels file for "
        "calibrate-judge and evaluation.judge_labels",
    )
    cmd.add_argument("experiment", help="the MLflow experiment (name or id) holding the app's traces")
    cmd.add_argument("--out", required=True, help="the labels file to write (JSONL)")
    cmd.add_argument("--assessment", default="supported", help="the feedback's name (default: supported)")
    cmd.add_argument("--tracking-uri", help="the MLflow tracking server (default $MLFLOW_TRACKING_URI)")
    cmd.set_defaults(handler=run)


def _text(value) -> str | None:
    return value if isinstance(value, str) and value.strip() else None


def _parsed(payload):
    """A trace's request or response: its JSON object, or its text."""
    if isinstance(payload, str):
        try:
            return json.loads(payload)
        except ValueError:
            return payload
    return payload


def _field(payload, names: tuple[str, ...]) -> str | None:
    """A text field of a trace's request or response: the first of `names`, else its only text value."""
    payload = _parsed(payload)
    if not isinstance(payload, dict):
        return _text(payload)
    for name in names:
        if _text(payload.get(name)):
            return payload[name]
    texts = [v for v in payload.values() if _text(v)]
    return texts[0] if len(texts) == 1 else None


def _context(trace) -> str | None:
    """The texts of the trace's retriever spans' documents, in span order; else a `context` field."""
    texts = [
        doc["page_content"]
        for span in trace.data.spans
        if span.span_type == "RETRIEVER" and isinstance(span.outputs, list)
        for doc in span.outputs
        if isinstance(doc, dict) and _text(doc.get("page_content"))
    ]
    if texts:
        return "\n\n".join(texts)
    for payload in map(_parsed, (trace.data.request, trace.data.response)):
        if isinstance(payload, dict) and _text(payload.get("context")):
            return payload["context"]
    return None


def _verdict(trace, name: str) -> bool | None:
    """The latest human feedback named `name`, as a yes/no; None when there is none (or it is not yes/no)."""
    from mlflow.entities import Feedback

    human = [
        a
        for a in trace.info.assessments or []
        if a.name == name
        and isinstance(a, Feedback)  # a verdict, not an expectation (a reference answer) of the same name
        and getattr(a.source, "source_type", None) == "HUMAN"
        and getattr(a, "valid", True) is not False  # one overridden since is not the verdict
    ]
    if not human:
        return None
    latest = max(human, key=lambda a: a.last_update_time_ms or a.create_time_ms or 0)
    value = str(latest.value).strip().lower()
    return True if value in TRUE else False if value in FALSE else None


def label_rows(traces, assessment: str) -> tuple[list[dict], dict[str, int]]:
    """The labelled rows of `traces`, and how many traces were skipped for each reason."""
    rows, skipped = [], {}
    for trace in traces:
        supported = _verdict(trace, assessment)
        row = {
            "question": _field(trace.data.request, QUESTION_FIELDS),
            "answer": _field(trace.data.response, ANSWER_FIELDS),
            "context": _context(trace),
        }
        reason = next(
            (
                why
                for why, bad in (
                    (f"no human '{assessment}' feedback with a yes/no value", supported is None),
                    ("no question", row["question"] is None),
                    ("no answer", row["answer"] is None),
                    ("no context (no retriever span, no context field)", row["context"] is None),
                )
                if bad
            ),
            None,
        )
        if reason:
            skipped[reason] = skipped.get(reason, 0) + 1
            continue
        rows.append({**row, "supported": supported, "trace_id": trace.info.trace_id})
    return rows, skipped


def run(args) -> int:
    import mlflow

    from resources.environment import text

    uri = args.tracking_uri or text("MLFLOW_TRACKING_URI")
    if not uri:
        raise SpecError("import-labels: give --tracking-uri or set MLFLOW_TRACKING_URI")
    client = mlflow.MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name(args.experiment)
    if experiment is None and args.experiment.isdigit():
        experiment = client.get_experiment(args.experiment)
    if experiment is None:
        raise SpecError(f"import-labels: no MLflow experiment {args.experiment!r} at the tracking server")
    traces, token = [], None
    while True:
        page = client.search_traces(locations=[experiment.experiment_id], max_results=500, page_token=token)
        traces += list(page)
        token = page.token
        if not token:
            break
    rows, skipped = label_rows(traces, args.assessment)
    for reason, n in sorted(skipped.items()):
        print(f"skipped {n} trace(s): {reason}")
    if not rows:
        raise SpecError(
            f"import-labels: none of the {len(traces)} traces of {args.experiment!r} gives a label"
        )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    yes = sum(r["supported"] for r in rows)
    print(f"{len(rows)} labels ({yes} supported, {len(rows) - yes} not) from {len(traces)} traces -> {out}")
    return 0
