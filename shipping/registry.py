"""The sweep's registered model: each leaderboard whose recommendation changed registers the recommended
config as a new version of the model named after the sweep, and moves the alias `champion` to it, so
`models:/<sweep>@champion` is always the current winner. The same recommendation evaluated the same way (its
evaluation fingerprint) registers nothing: a rerun, a re-ranking or a nightly re-evaluation leaves the
registry as it is."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from shipping.bundle import Bundle, save

ALIAS = "champion"


def current_champion(client, name: str):
    """The model version the alias points at, or None (no model, or no alias yet)."""
    from mlflow.exceptions import MlflowException

    try:
        return client.get_model_version_by_alias(name, ALIAS)
    except MlflowException:
        return None


def register_champion(tracking, bundle: Bundle) -> dict:
    """Register `bundle` (the recommended config) unless the champion already is its evaluation. Returns
    what the registry holds now: `{"name", "version", "registered": bool, "model_uri"}`. The model is logged
    to a run of the sweep's experiment (kind `champion`) through the client alone: no process-wide MLflow
    setting is changed."""
    from mlflow.exceptions import MlflowException

    client, name = tracking.client(), bundle.manifest["sweep"]
    uri = f"models:/{name}@{ALIAS}"
    now = current_champion(client, name)
    fingerprint = bundle.manifest["evaluation_fingerprint"]
    if now is not None and now.tags.get("evaluation_fingerprint") == fingerprint:
        return {"name": name, "version": int(now.version), "registered": False, "model_uri": uri}
    tags = {
        "kind": "champion",
        "sweep": name,
        "config_key": bundle.config_key,
        "evaluation_fingerprint": fingerprint,
    }
    # the run is not a config run: it carries no `config_key` tag (which lists a sweep's config runs)
    run_tags = {"kind": "champion", "sweep": name, "champion_config": bundle.config_key}
    run = client.create_run(tracking.experiment_id(name), run_name=f"champion: {bundle.label}", tags=run_tags)
    with tempfile.TemporaryDirectory() as tmp:
        client.log_artifacts(run.info.run_id, str(save(bundle, Path(tmp) / "model")), "model")
    client.set_terminated(run.info.run_id)
    try:
        client.create_registered_model(name, description=f"The recommended config of sweep {name}.")
    except MlflowException as e:
        if "already exists" not in str(e).lower() and "RESOURCE_ALREADY_EXISTS" not in str(e):
            raise
    figures = bundle.metadata.get("figures", {})
    version = client.create_model_version(
        name,
        f"{run.info.artifact_uri}/model",
        run_id=run.info.run_id,
        tags=tags,
        description=f"{bundle.label} ({bundle.config_key}), recommended by the leaderboard of {name}: "
        f"{json.dumps(figures, default=str)}",
    )
    client.set_registered_model_alias(name, ALIAS, version.version)
    return {"name": name, "version": int(version.version), "registered": True, "model_uri": uri}
