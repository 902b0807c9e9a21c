"""The sweep's registered model: each leaderboard whose recommendation changed registers the recommended
config as a new version of the model named after the sweep, and moves the alias `champion` to it, so
`models:/<sweep>@champion` is always the current winner. The same recommendation evaluated the same way (its
evaluation fingerprint) registers nothing: a rerun, a re-ranking or a nightly re-evaluation leaves the
registry as it is.

A version's tags record what its model folder is (`model_fingerprint`, `model_files`, `bundle_fingerprint`,
`bundle_parts`: resources/shipping/bundle.py `fingerprints`) and their signature (`model_signature`, with this user's
signing key: resources/shipping/signing.py), which one who can rewrite the folder and the tracking store cannot make.
`load_champion` (and `rag-sweep verify-model`, `serve`, `gate --against models:/...`) copies a version into
a private folder, checks every file of the copy against them, and loads that copy: MLflow runs no code of
it before the check, and nothing is read again from the registry's folder."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:  # the bundle imports MLflow's pyfunc: a rerun reading the champion need not
    from resources.shipping.bundle import Bundle

from resources.shipping.signing import SIGNATURE_VERSION

ALIAS = "champion"


def current_champion(client, name: str):
    """The model version the alias points at, or None (no model, or no alias yet)."""
    from mlflow.exceptions import MlflowException

    try:
        return client.get_model_version_by_alias(name, ALIAS)
    except MlflowException:
        return None


class Champion(NamedTuple):
    """What a rerun reads of the registered champion: its version and tags."""

    version: str
    tags: dict[str, str]


def champion_of(tracking, name: str) -> Champion | None:
    """The champion `current_champion` reads, through `tracking` (an MlflowTracking): on a local store
    remembered while the store is unchanged, so an unchanged rerun does not import MLflow for it."""

    def ask() -> list | None:
        now = current_champion(tracking.client(), name)
        return None if now is None else [str(now.version), dict(now.tags)]

    found = tracking.remembered(f"champion/{name}", ask)
    return None if found is None else Champion(*found)


def due(now, evaluation_fingerprint: str) -> bool:
    """Whether the champion `now` (a model version or None) is to be replaced: none yet, another
    evaluation, or one registered before versions recorded their folder's fingerprints and signature (it
    refuses to load: the same evaluation is registered again, fingerprinted and signed)."""
    return (
        now is None
        or now.tags.get("evaluation_fingerprint") != evaluation_fingerprint
        or "model_fingerprint" not in now.tags
        or "model_signature" not in now.tags
        or now.tags.get("signature_version") != SIGNATURE_VERSION  # signed over its files alone: sign anew
    )


def register_champion(tracking, bundle: Bundle) -> dict:
    """Register `bundle` (the recommended config) unless the champion already is its evaluation. Returns
    what the registry holds now: `{"name", "version", "registered": bool, "model_uri"}`. The model is logged
    to a run of the sweep's experiment (kind `champion`) through the client alone: no process-wide MLflow
    setting is changed."""
    from mlflow.exceptions import MlflowException

    from resources.shipping.bundle import fingerprints, save
    from resources.shipping.signing import sign

    client, name = tracking.client(), bundle.manifest["sweep"]
    uri = f"models:/{name}@{ALIAS}"
    now = current_champion(client, name)
    fingerprint = bundle.manifest["evaluation_fingerprint"]
    if not due(now, fingerprint):
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
        folder = save(bundle, Path(tmp) / "model")
        tags.update(fingerprints(folder))  # what the folder is, signed with a key its writer does not hold
        # the key signs who the model is with what it holds: registered under another name, or as another
        # sweep's or config's, it does not verify (resources/shipping/signing.py)
        identity = {"registered_name": name, "sweep": name, "config_key": bundle.config_key,
                    "evaluation_fingerprint": fingerprint}  # fmt: skip
        tags["model_signature"] = sign(json.loads(tags["model_files"]), identity)
        tags["signature_version"] = SIGNATURE_VERSION
        client.log_artifacts(run.info.run_id, str(folder), "model")
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
        description=version_description(bundle, name, figures),
    )
    client.set_registered_model_alias(name, ALIAS, version.version)
    return {"name": name, "version": int(version.version), "registered": True, "model_uri": uri}


def version_description(bundle: Bundle, name: str, figures: dict) -> str:
    """What the MLflow UI shows on the version (Markdown): a sentence naming the config, and its figures as a
    short table, numbers rounded as the board prints them."""
    verdict = bundle.metadata.get("holdout_verdict")
    lines = [
        f"**{bundle.label}** (`{bundle.config_key}`), recommended by the leaderboard of sweep `{name}`"
        + (f"; holdout: {verdict}." if verdict else "."),
    ]
    shown = {k: v for k, v in figures.items() if v is not None}
    if shown:
        lines += ["", "| figure | value |", "|---|---|"]
        lines += [f"| {k} | {_figure(v)} |" for k, v in shown.items()]
    return "\n".join(lines)


def _figure(value) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value).replace("|", "\\|")
    if isinstance(value, int) or float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:.4g}" if abs(value) < 1 else f"{value:,.1f}"


def private_folder(dst: Path | str | None = None) -> Path:
    """A folder only this user can write (0700): `dst` (made, or an empty folder of this user's), else a
    new temporary one. What is verified there stays what was verified: no other writer can swap a file
    between the check and the load."""
    import os
    import stat

    if dst is None:
        return Path(tempfile.mkdtemp(prefix="rag-model-copy-"))  # 0700
    folder = Path(dst)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = folder.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or any(folder.iterdir()):
        raise ValueError(f"{folder}: not a new or empty folder of this user's: name a new one")
    folder.chmod(0o700)
    return folder


def download_verified(model_uri: str, dst: Path | str | None = None, fingerprint: str | None = None) -> Path:
    """The registered version `model_uri` names (`models:/NAME@alias`, `models:/NAME/N`; the tracking URI
    set), copied (or downloaded) into a private folder (`private_folder(dst)`) and checked there against its
    registry tags, anchored by `fingerprint` (pinned by the user) or else their signature: every file,
    pipeline.json's settings, prompts and file hashes. Nothing of the folder is run, and nothing is read
    again from the registry's folder: the copy is what was checked. TamperedModel when it is not what was
    registered."""
    import mlflow.artifacts
    from mlflow.tracking import MlflowClient

    from resources.shipping.pipeline import BUNDLE, MANIFEST, check_registered, registered_as

    registered = registered_as(model_uri)
    if registered is None:
        raise ValueError(
            f"{model_uri}: not a registered model version (models:/NAME@alias or models:/NAME/N)"
        )
    name, version, tags = registered
    source = MlflowClient().get_model_version_download_uri(name, version)
    private = private_folder(dst)
    try:
        # with a destination, MLflow copies a local store's files too (without one it returns them in place)
        folder = Path(mlflow.artifacts.download_artifacts(artifact_uri=source, dst_path=str(private)))
        check_regular_files(folder)
        try:
            manifest = json.loads((folder / "artifacts" / BUNDLE / MANIFEST).read_text())
        except (OSError, ValueError):
            manifest = None  # missing or not JSON: named by the file check
        check_registered(folder, manifest, name, version, tags, fingerprint)
    except BaseException:
        if dst is None:  # a copy refused (or half made) is not left behind
            import shutil

            shutil.rmtree(private, ignore_errors=True)
        raise
    return folder


def check_regular_files(folder: Path) -> None:
    """A verified copy holds plain files and folders only: a link would point outside what was checked."""
    from resources.shipping.pipeline import TamperedModel

    for path in folder.rglob("*"):
        if path.is_symlink() or not (path.is_file() or path.is_dir()):
            raise TamperedModel(f"{path}: not a plain file of the model (a link): refusing to load")


def load_champion(model_uri: str, dst: Path | str | None = None, fingerprint: str | None = None):
    """The registered model `model_uri` (`models:/<sweep>@champion` ...) as a pyfunc model, loaded from the
    private copy `download_verified` checked (`fingerprint`: the folder fingerprint to hold it to, instead of
    its signature): no code of a folder that is not the registered one runs. Without `dst`, the copy is
    removed once loaded (the model holds what it read)."""
    import shutil

    import mlflow.pyfunc

    private = private_folder(dst)
    try:
        return mlflow.pyfunc.load_model(str(download_verified(model_uri, private, fingerprint)))
    finally:
        if dst is None:
            shutil.rmtree(private, ignore_errors=True)
