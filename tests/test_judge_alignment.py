"""`rag-sweep calibrate-judge --align`: the judge aligned through MLflow's `Judge.align()` on part of the labels
and measured, base and aligned, on the rest. The local OpenAI-protocol judge has a known fault alignment can
fix: it passes hedged answers (the fact of the context, "and probably much more") that people label
unsupported, unless its prompt shows one such answer people scored 0. The held-out kappas equal
scikit-learn's on the held-out rows, and no held-out row reaches the alignment."""

from __future__ import annotations

import importlib.util
import json
import re

import pytest

from rag_core.metrics.judge import JUDGE_PROMPT, judge_prompt
from tests.conftest import write_sweep
from tests.openai_stub import OpenAIStub
from tests.test_calibrate_judge import run  # `rag-sweep calibrate-judge` against the stub

HEDGE = ", and probably much more"
FLIPS = (2, 6, 9, 13)  # the judge errs on these whatever its prompt


def graded(prompt: str) -> tuple[str, str, str, str]:
    """(examples block, context, question, answer) of a judge prompt."""
    examples, item = prompt.split("CONTEXT:", 1)
    context, rest = item.split("QUESTION:", 1)
    question, rest = rest.split("ANSWER:", 1)
    return examples, context, question.strip(), rest.split("SCORE:", 1)[0].strip()


def judge(prompt: str):
    examples, context, _, answer = graded(prompt)
    plain = answer.replace(HEDGE, "").replace(" (flip)", "")
    supported = plain in context
    if HEDGE in answer and supported:  # passed, unless people showed such an answer unsupported
        shown = re.findall(r"Answer: ([^\n]*)\nScore: (\d)", examples)
        supported = not any(HEDGE in a and score == "0" for a, score in shown)
    return 200, str(int(supported != ("(flip)" in answer))), 0.0


def label_rows(n: int = 40) -> list[dict]:
    """Half supported (the context's fact), a quarter invented, a quarter hedged (unsupported to people)."""
    rows = []
    for i in range(n):
        fact = f"Fact number {i} is true"
        answer = fact if i % 2 == 0 else f"Invented claim {i}" if i % 4 == 1 else fact + HEDGE
        rows.append(
            {
                "question": f"What about {i}?",
                "answer": answer + (" (flip)" if i in FLIPS else ""),
                "context": f"[1] {fact}.",
                "supported": i % 2 == 0,
            }
        )
    return rows


def expected_verdict(row: dict, aligned: bool) -> bool:
    """The stub judge's verdict: right but for the flips and, unaligned, the hedged answers."""
    hedged = HEDGE in row["answer"]
    verdict = row["supported"] or (hedged and not aligned)
    return verdict != ("(flip)" in row["answer"])


@pytest.fixture
def spec(small_slice, tmp_path):
    return write_sweep(
        tmp_path / "judged.yaml",
        small_slice,
        name="judged",
        chunking={"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
        retrieval={"mode": "vector", "top_k": 2},
        evaluation={"judge_model": "openai/judge-model"},
    )


def write_labels(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in rows))
    return path


def test_alignment_raises_the_held_out_kappa_and_never_sees_the_held_out_rows(spec, tmp_path):
    from sklearn.metrics import cohen_kappa_score

    rows = label_rows()
    labels = write_labels(tmp_path / "labels.jsonl", rows)
    out, prompt_file = tmp_path / "figures.json", tmp_path / "aligned.txt"
    with OpenAIStub(judge) as stub:
        r = run(
            [spec, "--labels", labels, "--align", "--json", out, "--aligned-out", prompt_file], stub, tmp_path
        )
        requests = [q["body"]["messages"][-1]["content"] for q in stub.requests]
    assert r.returncode == 0, r.stderr  # the aligned judge is trusted
    figures = json.loads(out.read_text())
    part = [i - 1 for i in figures["align"]["alignment_rows"]]
    held = [i - 1 for i in figures["align"]["held_out_rows"]]
    assert sorted(part + held) == list(range(40)) and len(part) == len(held) == 20
    assert sum(rows[i]["supported"] for i in part) == sum(rows[i]["supported"] for i in held) == 10
    assert any(HEDGE in rows[i]["answer"] for i in part)  # the fault can be shown
    assert {2, 13} <= set(held)  # two flips held out: the aligned judge is not perfect there

    # the alignment asked the base judge on the alignment rows, and on them only, before any measurement
    assert len(requests) == 20 + 20 + 20
    asked = [graded(p) for p in requests]
    first = {(q, a) for _, _, q, a in asked[:20]}
    assert first == {(rows[i]["question"], rows[i]["answer"]) for i in part}
    by_question = {r["question"]: r for r in rows}
    for prompt, (_, _, question, answer) in zip(requests[:40], asked[:40], strict=True):  # the base prompt
        assert prompt == judge_prompt(question, answer, by_question[question]["context"])
    aligned = prompt_file.read_text()  # what the aligned judge was asked with
    for prompt, (_, _, question, answer) in zip(requests[40:], asked[40:], strict=True):
        assert prompt == judge_prompt(question, answer, by_question[question]["context"], aligned)
    # no held-out row is shown in any prompt, nor in the aligned prompt written out
    for i in held:
        assert rows[i]["question"] not in aligned
        assert all(rows[i]["question"] not in examples for examples, *_ in asked)
    # the examples: the rows the base judge got wrong first, balanced, alternating, unsupported first
    examples = [i - 1 for i in figures["align"]["example_rows"]]
    assert [rows[i]["supported"] for i in examples] == [False, True] * 4
    wrong = [i for i in part if expected_verdict(rows[i], aligned=False) != rows[i]["supported"]]
    assert figures["align"]["disagreed"] == len(wrong)
    assert [i for i in examples if not rows[i]["supported"]] == sorted(
        [i for i in part if not rows[i]["supported"]], key=lambda i: (i not in wrong, i)
    )[:4]
    assert all(f"Question: {rows[i]['question']}" in aligned for i in examples)

    # the figures are the held-out rows' kappas, as scikit-learn computes them
    human = [rows[i]["supported"] for i in held]
    for name, is_aligned in (("base", False), ("aligned", True)):
        judged = [expected_verdict(rows[i], is_aligned) for i in held]
        assert figures[name]["n"] == 20
        assert figures[name]["kappa"] == pytest.approx(cohen_kappa_score(human, judged), abs=1e-12)
        assert figures[name]["kappa_low"] < figures[name]["kappa"] < figures[name]["kappa_high"]
    assert figures["aligned"]["kappa"] > figures["base"]["kappa"] + 0.3
    assert figures["kappa_change"] == pytest.approx(figures["aligned"]["kappa"] - figures["base"]["kappa"])
    assert figures["base"]["verdict"] == "below the floor" and figures["verdict"] == "trusted"
    b, a = figures["base"], figures["aligned"]
    assert (
        f"held-out kappa: base {b['kappa']:.3f} (95% {b['kappa_low']:.3f} to {b['kappa_high']:.3f}), "
        f"aligned {a['kappa']:.3f} (95% {a['kappa_low']:.3f} to {a['kappa_high']:.3f}), "
        f"change {a['kappa'] - b['kappa']:+.3f}" in r.stdout
    )
    assert "the aligned prompt carries 8 worked examples (4 supported, 4 unsupported)" in r.stdout


def test_few_labels_to_align_on_warn(spec, tmp_path):
    labels = write_labels(tmp_path / "labels.jsonl", label_rows(12))
    with OpenAIStub(judge) as stub:
        r = run([spec, "--labels", labels, "--align", "--min-kappa", "0"], stub, tmp_path)
        assert len(stub.requests) == 6 + 6 + 6
    assert "warning: 6 labels to align on: MLflow advises at least 10 (50 to 100 better)" in r.stderr
    assert "warning: 6 held-out labels: the intervals are wide below 10" in r.stderr
    assert r.returncode == 0 and "held-out kappa: base " in r.stdout, r.stderr  # measured all the same


def test_bad_labels_and_options_are_refused_before_any_call(spec, small_slice, tmp_path):
    rows = label_rows()
    rows[6]["supported"] = "maybe"
    bad = write_labels(tmp_path / "bad.jsonl", rows)
    good = write_labels(tmp_path / "good.jsonl", label_rows())
    with OpenAIStub(judge) as stub:
        r = run([spec, "--labels", bad, "--align"], stub, tmp_path)
        assert r.returncode == 2
        assert f"error: {bad}: row 7, field 'supported': expected true/false" in r.stderr
        r = run([spec, "--labels", good, "--align", "--align-share", "1"], stub, tmp_path)
        assert r.returncode == 2 and "--align-share: between 0 and 1" in r.stderr
        r = run([spec, "--labels", good, "--aligned-out", tmp_path / "p.txt"], stub, tmp_path)
        assert r.returncode == 2 and "--aligned-out: only with --align" in r.stderr
        # a sweep whose prompt was aligned on these labels before: held out, they would not be unseen
        from rag_core.metrics.judge_alignment import aligned_prompt

        (tmp_path / "seen.txt").write_text(
            aligned_prompt(JUDGE_PROMPT, [(r, r["supported"]) for r in label_rows()])
        )
        seen = write_sweep(
            tmp_path / "seen.yaml",
            small_slice,
            chunking={"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
            retrieval={"mode": "vector", "top_k": 2},
            evaluation={"judge_model": "openai/judge-model", "judge_prompt": "seen.txt"},
        )
        r = run([seen, "--labels", good, "--align"], stub, tmp_path)
        assert (
            r.returncode == 2
            and "the sweep's judge prompt (evaluation.judge_prompt) shows held-out" in r.stderr
        )
        if importlib.util.find_spec("dspy") is None:  # not installed with the project
            r = run([spec, "--labels", good, "--align", "--optimizer", "memalign"], stub, tmp_path)
            assert r.returncode == 2 and "MemAlign needs DSPy, which is not installed" in r.stderr
        assert not stub.requests


def test_the_split_is_stratified_seeded_and_keeps_copies_together():
    from rag_core.metrics.judge_alignment import split

    rows = label_rows(40) + [dict(label_rows(40)[5])]  # row 40 repeats row 5
    labels = [r["supported"] for r in rows]
    part, held = split(rows, labels, 0.5, seed=7)
    assert (part, held) == split(rows, labels, 0.5, seed=7)
    assert (part, held) != split(rows, labels, 0.5, seed=8)
    assert sorted(part + held) == list(range(41)) and not set(part) & set(held)
    assert sum(labels[i] for i in part) == 10 and sum(not labels[i] for i in part) == 10
    assert (5 in part) == (40 in part)  # a copy is on the side of its original
    part, held = split(rows[:40], labels[:40], 0.25, seed=0)
    assert sum(labels[i] for i in part) == 5 and sum(not labels[i] for i in part) == 5
    with pytest.raises(ValueError, match="between 0 and 1"):
        split(rows, labels, 1.0, seed=0)


def _respaced(row: dict) -> dict:
    """The same row once normalized: the question and answer spaced and cased otherwise."""
    return {
        **row,
        "question": row["question"].replace(" ", "  ").replace("?", " ?"),
        "answer": " " + row["answer"].upper().replace(" ", "\u00a0 ") + "\n",
        "context": row["context"] + " ",
    }


def test_rows_the_same_once_normalized_stay_on_one_side_of_the_split():
    """Rows whose answer and context are the same once normalized, with questions that differ only in
    spacing, fell on both sides of the split: the alignment showed held-out rows as worked examples."""
    from rag_core.metrics.judge_alignment import split

    base = label_rows(40)
    rows = base + [_respaced(base[i]) for i in range(0, 40, 3)]  # 14 near copies
    labels = [r["supported"] for r in rows]
    for seed in range(8):
        part, held = split(rows, labels, 0.5, seed=seed)
        for j, i in enumerate(range(0, 40, 3)):
            assert (i in part) == (40 + j in part), (seed, i)


def test_an_aligned_prompt_that_shows_a_held_out_answer_is_caught_once_normalized():
    from rag_core.metrics.judge_alignment import aligned_prompt, leaked

    row = label_rows(4)[0]
    prompt = aligned_prompt(JUDGE_PROMPT, [(row, True)])
    other = {**label_rows(4)[2], "question": row["question"]}  # another answer to the same question
    assert leaked(prompt, [_respaced(row), other, row]) == [0, 2]


def test_examples_put_the_judges_mistakes_first_balanced_and_escaped():
    from rag_core.metrics.judge_alignment import aligned_prompt, choose_examples, leaked

    labels = [False, False, False, True, True, False]
    scores = [0.0, 1.0, None, 1.0, 0.0, 0.9]  # wrong on 1, 4 and 5; none for 2
    assert choose_examples(labels, scores, 0.5, max_examples=4) == [1, 4, 5, 3]
    assert choose_examples(labels, scores, 0.5, max_examples=3) == [1, 4, 5]
    assert choose_examples(labels, scores, 0.5, max_examples=8) == [1, 4, 5, 3, 2, 0]
    row = {"question": "What is {x}?", "answer": "It is {y}", "context": "[1] {x} is {y}."}
    prompt = aligned_prompt(JUDGE_PROMPT, [(row, True)])
    assert prompt.index("Example 1") < prompt.index("CONTEXT:\n{context}")
    filled = prompt.format(question="Q", answer="A", context="C")
    assert "Question: What is {x}?\nAnswer: It is {y}\nScore: 1" in filled
    assert filled.endswith("CONTEXT:\nC\n\nQUESTION: Q\nANSWER: A\nSCORE:")
    assert leaked(prompt, [row, {**row, "answer": "It is"}]) == [0]
    assert aligned_prompt(JUDGE_PROMPT, []) == JUDGE_PROMPT


class Recorder:
    """A Completer that answers as the stub judge does and keeps every prompt."""

    max_concurrency = 2

    def __init__(self):
        self.prompts = []

    def complete(self, model, prompt, temperature=0.0, max_tokens=128):
        from rag_core.common.completion import Completion

        self.prompts.append(prompt)
        return Completion(text=judge(prompt)[1], error=None, attempts=1, latency_ms=0.0)


def test_the_traces_handed_to_mlflow_carry_the_human_feedback_its_api_reads():
    from mlflow.entities import AssessmentSource, Feedback, Trace
    from mlflow.genai.utils.trace_utils import (
        extract_inputs_from_trace,
        extract_outputs_from_trace,
        extract_request_from_trace,
        extract_response_from_trace,
    )

    from resources.judge_optimizer import WorkedExamples
    from resources.mlflow_judge import SweepJudge, human_verdicts, labelled_traces

    rows = label_rows(12)
    labels = [r["supported"] for r in rows]
    traces = labelled_traces(rows, labels, "labels.jsonl")
    assert [t.trace_id for t in traces] == [t.trace_id for t in labelled_traces(rows, labels, "labels.jsonl")]
    assert len({t.trace_id for t in traces}) == 12
    for trace, row, label in zip(traces, rows, labels, strict=True):
        trace = Trace.from_json(trace.to_json())  # MLflow's serialization keeps all of it
        (verdict,) = trace.search_assessments(name="supported", type="feedback")
        assert verdict.source.source_type == "HUMAN" and verdict.feedback.value is label
        assert verdict.trace_id == trace.trace_id
        # what MLflow's optimizers read (a trace without it is skipped): the root span's inputs and outputs
        assert row["question"] in extract_request_from_trace(trace)
        assert row["answer"] in extract_response_from_trace(trace)
        assert extract_inputs_from_trace(trace) == {"question": row["question"], "context": row["context"]}
        assert extract_outputs_from_trace(trace) == {"answer": row["answer"]}
    assert human_verdicts(traces) == (
        [{k: r[k] for k in ("question", "context", "answer")} for r in rows],
        labels,
    )

    # read as MLflow's optimizers read it: a judge's feedback and another name do not count; of people's
    # verdicts that differ, the majority, then the latest
    other = traces[0]  # row 0: people said supported
    judge_says = AssessmentSource(source_type="LLM_JUDGE", source_id="gpt")
    person = AssessmentSource(source_type="HUMAN", source_id="bob")
    later = other.info.assessments[0].create_time_ms + 1000
    other.info.assessments += [
        Feedback(name="supported", value=False, source=judge_says, create_time_ms=later),
        Feedback(name="Supported ", value=False, source=person, create_time_ms=later),
    ]
    assert human_verdicts([other])[1] == [False]  # 1 to 1 among people: the latest
    other.info.assessments.append(Feedback(name="supported", value=True, source=person, create_time_ms=1))
    assert human_verdicts([other])[1] == [True]  # 2 to 1: the majority, though older
    other.info.assessments = [Feedback(name="relevant", value=True, source=person)]
    assert human_verdicts([other]) == ([], [])

    # MLflow's Judge.align with the project's optimizer: the base judge asked on the traces' rows only
    llm = Recorder()
    base = SweepJudge(llm, "openai/judge-model")
    optimizer = WorkedExamples(max_examples=4, workers=2)
    aligned = base.align(traces[1:], optimizer)
    assert sorted(llm.prompts) == sorted(
        judge_prompt(r["question"], r["answer"], r["context"]) for r in rows[1:]
    )
    assert isinstance(aligned, SweepJudge) and aligned.instructions != base.instructions == JUDGE_PROMPT
    assert optimizer.report.disagreed == sum(expected_verdict(r, False) != r["supported"] for r in rows[1:])
    feedback = aligned(inputs={"question": "q", "context": "[1] x."}, outputs={"answer": "x"})
    assert feedback.value == 1.0 and feedback.source.source_type == "LLM_JUDGE"
    assert aligned(inputs={"question": "q", "context": "c"}, outputs={"answer": " "}).value == 0.0


def test_a_sweep_asks_its_judge_with_the_aligned_prompt_and_its_evaluations_recompute(
    small_slice, tmp_path, monkeypatch
):
    from types import SimpleNamespace

    import polars as pl

    from rag_assets.leaderboard import judge_agreement
    from rag_assets.orchestration.plans import load_plan
    from rag_core.evaluation.evaluate import judge as judge_answers
    from rag_core.metrics.judge_alignment import aligned_prompt
    from rag_core.planning.bill import estimate
    from rag_core.planning.spec import SpecError

    monkeypatch.delenv("RAG_LLM_API_BASE", raising=False)
    rows = label_rows(12)
    labels = write_labels(tmp_path / "labels.jsonl", rows)
    prompt_file = tmp_path / "aligned.txt"
    prompt_file.write_text(aligned_prompt(JUDGE_PROMPT, [(rows[3], False)]))  # row 3: hedged, unsupported
    sections = {
        "chunking": {"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
        "retrieval": {"mode": "vector", "top_k": 2},
    }

    def plan(**evaluation):
        spec = write_sweep(tmp_path / "s.yaml", small_slice, evaluation=evaluation, **sections)
        return load_plan(spec)

    def evaluation_settings(p):
        return {part.own for part in p.partitions["evaluations"].values()}

    judged = {"judge_model": "openai/judge-model", "judge_labels": str(labels)}
    builtin = plan(**judged)
    assert evaluation_settings(builtin) == {("openai/judge-model", "faithfulness-v1")}  # as before
    assert "prompt" not in builtin.board_identity["judge"]
    aligned = plan(**judged, judge_prompt="aligned.txt")
    (own,) = evaluation_settings(aligned)
    assert own[0] == "openai/judge-model" and own[1].startswith("sha256:")
    assert aligned.board_identity["judge"]["prompt"] == own[1]
    prompt_file.write_text(aligned_prompt(JUDGE_PROMPT, [(rows[7], False)]))
    assert evaluation_settings(plan(**judged, judge_prompt="aligned.txt")) != {own}  # edited: recomputed

    def judge_tokens(p) -> int:  # the cost estimate counts the longer prompt
        chunks = pl.DataFrame({"text": ["x" * 400], "index_text": ["a"]})
        bill = estimate(p, set(), lambda key: chunks, lambda model: set(), 10, lambda *a: 0.0)
        return bill.llm_tokens["evaluations"]

    longer = len(prompt_file.read_text()) - len(JUDGE_PROMPT)
    assert judge_tokens(plan(**judged, judge_prompt="aligned.txt")) == judge_tokens(builtin) + 10 * (
        longer // 4
    )

    # the evaluation and the leaderboard's measurement ask with it
    llm = Recorder()
    sweep = plan(**judged, judge_prompt="aligned.txt").sweep
    qa = pl.DataFrame({"query_id": ["q1"], "question": ["What about 1?"]})
    ret = pl.DataFrame({"query_id": ["q1"], "texts": [["Fact number 1 is true."]], "titles": [["t"]]})
    ans = pl.DataFrame({"query_id": ["q1"], "answer": ["Fact number 1 is true" + HEDGE]})
    scores, _ = judge_answers(llm, sweep.judge_model, qa, ret, ans, sweep.judge.prompt)
    assert scores == {"q1": 0.0} and "Example 1" in llm.prompts[0]  # the hedge is caught
    llm.prompts.clear()
    run = SimpleNamespace(plan=SimpleNamespace(sweep=sweep), llm=llm)
    found = judge_agreement(run, None, [])
    assert sorted(llm.prompts) == sorted(
        judge_prompt(r["question"], r["answer"], r["context"], sweep.judge.prompt) for r in rows
    )
    assert found["prompt"] == sweep.judge.prompt_version and found["labels_in_prompt"] == 1
    assert "(1 of the labels are worked examples in the judge's prompt)" in found["reason"]

    # checked on load
    for text, problem in (
        ("{question} {answer}", "no {context} field"),
        ("{question} {answer} {context} {score}", "unknown field(s) {score}"),
        ("{question} {answer} {context} {", "not a prompt template"),
    ):
        prompt_file.write_text(text)
        with pytest.raises(SpecError, match=re.escape(f"evaluation.judge_prompt': {prompt_file}: {problem}")):
            plan(**judged, judge_prompt="aligned.txt")
    with pytest.raises(SpecError, match="a prompt for a judge, but no judge runs"):
        plan(judge_prompt="aligned.txt")
