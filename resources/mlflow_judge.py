"""The sweep's faithfulness judge and its labels in MLflow's terms, for `Judge.align()`.

- `SweepJudge`: an MLflow `Judge` whose instructions are the judge's prompt template. Calling it asks the
  judge exactly as a sweep's evaluation does (rag_core/evaluation/evaluate.py `judge_row`: the template,
  temperature 0, through the project's LLM client and its call cache) and returns a `Feedback` with the
  numeric score, or with the error when the call failed or the verdict did not parse.
- `labelled_traces`: one MLflow `Trace` per labelled row, built in memory (nothing is logged): a root span
  whose inputs are the question and the context and whose output is the answer, carrying the person's
  verdict as a HUMAN-source `Feedback` named after the judge (`supported`, as `rag-sweep import-labels`
  reads it).
- `human_verdicts`: reads the rows and verdicts back from traces the way MLflow's own optimizers do
  (mlflow/genai/judges/optimizers/dspy_utils.py `trace_to_dspy_example`): the root span's inputs and
  outputs; the HUMAN feedback whose name is the judge's (case and surrounding spaces aside); of several that
  differ, the majority, a tie going to the most recent.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

from mlflow.entities import AssessmentSource, Feedback, Span, SpanType, Trace, TraceData, TraceInfo
from mlflow.entities.trace_location import TraceLocation
from mlflow.entities.trace_state import TraceState
from mlflow.genai.judges.base import Judge, JudgeField
from mlflow.genai.utils.trace_utils import extract_inputs_from_trace, extract_outputs_from_trace
from pydantic import PrivateAttr

from rag_core.common.completion import Completer
from rag_core.common.concurrency import map_concurrently
from rag_core.evaluation.evaluate import judge_row
from rag_core.metrics.judge import JUDGE_PROMPT

NAME = "supported"  # the feedback's name: the labels' field, import-labels' default assessment
TRUE = {"true", "1", "1.0", "yes", "y", "supported"}
FALSE = {"false", "0", "0.0", "no", "n", "unsupported"}


class SweepJudge(Judge):
    """The sweep's faithfulness judge as an MLflow Judge (`llm`: the project's LLM client)."""

    model: str
    _instructions: str = PrivateAttr(default=JUDGE_PROMPT)
    _llm: Any = PrivateAttr(default=None)

    def __init__(self, llm: Completer, model: str, instructions: str = JUDGE_PROMPT, name: str = NAME):
        super().__init__(name=name, model=model)
        self._llm, self._instructions = llm, instructions

    @property
    def instructions(self) -> str:
        return self._instructions

    @property
    def feedback_value_type(self) -> Any:
        return float

    def get_input_fields(self) -> list[JudgeField]:
        return [
            JudgeField(name="inputs", description="the question and the context the answer was given"),
            JudgeField(name="outputs", description="the answer"),
        ]

    def with_instructions(self, instructions: str) -> SweepJudge:
        """The same judge asked with another prompt (same fields)."""
        return SweepJudge(self._llm, self.model, instructions, self.name)

    def __call__(self, *, inputs=None, outputs=None, expectations=None, trace=None) -> Feedback:
        if trace is not None and inputs is None:
            inputs, outputs = extract_inputs_from_trace(trace), extract_outputs_from_trace(trace)
        row = {**(inputs or {}), **(outputs or {})}
        score, why = judge_row(self._llm, self.model, row, self._instructions)
        source = AssessmentSource(source_type="LLM_JUDGE", source_id=self.model)
        if score is None:
            return Feedback(name=self.name, error=why, source=source)
        return Feedback(name=self.name, value=score, source=source)


def scores(judge: Judge, rows: list[dict], workers: int) -> list[float | None]:
    """`judge`'s numeric score of each row (question, answer, context); None where it gave none."""

    def one(row: dict) -> float | None:
        feedback = judge(
            inputs={"question": row["question"], "context": row["context"]}, outputs={"answer": row["answer"]}
        )
        value = feedback.value if feedback.error is None else None
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None

    return map_concurrently(one, rows, workers, what="labelled answers judged")


def _span(trace_id: str, digest: bytes, row: dict) -> Span:
    """The trace's one (root) span, in MLflow's span serialization."""
    return Span.from_dict(
        {
            "trace_id": base64.b64encode(digest[:16]).decode(),
            "span_id": base64.b64encode(digest[16:24]).decode(),
            "parent_span_id": None,
            "name": "labelled_answer",
            "start_time_unix_nano": 0,
            "end_time_unix_nano": 0,
            "status": {"code": "STATUS_CODE_OK", "message": ""},
            "attributes": {
                "mlflow.traceRequestId": json.dumps(trace_id),
                "mlflow.spanType": json.dumps(SpanType.CHAIN),
                "mlflow.spanInputs": json.dumps({"question": row["question"], "context": row["context"]}),
                "mlflow.spanOutputs": json.dumps({"answer": row["answer"]}),
            },
        }
    )


def labelled_traces(rows: list[dict], labels: list[bool], source: str, name: str = NAME) -> list[Trace]:
    """One in-memory trace per row with the person's verdict as HUMAN feedback (`source`: the labels
    file); the ids come from the row's number and content, so the same labels make the same traces."""
    traces = []
    for n, (row, label) in enumerate(zip(rows, labels, strict=True), start=1):
        key = json.dumps([n, row["question"], row["answer"], row["context"]])
        digest = hashlib.sha256(key.encode()).digest()
        trace_id = "tr-" + digest[:16].hex()
        verdict = Feedback(
            name=name,
            value=label,
            source=AssessmentSource(source_type="HUMAN", source_id=f"{source}#{n}"),
            trace_id=trace_id,
        )
        info = TraceInfo(
            trace_id=trace_id,
            trace_location=TraceLocation.from_experiment_id("0"),
            request_time=0,
            state=TraceState.OK,
            assessments=[verdict],
        )
        traces.append(Trace(info=info, data=TraceData(spans=[_span(trace_id, digest, row)])))
    return traces


def _verdict(trace: Trace, name: str) -> bool | None:
    wanted = name.lower().strip()
    human = [
        a
        for a in trace.info.assessments or []
        if a.name.lower().strip() == wanted and a.source.source_type == "HUMAN" and a.feedback
    ]
    groups: dict[str, list] = {}
    for a in human:
        groups.setdefault(str(a.feedback.value).lower(), []).append(a)
    if not groups:
        return None
    value = max(groups, key=lambda v: (len(groups[v]), max(a.create_time_ms or 0 for a in groups[v])))
    return True if value in TRUE else False if value in FALSE else None


def human_verdicts(traces: list[Trace], name: str = NAME) -> tuple[list[dict], list[bool]]:
    """The rows (question, answer, context) and people's verdicts of the traces that have both; a trace
    without a yes/no human verdict named `name`, or without the question and answer, is left out."""
    rows, labels = [], []
    for trace in traces:
        inputs, outputs = extract_inputs_from_trace(trace) or {}, extract_outputs_from_trace(trace) or {}
        verdict = _verdict(trace, name)
        if verdict is None or not isinstance(inputs, dict) or not isinstance(outputs, dict):
            continue
        row = {
            "question": inputs.get("question"),
            "context": inputs.get("context"),
            "answer": outputs.get("answer"),
        }
        if all(isinstance(v, str) for v in row.values()):
            rows.append(row)
            labels.append(verdict)
    return rows, labels
