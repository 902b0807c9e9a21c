"""`rag-sweep calibrate-judge` against a local OpenAI-protocol judge whose behaviour is known: it agrees with the
labels except on answers it is scripted to flip, and one reply does not parse. The figures equal an
independent computation: kappa scikit-learn's, its interval from the Fleiss-Cohen-Everitt variance by hand,
accuracy's Wilson interval by hand."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys

import numpy as np
import polars as pl
import pytest

from tests.conftest import ROOT, write_sweep
from tests.openai_stub import OpenAIStub


def judge(prompt: str):
    """1 when the answer is in the context, 0 when not; flipped on '(flip)' answers; '(broken)': no number."""
    context = prompt.split("CONTEXT:", 1)[1].split("QUESTION:", 1)[0]
    answer = prompt.rsplit("ANSWER:", 1)[1].split("SCORE:", 1)[0].strip()
    if "(broken)" in answer:
        return 200, "I cannot tell.", 0.0
    supported = answer.replace(" (flip)", "") in context
    return 200, str(int(supported != ("(flip)" in answer))), 0.0


def labels() -> tuple[list[dict], list[bool], list[bool | None]]:
    """30 labelled answers: 15 supported, 15 not; the judge flips 2 supported and 3 unsupported ones and
    cannot be read on one."""
    rows, human, judged = [], [], []
    for i in range(30):
        fact = f"Fact number {i} is true"
        supported = i % 2 == 0
        answer = fact if supported else f"Invented claim {i}" + " and more" * (i % 5)
        flip = i in (4, 10, 7, 13, 21)
        broken = i == 25
        answer += " (flip)" if flip else " (broken)" if broken else ""
        rows.append(
            {
                "question": f"What about {i}?",
                "answer": answer,
                "context": f"[1] {fact}.",
                "supported": supported,
            }
        )
        human.append(supported)
        judged.append(None if broken else supported != flip)
    return rows, human, judged


def run(args: list[str], stub: OpenAIStub, tmp_path) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "RAG_LLM_API_BASE": stub.api_base,
        "RAG_LLM_API_KEY": "test-key",
        "RAG_LLM_MAX_RETRIES": "0",
        "RAG_DATA_DIR": str(tmp_path / "data"),
    }
    cmd = [sys.executable, "-m", "rag_sweep.cli", "calibrate-judge", *map(str, args)]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)


@pytest.fixture
def spec(slice_data, tmp_path):
    return write_sweep(
        tmp_path / "judged.yaml",
        slice_data,
        name="judged",
        chunking={"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
        retrieval={"mode": "vector", "top_k": 4},
        evaluation={"judge_model": "openai/judge-model"},
    )


def test_kappa_accuracy_and_intervals_equal_an_independent_computation(spec, tmp_path):
    from sklearn.metrics import cohen_kappa_score

    rows, human, judged = labels()
    file = tmp_path / "labels.jsonl"
    file.write_text("\n".join(json.dumps(r) for r in rows))
    out = tmp_path / "figures.json"
    with OpenAIStub(judge) as stub:
        r = run([spec, "--labels", file, "--json", out, "--min-kappa", "0.5"], stub, tmp_path)
        assert len(stub.requests) == 30 and {q["body"]["model"] for q in stub.requests} == {"judge-model"}
    assert r.returncode == 0, r.stderr  # trusted: kappa above 0.5
    figures = json.loads(out.read_text())
    h = [x for x, j in zip(human, judged, strict=True) if j is not None]
    j = [x for x in judged if x is not None]
    n = len(h)
    assert figures["n"] == n == 29 and figures["failures"] == 1
    assert figures["kappa"] == pytest.approx(cohen_kappa_score(h, j), abs=1e-12)
    # the Fleiss-Cohen-Everitt (1969) large-sample variance, by hand
    pairs = list(zip(h, j, strict=True))
    counts = [[pairs.count((x, y)) for y in (True, False)] for x in (True, False)]
    t = np.array(counts) / n
    rows_, cols = t.sum(1), t.sum(0)
    po, pe = t[0, 0] + t[1, 1], float(rows_ @ cols)
    k = (po - pe) / (1 - pe)
    var = (
        sum(t[i, i] * (1 - (rows_[i] + cols[i]) * (1 - k)) ** 2 for i in range(2))
        + (1 - k) ** 2 * sum(t[i, 1 - i] * (cols[i] + rows_[1 - i]) ** 2 for i in range(2))
        - (k - pe * (1 - k)) ** 2
    ) / (n * (1 - pe) ** 2)
    assert figures["kappa_low"] == pytest.approx(k - 1.959964 * math.sqrt(var), abs=1e-6)
    assert figures["kappa_high"] == pytest.approx(k + 1.959964 * math.sqrt(var), abs=1e-6)
    # accuracy and its Wilson interval, by hand
    acc, z = po, 1.959964
    centre = (acc + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(acc * (1 - acc) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    assert figures["accuracy"] == pytest.approx(24 / 29)
    assert (figures["accuracy_low"], figures["accuracy_high"]) == pytest.approx(
        (centre - half, centre + half), abs=1e-6
    )
    assert figures["confusion"] == {
        "both_supported": 13,
        "human_only": 2,
        "judge_only": 3,
        "both_unsupported": 11,
    }
    assert figures["base_rate"] == pytest.approx(15 / 29) and figures["verdict"] == "trusted"
    assert "position bias: not applicable" in r.stdout
    assert re.search(r"kappa: 0\.\d{3} \(95% ", r.stdout)


def test_a_judge_below_the_floor_exits_1_and_one_class_of_labels_is_undefined_not_nan(spec, tmp_path):
    rows, *_ = labels()
    file = tmp_path / "labels.csv"
    pl.DataFrame(rows).write_csv(file)
    with OpenAIStub(judge) as stub:
        r = run([spec, "--labels", file, "--min-kappa", "0.9"], stub, tmp_path)
        assert r.returncode == 1 and "verdict: below the floor (kappa floor 0.9)" in r.stdout, r.stderr
        only = [row for row in rows if row["supported"]]
        pl.DataFrame(only).write_csv(file)
        r = run([spec, "--labels", file], stub, tmp_path)
    assert r.returncode == 3 and "kappa: undefined (the labels hold one class only)" in r.stdout
    assert "nan" not in r.stdout.lower()


def test_bad_labels_are_refused_naming_the_row_and_field_before_any_call(spec, tmp_path):
    rows, *_ = labels()
    rows = [{**r, "supported": "yes" if r["supported"] else "no"} for r in rows]
    rows[6]["supported"] = "maybe"
    file = tmp_path / "labels.jsonl"
    file.write_text("\n".join(json.dumps(r) for r in rows))
    with OpenAIStub(judge) as stub:
        r = run([spec, "--labels", file], stub, tmp_path)
        assert not stub.requests
    assert r.returncode == 2
    assert (
        f"error: {file}: row 7, field 'supported': expected true/false, 1/0 or yes/no, got 'maybe'"
        in r.stderr
    )


def test_a_sweeps_judge_labels_are_checked_on_load(slice_data, tmp_path):
    from rag_core.planning.spec import SpecError, load_sweep

    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"question": "q", "answer": "a", "context": "c", "supported": "maybe"}))
    sections = {
        "chunking": {"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
        "retrieval": {"mode": "vector", "top_k": 2},
    }
    spec = write_sweep(tmp_path / "a.yaml", slice_data, evaluation={"judge_labels": str(bad)}, **sections)
    with pytest.raises(SpecError, match=r"evaluation.judge_labels': labels for a judge, but no judge runs"):
        load_sweep(spec)
    spec = write_sweep(
        tmp_path / "b.yaml",
        slice_data,
        evaluation={"judge_model": "openai/j", "judge_labels": str(bad)},
        **sections,
    )
    with pytest.raises(
        SpecError, match=r"judge_labels': .*bad.jsonl: row 1, field 'supported': expected true/false"
    ):
        load_sweep(spec)
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps({"question": "q", "answer": "a", "context": "c", "supported": "yes"}))
    spec = write_sweep(
        tmp_path / "c.yaml",
        slice_data,
        evaluation={"judge_model": "openai/j", "judge_labels": str(good)},
        **sections,
    )
    first = load_sweep(spec).judge_labels_fp
    good.write_text(json.dumps({"question": "q", "answer": "a", "context": "c", "supported": "no"}))
    assert load_sweep(spec).judge_labels_fp != first  # edited labels: another leaderboard fingerprint


def test_the_kappa_interval_stays_within_kappas_range():
    """Near perfect agreement (or disagreement) the asymptotic interval passes 1 (or -1): it is clipped, and
    elsewhere it is statsmodels' own."""
    from statsmodels.stats.inter_rater import cohens_kappa

    from rag_core.metrics.judge_agreement import agreement

    def case(table):  # rows: people supported / unsupported; columns: judge supported / unsupported
        human, scores = [], []
        for h, row in zip((True, False), table, strict=True):
            for j, count in zip((1.0, 0.0), row, strict=True):
                human, scores = human + [h] * count, scores + [j] * count
        return agreement(human, scores, [10] * len(human)), cohens_kappa(np.array(table), return_results=True)

    high, raw = case([[9, 1], [0, 10]])
    assert raw.kappa_upp > 1 and high.kappa_high == 1.0 and high.kappa_low == pytest.approx(raw.kappa_low)
    low, raw = case([[0, 10], [9, 1]])
    assert raw.kappa_low < -1 and low.kappa_low == -1.0 and low.kappa_high == pytest.approx(raw.kappa_upp)
    mid, raw = case([[7, 3], [2, 8]])
    assert (mid.kappa_low, mid.kappa_high) == pytest.approx((raw.kappa_low, raw.kappa_upp))
