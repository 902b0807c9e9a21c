"""The judge measured against people's labels with each leaderboard (evaluation.judge_labels): a local
OpenAI-protocol judge whose behaviour is known (it passes an answer found in its context, fails one that is
not, and flips the answers marked so). Agreeing labels: faithfulness_judge is weighted. Labels it mostly
contradicts: its kappa is below min_kappa, so the metric is reported but left out of the overall score, with
the reason; only the leaderboard is computed again, and its figures equal scikit-learn's kappa."""

from __future__ import annotations

import json

import pytest

from tests.conftest import write_sweep
from tests.openai_stub import OpenAIStub

pytestmark = pytest.mark.slow


def judge(prompt: str):
    context = prompt.split("CONTEXT:", 1)[1].split("QUESTION:", 1)[0]
    answer = prompt.rsplit("ANSWER:", 1)[1].split("SCORE:", 1)[0].strip()
    supported = answer.replace(" (flip)", "") in context
    return 200, str(int(supported != ("(flip)" in answer))), 0.0


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

    from rag_assets.leaderboard import read_decision
    from runner import run_sweep

    agree, disagree = tmp_path / "agree.jsonl", tmp_path / "disagree.jsonl"
    labels_file(agree, flips={3})
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
