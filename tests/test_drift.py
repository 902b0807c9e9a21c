"""The nightly re-evaluation sees today's provider and says when it changed: a forced rerun after the
provider turned wrong fails the leaderboard's `nightly_drift` check and posts one alert to a local webhook;
an unchanged forced rerun gives the same leaderboard and no alert."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import dagster as dg
import polars as pl
import pytest

from rag_core.decision.drift import compare, findings
from rag_sweep.definitions import build_definitions
from tests.test_decision import per_query, wrong_on


def test_a_significant_drop_is_measured_on_the_same_questions_only():
    before, after = per_query(wrong_on(5, n=40)), per_query(wrong_on(25, n=40))
    d = compare(before, after, {"token_f1": 1.0})
    assert d["drift_before"] == pytest.approx(35 / 40) and d["drift_after"] == pytest.approx(15 / 40)
    assert d["drift_change"] == pytest.approx(-0.5) and d["drift_p_value"] < 0.001
    assert d["drift_after_ci_low"] < d["drift_after"] < d["drift_after_ci_high"]
    assert compare(before, before, {"token_f1": 1.0})["drift_p_value"] == 1.0
    assert compare(before, per_query(wrong_on(5, n=39)), {"token_f1": 1.0}) is None  # other questions


def _board(rows: dict[str, dict]) -> pl.DataFrame:
    return pl.DataFrame([{"config_key": k, **v} for k, v in rows.items()])


def test_findings_warn_on_a_drop_or_a_new_top_tier_and_error_on_a_lost_recommendation():
    drop = {"drift_before": 0.9, "drift_after": 0.5, "drift_change": -0.4, "drift_p_value": 0.001}
    for k in ("drift_before", "drift_after"):
        drop[f"{k}_ci_low"], drop[f"{k}_ci_high"] = drop[k] - 0.05, drop[k] + 0.05
    same = {"recommended": "a", "top_tier": ["a", "b"]}
    quiet = _board({"a": dict.fromkeys(drop), "b": dict.fromkeys(drop)})
    assert findings(same, same, quiet, 0.05)["severity"] is None
    dropped = findings(same, same, _board({"a": drop, "b": drop}), 0.05)
    assert dropped["severity"] == "WARN" and dropped["alert"]["before"]["score"] == 0.9
    assert findings(same, {"recommended": "a", "top_tier": ["a"]}, quiet, 0.05)["severity"] == "WARN"
    lost = findings(same, {"recommended": "b", "top_tier": ["b"]}, quiet, 0.05)
    assert lost["severity"] == "ERROR" and "from a to b" in lost["message"]


class Webhook:
    def __init__(self):
        self.bodies: list[dict] = []
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                hook.bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(204)
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/alerts"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def _latest_check(run) -> dg.AssetCheckEvaluation:
    from rag_sweep.runner import asset_key

    key = dg.AssetCheckKey(asset_key(run.plan, "leaderboard"), "nightly_drift")
    (record,) = run.instance.event_log_storage.get_asset_check_execution_history(key, limit=1)
    return record.event.dagster_event.event_specific_data


@pytest.mark.slow
def test_a_provider_that_turns_wrong_fails_the_nightly_check_and_alerts_once(
    slice_data, tmp_path, monkeypatch, capsys
):
    from rag_assets.board_files import leaderboard_path
    from rag_sweep.runner import run_sweep
    from tests.conftest import write_sweep
    from tests.openai_stub import OpenAIStub, TurnsWrong

    respond = TurnsWrong(pl.read_parquet(slice_data["qa"]))

    spec = str(
        write_sweep(
            tmp_path / "nightly.yaml",
            slice_data,
            name="nightly",
            chunking={"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
            retrieval={"mode": "bm25", "top_k": 3},
            generation={"model": "openai/stub-model", "max_tokens": 16},
        )
    )
    data = str(tmp_path / "data")
    hook = Webhook()
    try:
        with OpenAIStub(respond) as stub:
            monkeypatch.setenv("RAG_LLM_API_BASE", stub.api_base)
            monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
            monkeypatch.setenv("RAG_ALERT_WEBHOOK", hook.url)
            first = run_sweep(spec, data, progress=False)
            sensor = build_definitions([first.plan], data).get_sensor_def("nightly__drift_alerts")
            tick = dg.build_sensor_context(instance=first.instance)
            sensor(tick)
            assert _latest_check(first).passed and hook.bodies == []  # nothing to compare with yet
            respond.right = False  # the provider's silent model update
            capsys.readouterr()
            drifted = run_sweep(spec, data, force=True, progress=False)
            printed = capsys.readouterr().err  # a failed WARN check is printed, as a failed step would be
            check = _latest_check(drifted)
            sensor(tick)
            sensor(tick)  # the same failure is sent once
            unchanged = run_sweep(spec, data, force=True, progress=False)
            sensor(tick)
    finally:
        hook.close()
    assert first.board["exact_match"][0] == 1.0 and drifted.board["exact_match"][0] == 0.0
    assert not check.passed and check.severity == dg.AssetCheckSeverity.WARN
    assert "check 'nightly_drift' failed: " in printed, printed
    (alert,) = hook.bodies
    key = first.board["config_key"][0]
    assert alert["sweep"] == "nightly" and alert["config"] == key and alert["severity"] == "WARN"
    assert alert["before"]["score"] > alert["after"]["score"] and alert["p_value"] < 0.05
    assert alert["link"].endswith("/assets/nightly/leaderboard")
    # the unchanged provider the next night: the same leaderboard, the check passes, no alert
    assert _latest_check(unchanged).passed
    same = ["overall_score", "exact_match", "recall_at_k"]
    assert unchanged.board.select(same).equals(drifted.board.select(same))
    # the score's history: one point per evaluation, the trend plotted
    history = pl.read_parquet(leaderboard_path(data, "nightly").with_suffix(".history.parquet"))
    assert history.filter(pl.col("config_key") == key)["overall_score"].len() == 3
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{unchanged.data / 'mlflow.db'}")
    exp = client.get_experiment_by_name("nightly")
    (config_run,) = client.search_runs([exp.experiment_id], filter_string="tags.config_key != ''")
    scores = client.get_metric_history(config_run.info.run_id, "overall_score")  # the replaced runs' too
    assert len(scores) == 3 and max(m.value for m in scores) == history["overall_score"].max()
    assert leaderboard_path(data, "nightly").with_suffix(".trend.png").stat().st_size > 10_000


def test_the_judge_drifts_when_it_stops_being_weighted_or_leaves_its_interval():
    from rag_core.decision.drift import judge_drift

    before = {"model": "j", "labels": "l.jsonl", "min_kappa": 0.6, "n": 40, "weighted": True}
    before |= {"kappa": 0.8, "kappa_low": 0.7, "kappa_high": 0.9}
    assert judge_drift(before, {**before, "kappa": 0.75}) is None  # within the interval
    assert "dropped (kappa 0.800 to 0.650 on 40 labels" in judge_drift(before, {**before, "kappa": 0.65})
    fell = judge_drift(before, {**before, "kappa": 0.4, "weighted": False})
    assert fell.startswith("the judge j is no longer weighted (kappa 0.800 to 0.400")
    undefined = judge_drift(before, {**before, "kappa": None, "weighted": False})
    assert "kappa 0.800 to undefined" in undefined
    assert judge_drift(before, {**before, "labels": "other.jsonl", "kappa": 0.1, "weighted": False}) is None
    assert judge_drift(None, before) is None and judge_drift(before, None) is None
    same = {"recommended": "a", "top_tier": ["a"], "judge": before}
    quiet = _board({"a": {}})
    found = findings(same, {**same, "judge": {**before, "kappa": 0.4, "weighted": False}}, quiet, 0.05)
    assert found["severity"] == "WARN" and found["alert"]["judge"]["now"]["kappa"] == 0.4
    outage = {"model": "j", "labels": "l.jsonl", "min_kappa": 0.6, "verdict": "undefined", "weighted": False}
    said = judge_drift(before, {**outage, "reason": "not weighted: every call failed"})
    assert said == "the judge j could not be measured on its labels: not weighted: every call failed"
