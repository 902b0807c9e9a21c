"""MLflow tracking on a local SQLite store: a run a kill left RUNNING is never reused."""

from __future__ import annotations

import polars as pl

from resources.tracking import MlflowTracking


def test_a_run_left_running_by_a_kill_is_replaced_not_reused(tmp_path):
    tracking = MlflowTracking(default_dir=str(tmp_path))
    client = tracking._client()
    exp = tracking._experiment_id(client, "sweep")
    # what a kill while logging leaves: a RUNNING run with the evaluation's tag and no metrics
    killed = client.create_run(exp, tags={"eval_fingerprint": "fp1"}).info.run_id
    args = dict(
        experiment="sweep",
        fingerprint="fp1",
        tags={"config_key": "c"},
        run_name="c",
        params={"a.b": 1},
        metrics={"recall_at_k": 0.5},
        per_query=pl.DataFrame({"query_id": ["q1"]}),
    )
    first = tracking.ensure_run(force=False, **args)
    assert first != killed and client.get_run(first).data.metrics == {"recall_at_k": 0.5}
    assert client.get_run(killed).info.status == "KILLED"
    assert client.get_run(killed).info.lifecycle_stage == "deleted"
    assert tracking.ensure_run(force=False, **args) == first  # a finished run is reused
    again = tracking.ensure_run(force=True, **args)  # recomputed (forced, or failed calls retried)
    assert again != first and client.get_run(first).info.lifecycle_stage == "deleted"
    assert [r.info.run_id for r in client.search_runs([exp])] == [again]  # one run per evaluation
