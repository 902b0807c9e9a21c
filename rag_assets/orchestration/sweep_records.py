"""Which sweeps ran on a data dir, each known by its file: what `rag-sweep gc` must be given.

A sweep is its file, not its name: a gate file shares its sweep's name (and so its Dagster prefix) to reuse
its partitions, yet evaluates configs of its own. Each run records its file's path and the configs the run
added to the file's (a gate's baseline), in `<data dir>/sweep_files/`; gc keeps what each recorded file's
plan needs, those configs included, and refuses to run without every recorded file.
"""

from __future__ import annotations

import json
from pathlib import Path

from rag_core.common.fingerprint import text_hash
from rag_core.planning.plan import Plan
from rag_core.planning.spec import RagConfig, SpecError
from resources.storage import atomic_write_bytes

FOLDER = "sweep_files"


def _record_path(data: Path, file: Path) -> Path:
    return data / FOLDER / f"{text_hash(str(file))[:24]}.json"


def record_sweep(data: Path, plan: Plan, own: tuple[RagConfig, ...]) -> None:
    """Record that `plan`'s file ran on `data`; its configs not among `own` (the file's) were added by the
    run (a gate's baseline)."""
    added = [c.model_dump(mode="json") for c in plan.sweep.configs if c not in own]
    record = {"file": str(plan.sweep.path), "name": plan.sweep.name, "added_configs": added}
    path = _record_path(data, plan.sweep.path)
    text = json.dumps(record, sort_keys=True).encode()
    if not path.exists() or path.read_bytes() != text:  # an unchanged rerun writes nothing
        atomic_write_bytes(path, text)


def _records(data: Path) -> list[tuple[Path, dict]]:
    folder = data / FOLDER
    out = []
    for path in sorted(folder.glob("*.json")) if folder.exists() else []:
        try:
            record = json.loads(path.read_text())
            out.append((path, {"file": str(record["file"]), "name": str(record["name"]), **record}))
        except (ValueError, KeyError, TypeError) as e:
            raise SpecError(
                f"{path}: not a record of a sweep file ({type(e).__name__}); gc cannot tell which sweeps ran "
                "on this data dir, so nothing was deleted"
            ) from None
    return out


def with_recorded_configs(data: Path, plans: list[Plan]) -> list[Plan]:
    """The given plans, each with the configs its last recorded run added (a gate's baseline); refused in
    one line when a sweep file recorded on the data dir is not among them."""
    from rag_assets.orchestration.plans import load_plan

    records = _records(data)
    given = {str(p.sweep.path) for p in plans}
    missing = [(path, r) for path, r in records if r["file"] not in given]
    if missing:
        named = ", ".join(f"{r['file']} (sweep {r['name']}{_gone(path, r)})" for path, r in missing)
        raise SpecError(
            f"data dir {data} also holds the sweep file(s) {named}: give them too (gc keeps only what the "
            "sweeps it is given need, a sweep is its file, and sweeps share artifacts)"
        )
    out = []
    for plan in plans:
        path, record = next(((p, r) for p, r in records if r["file"] == str(plan.sweep.path)), (None, {}))
        try:
            added = tuple(RagConfig.model_validate(c) for c in record.get("added_configs", []))
        except ValueError as e:  # pydantic's ValidationError is one: a record of another version
            raise SpecError(
                f"{path}: a config its run added is not one this version reads ({e.__class__.__name__}); "
                "run the sweep again, or delete the record, then gc"
            ) from None
        added = tuple(c for c in added if c not in plan.sweep.configs)
        out.append(load_plan(plan.sweep.path, plan.store, data, extra=added) if added else plan)
    return out


def _gone(path: Path, record: dict) -> str:
    if Path(record["file"]).exists():
        return ""
    return f"; the file is gone: give its new path, or delete {path} once no sweep needs what it made"
