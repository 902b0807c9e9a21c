"""A local MLflow store's answers, remembered while the store is unchanged: an unchanged rerun neither imports
MLflow nor queries it, and any write to the store (a deleted run, a moved alias) is asked about again."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from resources.store_answers import StoreAnswers

ROOT = Path(__file__).resolve().parents[1]

ASK = """
import json, sys
from resources.tracking import MlflowTracking
from resources.shipping.registry import champion_of
t = MlflowTracking(default_dir=sys.argv[1])
logged = sorted(t.logged("exp", "eval_fingerprint"))
champion = champion_of(t, "exp")
print(json.dumps({"logged": logged, "champion": champion and list(champion), "url": t.ranked_runs_url("exp"),
                  "imported": "mlflow" in sys.modules}))
"""


def _ask(data: Path) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", ASK, str(data)], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture
def store(tmp_path, monkeypatch):
    from mlflow import MlflowClient

    from resources.tracking import MlflowTracking

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    data = tmp_path / "data"
    tracking = MlflowTracking(default_dir=str(data))
    client = MlflowClient(tracking.resolved_uri())
    tracking.client()  # the store seeded as the product seeds it
    exp = tracking.experiment_id("exp")
    return data, client, exp


def test_an_unchanged_store_is_not_asked_again_and_a_changed_one_is(store, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    data, client, exp = store
    runs = []
    for fp in ("a", "b"):
        run = client.create_run(exp, tags={"eval_fingerprint": fp})
        client.set_terminated(run.info.run_id)
        runs.append(run.info.run_id)
    first = _ask(data)
    assert first["imported"] and first["logged"] == ["a", "b"] and first["champion"] is None
    assert f"/#/experiments/{exp}/runs?" in first["url"]
    again = _ask(data)
    assert not again["imported"]  # nothing changed: remembered, MLflow not even imported
    assert {k: v for k, v in again.items() if k != "imported"} == {
        k: v for k, v in first.items() if k != "imported"
    }

    client.delete_run(runs[0])  # a user deletes a run in the MLflow UI
    after_delete = _ask(data)
    assert after_delete["imported"] and after_delete["logged"] == ["b"]

    client.create_registered_model("exp")
    version = client.create_model_version("exp", source=f"runs:/{runs[1]}/model", run_id=runs[1])
    client.set_model_version_tag("exp", version.version, "evaluation_fingerprint", "b")
    client.set_registered_model_alias("exp", "champion", version.version)
    champion = _ask(data)["champion"]
    assert champion == [str(version.version), {"evaluation_fingerprint": "b"}]
    assert not _ask(data)["imported"]


def test_a_memo_of_another_store_state_or_a_damaged_memo_is_not_used(tmp_path):
    db = tmp_path / "mlflow.db"
    db.write_bytes(b"one")
    answers = StoreAnswers(db)
    assert answers.get("q", lambda: 1) == 1
    assert answers.get("q", lambda: 2) == 1  # remembered
    db.write_bytes(b"two, longer")  # the store changed
    assert answers.get("q", lambda: 3) == 3
    answers.file.write_text("{not json")
    assert answers.get("q", lambda: 4) == 4
    assert json.loads(answers.file.read_text())["answers"] == {"q": 4}
    moved = tmp_path / "moved"
    moved.mkdir()
    db.rename(moved / "mlflow.db")
    answers.file.rename(moved / "mlflow.db.answers.json")
    assert StoreAnswers(moved / "mlflow.db").get("q", lambda: 5) == 5  # another path: asked again
