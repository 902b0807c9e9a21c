"""The judge measured against people's labels with each leaderboard (evaluation.judge_labels): a local
OpenAI-protocol judge whose behaviour is known (it passes an answer found in its context, fails one that is
not, and flips the answers marked so). Agreeing labels: faithfulness_judge is weighted. Labels it mostly
contradicts: its kappa is below min_kappa, so the metric is reported but left out of the overall score, with
the reason; only the leaderboard is computed again, and its figures equal scikit-learn's kappa. Then the
provider's judge turns: the nightly re-evaluation asks it again on the labels too, and the leaderboard's
`nightly_drift` finding says the judge is no longer weighted."""

from __future__ import annotations

import json

import pytest

from tests.conftest import write_sweep
from tests.openai_stub import OpenAIStub

pytestmark = pytest.mark.slow


DRIFTED = {"now": False}  # the provider's judge turned: it contradicts every verdict it gave


def judge(prompt: str):
    context = prompt.split("CONTEXT:", 1)[1].split("QUESTION:", 1)[0]
    answer = prompt.rsplit("ANSWER:", 1)[1].split("SCORE:", 1)[0].strip()
    supported = answer.replace(" (flip)", "") in context
    return 200, str(int((supported != ("(flip)" in answer)) != DRIFTED["now"])), 0.0


def labels_file(path, flips: set[int]):
    """16 labelled answers, half supported; the judge contradicts the people on `flips`."""
    rows, human, judged = [], [], []
    for i in range(16):
        fact, supported = f"Fact number {i} holds", i % 2 == 0
        answer = (fact if supported else f"Invented claim {i}") + (" (flip)" if i in flips else "")
        rows.append(
            {"question": f"About {i}?", "answer": answer, "context": f"[1] {fact}.", "supported": supported}
        )
        human.append(supported)
        judged.append(supported != (i in flips))
    path.write_text("\n".join(json.dumps(r) for r in rows))
    return human, judged


def test_a_judge_below_the_kappa_floor_is_reported_not_weighted(small_slice, tmp_path, monkeypatch):
    from sklearn.metrics import cohen_kappa_score

    from rag_assets.board_files import read_decision
    from rag_sweep.runner import run_sweep

    agree, disagree = tmp_path / "agree.jsonl", tmp_path / "disagree.jsonl"
    agree_human, agree_judged = labels_file(agree, flips={3})
    human, judged = labels_file(disagree, flips={0, 1, 2, 3, 4, 5, 6})
    spec = write_sweep(
        tmp_path / "gate.yaml",
        small_slice,
        name="judged",
        chunking={"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
        retrieval={"mode": "vector", "top_k": 2},
        evaluation={"judge_model": "openai/judge-model", "judge_labels": str(agree), "min_kappa": 0.6},
        weights={"token_f1": 0.5, "faithfulness_judge": 0.5},
    )
    spec.write_text(spec.read_text().replace("data:\n", "data:\n  max_queries: 5\n", 1))
    data = str(tmp_path / "data")
    with OpenAIStub(judge) as stub:
        monkeypatch.setenv("RAG_LLM_API_BASE", stub.api_base)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        first = run_sweep(str(spec), data, progress=False)
        trusted = read_decision(data, "judged")["judge"]
        asked = len(stub.requests)
        spec.write_text(spec.read_text().replace(str(agree), str(disagree)))
        second = run_sweep(str(spec), data, progress=False)
        doubted = read_decision(data, "judged")["judge"]
        again = len(stub.requests) - asked
        # the agreeing labels again (their board is the first one), then the judge drifts and the sweep is
        # re-evaluated as the nightly schedule does (forced: every call asked again)
        spec.write_text(spec.read_text().replace(str(disagree), str(agree)))
        run_sweep(str(spec), data, progress=False)
        DRIFTED["now"], before_nightly = True, len(stub.requests)
        try:
            run_sweep(str(spec), data, force=True, progress=False)
        finally:
            DRIFTED["now"] = False
        nightly = read_decision(data, "judged")
        nightly_calls = len(stub.requests) - before_nightly

    assert asked == 5 + 16  # the 5 answers judged for the evaluation, then the 16 labelled ones
    # only the 6 labelled answers that changed (the rest from the call cache); the evaluation is reused: its
    # fingerprint holds no labels
    assert again == 6
    assert trusted["weighted"] and trusted["verdict"] == "trusted" and trusted["kappa"] > 0.6
    row = first.board.row(0, named=True)
    assert row["overall_score"] == pytest.approx(0.5 * row["token_f1"] + 0.5 * row["faithfulness_judge"])

    assert doubted["verdict"] == "below the floor" and not doubted["weighted"]
    assert doubted["kappa"] == pytest.approx(cohen_kappa_score(human, judged), abs=1e-12)
    assert doubted["n"] == 16 and "below min_kappa 0.6" in doubted["reason"]
    row = second.board.row(0, named=True)
    assert row["faithfulness_judge"] is not None  # still reported
    assert row["overall_score"] == pytest.approx(row["token_f1"])  # the F1 alone
    assert read_decision(data, "judged")["weights"] == {"token_f1": 0.5}

    # the nightly asked the judge again on the 5 answers and the 16 labels; its verdicts now contradict the
    # people's: the metric is out of the score, and the drift finding (the alert's content) says why
    assert nightly_calls == 5 + 16 and nightly["judge"]["asked_again"]
    turned = cohen_kappa_score(agree_human, [not j for j in agree_judged])
    assert nightly["judge"]["kappa"] == pytest.approx(turned, abs=1e-12) and not nightly["judge"]["weighted"]
    drift = nightly["drift"]
    assert drift["severity"] == "WARN" and drift["alert"]["judge"]["before"]["weighted"]
    assert (
        f"the judge openai/judge-model is no longer weighted (kappa 0.875 to {turned:.3f} on 16 labels"
        in drift["message"]
    )
