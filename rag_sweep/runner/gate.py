"""`rag-sweep gate`: the sweep's configs (the candidates) and a baseline evaluated on the same questions,
each candidate tested for non-inferiority against it (rag_core/decision/gate.py).

The baseline is a registered model version (`models:/NAME@champion`: a private copy of its folder checked
against its signed registry tags, then the config that copy says it was evaluated as), a config of the sweep (key or label), or another
sweep's recommendation (its YAML file). Its config joins the sweep's plan, so every partition it shares with
the candidates (or that an earlier run made) is reused, and the stages run as a sweep's do; nothing is
ranked, confirmed or registered. The verdicts are written to the data dir and logged as an MLflow run of
the sweep's experiment (kind `gate`) that names the champion's version."""

from __future__ import annotations

import json
import os
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import polars as pl

from rag_assets.orchestration.plans import load_plan
from rag_assets.stage_asset import asset_key
from rag_core.decision.gate import GateResult, GateSettings, gate
from rag_core.decision.gate_report import reports
from rag_core.decision.qualification import effective_weights, judge_is_weighted
from rag_core.planning.plan import Plan
from rag_core.planning.spec import RagConfig, SpecError
from rag_core.planning.stages import CONFIG_STAGE
from resources.environment import default_data_dir
from resources.storage import data_root


@dataclass(frozen=True)
class Baseline:
    label: str
    config: RagConfig | None  # None: a config of the sweep (`key`)
    key: str | None = None
    model_uri: str | None = None  # a registered version: models:/NAME/N
    model_name: str | None = None
    model_version: str | None = None
    index_fingerprint: str | None = None  # the index its model bundles


@dataclass
class GateRun:
    result: GateResult
    baseline: Baseline
    baseline_key: str
    plan: Plan
    folder: Path  # the reports in the data dir
    mlflow_run_id: str | None
    notes: list[str]
    files: dict[str, str]  # the reports by file name (gate.json, gate.md, junit.xml)


def resolve_baseline(against: str, plan: Plan, store: str | None, data: Path) -> Baseline:
    """What `--against` names: a registered version, a config of the sweep (`plan`'s), or another sweep's
    recommendation."""
    from resources.shipping.bundle import ExportError, config_key_of

    if against.startswith("models:/"):
        return _registered(against, data)
    try:
        key = config_key_of(plan, against, None)  # a key or a label, as `rag-sweep export --config` takes
        return Baseline(plan.labels.get(key, key), None, key)
    except ExportError:
        pass
    path = Path(against)
    if path.suffix in (".yaml", ".yml") and path.is_file():
        return _recommendation_of(path, store, data)
    known = ", ".join(sorted(plan.labels.values())[:8])
    raise SpecError(
        f"--against {against!r}: not a registered model (models:/NAME@champion), a config key or label of "
        f"sweep {plan.sweep.name} ({known} ...), nor a sweep file whose recommendation to compare with"
    )


def _registered(model_uri: str, data: Path) -> Baseline:
    """The config a registered model version was evaluated as, from its folder once checked."""
    from resources.shipping.pipeline import BUNDLE, MANIFEST, TamperedModel, registered_as
    from resources.shipping.registry import download_verified

    with _registry_of(data):
        try:
            registered = registered_as(model_uri)
        except Exception as e:  # no such model or alias: MLflow's message names it
            raise SpecError(f"--against {model_uri}: {getattr(e, 'message', e)}") from None
        if registered is None:
            raise SpecError(
                f"--against {model_uri}: not a registered version (models:/NAME@alias or models:/NAME/N)"
            )
        name, version, _ = registered
        with tempfile.TemporaryDirectory(prefix="rag-gate-") as tmp:  # private: read as it was checked
            try:
                folder = download_verified(f"models:/{name}/{version}", Path(tmp) / "copy")
            except TamperedModel as e:
                raise SpecError(f"--against {model_uri}: {e}") from None
            manifest = json.loads((folder / "artifacts" / BUNDLE / MANIFEST).read_text())
    return Baseline(
        f"{name} v{version} ({manifest.get('label') or manifest['config_key']})",
        RagConfig.model_validate(manifest["config"]),
        model_uri=f"models:/{name}/{version}",
        model_name=name,
        model_version=version,
        index_fingerprint=manifest.get("vector_index_fingerprint"),
    )


@contextmanager
def _registry_of(data: Path):
    """MLflow's default registry is the one the sweep registers in: $MLFLOW_TRACKING_URI, else the data
    dir's store, for this block only (no process-wide MLflow setting outlives it)."""
    from resources.tracking import MlflowTracking

    if os.environ.get("MLFLOW_TRACKING_URI"):
        yield
        return
    os.environ["MLFLOW_TRACKING_URI"] = MlflowTracking(default_dir=str(data)).resolved_uri()
    try:
        yield
    finally:
        os.environ.pop("MLFLOW_TRACKING_URI", None)


def _recommendation_of(path: Path, store: str | None, data: Path) -> Baseline:
    from rag_assets.board_files import read_decision
    from rag_core.decision.holdout import unsupported_claim

    other = load_plan(path, store, data)
    decision = read_decision(data, other.sweep.name)
    key = decision.get("recommended")
    if not key:
        raise SpecError(
            f"--against {path}: sweep {other.sweep.name} recommends no config in {data} (run it first)"
        )
    if why := unsupported_claim(decision):
        raise SpecError(
            f"--against {path}: sweep {other.sweep.name}'s recommendation is not supported: {why}"
        )
    label = other.labels.get(key, key)
    return Baseline(f"{other.sweep.name}'s recommendation ({label})", other.config(key))


def gate_plan(spec: str, plan: Plan, baseline: Baseline, store: str | None, data: Path) -> tuple[Plan, str]:
    """The sweep's plan (`plan`, its file's) with the baseline's config among its configs, and the
    baseline's key."""
    if baseline.config is None:
        return plan, baseline.key
    key = plan.key_of(baseline.config)
    if key in plan.config_keys:
        return plan, key
    return load_plan(spec, store, data, extra=(baseline.config,)), key


def settings_of(plan: Plan, margin=None, metric_margins=None, alpha=None, equivalence=None) -> GateSettings:
    """The sweep file's `gate:` settings, with those given on the command line instead."""
    g = plan.sweep.gate
    return replace(
        GateSettings.of(g),
        **{
            k: v
            for k, v in (
                ("margin", margin),
                (
                    "metric_margins",
                    {**g.metric_margins, **(metric_margins or {})} if metric_margins else None,
                ),
                ("alpha", alpha),
                ("equivalence", equivalence or None),
            )
            if v is not None
        },
    )


def run_gate(
    spec: str,
    against: str,
    data_dir: str | None = None,
    store: str | None = None,
    settings: dict | None = None,
    verbose: bool = False,
    progress: bool = True,
    resources: dict | None = None,
) -> GateRun:
    from rag_sweep.runner.sweep import run_sweep

    data = data_root(data_dir or default_data_dir())
    plan = load_plan(spec, store, data)
    if plan.sweep.search.adaptive:
        raise SpecError(
            f"sweep {plan.sweep.name}: a gate evaluates every candidate config; its search "
            f"{plan.sweep.search.strategy} chooses what to evaluate (use strategy grid in the gate's file)"
        )
    baseline = resolve_baseline(against, plan, store, data)
    plan, base_key = gate_plan(spec, plan, baseline, store, data)
    chosen = settings_of(plan, **(settings or {}))
    run = run_sweep(
        spec, str(data), False, verbose, progress, resources, store, plan=plan, evaluations_only=True
    )
    per_query = {k: run.artifact(CONFIG_STAGE, k, "per_query") for k in plan.config_keys}
    evaluated = {k: run.artifact(CONFIG_STAGE, k) for k in plan.config_keys}  # each config's summary
    summaries = {k: frame.row(0, named=True) for k, frame in evaluated.items()}
    # a file whose only config is the baseline's (a change that changed nothing): it is its own candidate
    candidates = {k: pq for k, pq in per_query.items() if k != base_key} or {base_key: per_query[base_key]}
    weights, judged = effective_gate_weights(run, plan, pl.concat(evaluated.values(), how="diagonal_relaxed"))
    result = gate(
        candidates,
        per_query[base_key],
        weights,
        chosen,
        plan.labels,
        baseline.label,
        summaries=summaries,
        baseline_key=base_key,
        count_judge=judge_is_weighted(plan.sweep.weights, judged),
    )
    notes = _notes(run, plan, baseline, base_key)
    if judged is not None and not judged["weighted"]:
        notes.append(f"faithfulness_judge is not weighted, as on the leaderboard: {judged['reason']}")
    files = reports(result, notes)
    folder = write_reports(data, plan.sweep.name, files)
    link = {"baseline_model_name": baseline.model_name, "baseline_model_version": baseline.model_version}
    run_id = run.defs.resources["tracking"].log_gate(
        plan.sweep.name, result, files, baseline.model_uri and link
    )
    return GateRun(result, baseline, base_key, plan, folder, run_id, notes, files)


def effective_gate_weights(
    run, plan: Plan, summaries: dict[str, dict]
) -> tuple[dict[str, float], dict | None]:
    """The weights the leaderboard would score these configs with (rag_core/decision/qualification.
    effective_weights): the judge measured against the sweep's labels as the board measures it (through
    the call cache), a metric no config defines left out; and that measurement (None: no labels)."""
    from rag_assets.leaderboard import measure_judge

    judged = measure_judge(plan.sweep, run.defs.resources["llm"])
    try:
        weights, _ = effective_weights(plan.sweep.weights, summaries, judged)
    except ValueError as e:
        raise SpecError(f"sweep {plan.sweep.name}: {e}") from None
    return weights, judged


def _notes(run, plan: Plan, baseline: Baseline, base_key: str) -> list[str]:
    """What a reader of the verdicts should know about the baseline and the questions."""
    notes = []
    if baseline.index_fingerprint is not None:
        from resources.artifacts import latest_fingerprint

        built = latest_fingerprint(
            run.instance, asset_key(plan, "vector_index"), plan.key_of(plan.config(base_key), "vector_index")
        )
        if built == baseline.index_fingerprint:
            notes.append(
                f"the baseline's index is the one {baseline.model_uri} bundles (fingerprint {built[:12]})"
            )
        else:
            notes.append(
                f"the baseline is {baseline.model_uri}'s settings on this sweep's data: its bundled index "
                f"({baseline.index_fingerprint[:12]}) was built from other data or settings of the "
                "environment; this one is rebuilt from the sweep's corpus"
            )
    if plan.holdout:
        notes.append(
            f"questions: the selection split of {plan.sweep.name} (decision.holdout "
            f"{plan.sweep.decision.holdout:g} holds the rest out; set it to 0 in the gate's file to use every question)"
        )
    return notes


def write_reports(data: Path, sweep: str, files: dict[str, str]) -> Path:
    """The reports in `<data>/gates/<sweep>/<UTC time>/`, each written whole (a reader never sees half)."""
    from datetime import UTC, datetime

    from resources.storage import atomic_write_bytes

    folder = data / "gates" / sweep / datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    for name, text in files.items():
        atomic_write_bytes(folder / name, text.encode())
    return folder
