"""MLflow through its public API: the product reaches MLflow's private or internal names only through
resources/mlflow_private.py, and each name that module holds is still where, and what, the project relies
on (an MLflow release that moves or changes one fails here)."""

from __future__ import annotations

import re

from tests.conftest import ROOT

SHIM = ROOT / "resources" / "mlflow_private.py"
SKIP = {".venv", "tests", ".git"}


def test_no_private_or_internal_mlflow_outside_the_one_module():
    """No `mlflow.store…` internals and no underscore name of an MLflow object or module elsewhere."""
    pattern = re.compile(
        r"mlflow\.store\.|from mlflow[\w.]* import .*\b_\w|\b_tracking_client\b|_get_registry_client"
    )
    found = [
        f"{p.relative_to(ROOT)}:{n}: {line.strip()}"
        for p in ROOT.rglob("*.py")
        if not SKIP.intersection(p.relative_to(ROOT).parts) and not p.relative_to(ROOT).parts[0].startswith(".")
        and p != SHIM
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if pattern.search(line) and "getLogger" not in line
    ]  # fmt: skip
    assert found == [], "\n".join(found)


def test_each_name_of_the_shim_is_what_the_project_relies_on(tmp_path):
    from mlflow import MlflowClient

    from resources import mlflow_private as private

    assert private.parse_model_uri("models:/m-0123456789abcdef").model_id is not None
    assert private.parse_model_uri("models:/name@champion").model_id is None
    assert private.parse_model_uri("models:/name/3").model_id is None
    store = private.sqlalchemy_store()(f"sqlite:///{tmp_path / 'a.db'}", (tmp_path / "art").as_uri())
    store.engine.dispose()
    client = MlflowClient(f"sqlite:///{tmp_path / 'a.db'}")
    tracking, registry = private.client_stores(client)
    assert getattr(tracking, "engine", None) is not None and getattr(registry, "engine", None) is not None
    client.create_registered_model("m")
    run = client.create_run(client.create_experiment("e"))
    version = client.create_model_version("m", f"{run.info.artifact_uri}/model", run_id=run.info.run_id)
    client.set_registered_model_alias("m", "champion", version.version)
    assert [str(x) for x in private.get_model_name_and_version(client, "models:/m@champion")] == ["m", "1"]
