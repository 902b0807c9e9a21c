"""What a sweep run has to do: the steps (stage, partition) whose artifact is not complete for the inputs
as they are now, in dependency order. A partition whose latest materialization holds the artifact these
inputs give is skipped, so an unchanged rerun computes nothing and a killed run resumes from what is
complete."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import dagster as dg

from rag_assets.board_files import leaderboard_path, read_decision
from rag_assets.confirmation import board_decision
from rag_assets.indexes import index_present
from rag_assets.stage_asset import asset_key
from rag_core.common.fingerprint import file_hash
from rag_core.decision.holdout import is_holdout_key
from rag_core.planning.inputs import snapshot_fingerprints
from rag_core.planning.plan import Plan
from rag_core.planning.stages import CONFIG_STAGE
from rag_core.planning.stages import stage as stage_of
from resources.artifacts import (
    ArtifactRef,
    latest_fingerprint,
    latest_fingerprints,
    materialized_fingerprints,
)

Step = tuple[str, str | None]  # (stage, partition key; None for an unpartitioned stage)
Complete = Callable[[str, str | None], ArtifactRef | None]


def input_fingerprints(plan: Plan, instance) -> dict[str, str | None]:
    """The fingerprints of the input snapshots (corpus, QA set) as last materialized."""
    return {s: latest_fingerprint(instance, asset_key(plan, s), None) for s in ("corpus", "qa_set")}


def completed(
    plan: Plan, instance, data: Path, questions: int | None = None, stores=None, with_failures: bool = False
) -> Complete:
    """`complete(stage, key)`: the artifact ref of a partition whose latest materialization holds the
    artifact the materialized input snapshots give, whole in `data`; else None. With `questions`: the
    artifact of that halving rung (the QA set's first N questions in the search's order), whole in
    `data`, that the partition materialized at some point, whatever it materialized since. An artifact
    another sweep made (they are content-addressed, shared) is not complete for this sweep until its own
    partition records it (a step that reuses it): its downstream steps read their inputs from what this
    sweep's partitions materialized. A vector index is complete only when `stores` (the VectorStores
    resource) still hold the collection its marker records. An artifact holding failed LLM calls is not
    complete (they are asked again), unless `with_failures` (a search reading what it ran: the failures
    count against the config, as a grid's leaderboard counts them)."""
    inputs = input_fingerprints(plan, instance)
    expected: dict[tuple[str, str | None], str] = plan.fingerprints(inputs, rung=questions)
    expected[("leaderboard", None)] = plan.board_fingerprint(inputs, expected)
    board = ArtifactRef(data, "leaderboard", expected[("leaderboard", None)])
    if (
        plan.holdout and questions is None and board.intact()
    ):  # its finalists are known: so is what confirms them
        finals = board_decision(board)["finalists"]
        expected[("confirmation", None)] = plan.confirmation_fingerprint(inputs, expected, board.fp, finals)
    latest: dict[dg.AssetKey, dict[str | None, str | None]] = {}  # asset -> partition -> latest fp

    def complete(stage: str, key: str | None) -> ArtifactRef | None:
        if (stage, key) not in expected:  # a confirmation before its leaderboard
            return None
        ref = ArtifactRef(data, stage, expected[(stage, key)], key)
        # the artifact alone is not enough: it is content-addressed, shared by every sweep on the data dir,
        # but a step reads its inputs from what this sweep's partitions materialized (`<sweep>/<stage>`)
        asset = asset_key(plan, stage, key)  # a holdout key's: the stage's holdout asset
        if asset not in latest:
            latest[asset] = (
                latest_fingerprints(instance, asset)
                if stage_of(stage).partitioned
                else {None: latest_fingerprint(instance, asset, None)}
            )
        if latest[asset].get(key) != ref.fp and ref.exists():  # materialized since that read?
            latest[asset][key] = latest_fingerprint(instance, asset, key)
        if latest[asset].get(key) != ref.fp and (
            questions is None
            or not ref.exists()  # a past rung: its artifact, once this sweep's partition recorded it
            or ref.fp not in materialized_fingerprints(instance, asset, key)
        ):
            return None
        # not intact: another data dir, same instance; failed LLM calls: asked again
        if not ref.intact() or (not with_failures and ref.failed_calls()):
            return None
        if stage_of(stage).external:  # a vector index: its marker can outlive the store's collection
            config = plan.partition(stage, key).config
            if stores is None or not index_present(stores.get(config.index.store), key, ref):
                return None
        return ref

    return complete


def unobserved(instance, sources: list) -> list:
    """The observable input files whose content is not what their latest observation recorded (or that
    were never observed): an unchanged file needs no run to observe it again."""
    changed = []
    for source in sources:
        record = instance.get_latest_data_version_record(source.key, is_source=True)
        seen = record.asset_observation.data_version if record and record.asset_observation else None
        if seen != file_hash(source.metadata["path"].path):  # the path the observation hashes
            changed.append(source)
    return changed


def stale_snapshots(plan: Plan, instance, data: Path) -> list[str]:
    """The input snapshots (corpus, qa_set) whose latest materialization does not hold the files as they
    are now, whole in `data`: an unchanged file needs no run to snapshot it again. Each file is hashed once."""
    return [
        stage
        for stage, fp in snapshot_fingerprints(plan.sweep).items()
        if latest_fingerprint(instance, asset_key(plan, stage), None) != fp
        or not ArtifactRef(data, stage, fp).intact()
    ]


def steps(plan: Plan, instance, data: Path, force: bool, stores=None, tracking=None) -> list[Step]:
    """(stage, partition) steps in dependency order after the input snapshots, the leaderboard last:
    complete partitions are left out. An evaluation or leaderboard is complete only when `tracking` (the
    MLflow resource) also holds its finished run, so an unchanged rerun launches no Dagster run for them."""
    complete = completed(plan, instance, data, stores=stores)
    logged = {}
    if tracking is not None and not force:
        logged = {
            CONFIG_STAGE: tracking.logged(plan.sweep.name, "eval_fingerprint"),
            "leaderboard": tracking.logged(plan.sweep.name, "board_fingerprint"),
        }

    def todo(stage: str, key: str | None) -> bool:
        if force or (ref := complete(stage, key)) is None:
            return True
        if stage in (CONFIG_STAGE, "leaderboard") and tracking is None:
            return True  # no way to ask MLflow: the step makes sure its run exists
        return logged.get(stage) is not None and ref.fp not in logged[stage]

    planned = [(stage, key) for stage, keys in plan.partitions.items() for key in keys if todo(stage, key)]
    board_file = leaderboard_path(data, plan.sweep.name)
    if planned or not board_file.exists() or todo("leaderboard", None):
        planned.append(("leaderboard", None))
    return planned


def holdout_steps(plan: Plan, instance, data: Path, force: bool, board_ran: bool, stores=None) -> list[Step]:
    """After the leaderboard: the holdout partitions of its finalists that are not complete, then the
    confirmation (rag_assets/confirmation.py) unless it is complete and the leaderboard did not run (a
    leaderboard run logged again to MLflow gets the holdout from it again)."""
    complete = completed(plan, instance, data, stores=stores)
    finals = read_decision(data, plan.sweep.name).get("finalists") or []
    if not finals:  # a QA set too small to hold any question out: nothing to confirm
        return []
    todo = [step for k in finals for step in plan.holdout_steps(k) if force or complete(*step) is None]
    if todo or force or board_ran or complete("confirmation", None) is None:
        todo.append(("confirmation", None))
    return todo


def new_finalists(plan: Plan, instance, steps: list[Step]) -> list[str]:
    """The holdout keys among `steps` that the holdout's partitions definition does not hold yet: the
    partitions to add (a finalist's partitions appear when a leaderboard names it)."""
    wanted = [k for _, k in steps if is_holdout_key(k)]
    if not wanted:
        return []
    have = set(instance.get_dynamic_partitions(plan.finalists_partitions))
    return [k for k in dict.fromkeys(wanted) if k not in have]


def reads(plan: Plan, step: Step) -> list[Step]:
    """The steps whose artifacts a step reads: its partition's upstream partitions; the leaderboard
    reads every evaluation."""
    stage, key = step
    if stage == "leaderboard":
        return [(CONFIG_STAGE, k) for k in plan.config_keys]
    return [(s, k) for s, k in plan.partition(stage, key).reads.items() if k is not None]
