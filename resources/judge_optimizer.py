"""The project's alignment optimizer for MLflow's `Judge.align()` (no DSPy): worked examples people labelled,
placed in the judge's prompt.

`align(judge, traces)` reads the rows and people's verdicts off the traces as MLflow's optimizers do
(resources/mlflow_judge.py `human_verdicts`), asks the base judge on them, and returns the same judge with a
prompt that carries up to `max_examples` of them with people's scores: first those the judge got wrong,
balanced between supported and unsupported (rag_core/metrics/judge_alignment.py). Deterministic: the same
traces and the same verdicts of the judge give the same prompt. What it did is kept in `self.report`.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlflow.genai.judges.base import AlignmentOptimizer, Judge

from rag_core.metrics.judge_alignment import MAX_EXAMPLES, aligned_prompt, choose_examples
from resources.mlflow_judge import SweepJudge, human_verdicts, scores


@dataclass
class AlignmentReport:
    rows: list[dict]  # the rows the traces gave (question, answer, context)
    labels: list[bool]
    scores: list[float | None]  # the base judge's
    disagreed: int  # rows the base judge scored against people's verdict
    unscored: int  # rows the base judge gave no score
    examples: list[int]  # indices into rows, in the prompt's order


class WorkedExamples(AlignmentOptimizer):
    def __init__(self, threshold: float = 0.5, max_examples: int = MAX_EXAMPLES, workers: int = 4):
        self.threshold, self.max_examples, self.workers = threshold, max_examples, workers
        self.report: AlignmentReport | None = None

    def align(self, judge: Judge, traces: list) -> Judge:
        if not isinstance(judge, SweepJudge):
            raise TypeError(f"aligns the sweep's judge (SweepJudge), not {type(judge).__name__}")
        rows, labels = human_verdicts(traces, judge.name)
        if not rows:
            raise ValueError(f"no trace carries a person's yes/no feedback named '{judge.name}'")
        verdicts = scores(judge, rows, self.workers)
        chosen = choose_examples(labels, verdicts, self.threshold, self.max_examples)
        self.report = AlignmentReport(
            rows=rows,
            labels=labels,
            scores=verdicts,
            disagreed=sum(
                s is not None and (s >= self.threshold) != h for s, h in zip(verdicts, labels, strict=True)
            ),
            unscored=sum(s is None for s in verdicts),
            examples=chosen,
        )
        prompt = aligned_prompt(judge.instructions, [(rows[i], labels[i]) for i in chosen])
        return judge.with_instructions(prompt)
