"""`rag-sweep gc`: what a data dir holds that none of its sweeps needs now, and removing it.

Kept, for every sweep given (all the sweep files the data dir has run must be given, rag_assets/orchestration/
sweep_records.py; with the configs their runs added, a gate's baseline):
- every artifact its plan expects from its input files as they are now (`Plan.fingerprints`, and each
  rung of a halving search), and the latest materialization the instance records for each of its
  partitions and for its leaderboard, confirmation and input snapshots: what a rerun reuses and the UI shows;
- the vector-store collections of the kept index markers, and of every version of the sweep's registered
  model on a server store (it searches its collection there; on an embedded store it builds its index
  from its own bundle);
- the embedding-cache parts that hold any text of a kept chunkset or QA set.

Removed (with `apply`, else only listed): every other artifact file older than `older_than` seconds, the
collections its index markers name, the cache parts with no kept text. Under the data dir's lock, so a
run started meanwhile waits for it; the age guards what a deployment's run (which takes no such lock) is
writing now. MLflow runs are left alone: they are a record of what was evaluated, not storage that grows
with reruns (a rerun updates a config's run in place). Nothing reached through a link is followed or removed,
and nothing outside the data dir is deleted (rag_assets/orchestration/contained.py).
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from rag_assets.orchestration.contained import contained, listed_files, subfolders, unlink_contained
from rag_assets.orchestration.sweep_records import with_recorded_configs
from rag_assets.stage_asset import asset_key, holdout_asset_key
from rag_core.common.fingerprint import text_hash
from rag_core.decision.holdout import holdout_size
from rag_core.planning.inputs import snapshot_fingerprints
from rag_core.planning.plan import Plan
from rag_core.planning.spec import SpecError
from rag_core.planning.stages import PARTITIONED, STAGES
from rag_core.search.halving import next_rung
from resources.artifacts import ArtifactRef, latest_fingerprint, latest_fingerprints
from resources.storage import is_remote, read_parquet

ARTIFACT_FILE = re.compile(r"^([0-9a-f]{64})(?:\.[A-Za-z_]+)?\.parquet$")
FOLDERS = [s.name for s in STAGES] + ["prompt_optimizations"]
PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")  # a collection or build: no path in it


@dataclass
class Garbage:
    files: list[tuple[Path, int]] = field(default_factory=list)  # (path, bytes)
    collections: list[tuple[str, str]] = field(default_factory=list)  # (store, collection)
    cache_parts: list[tuple[Path, int]] = field(default_factory=list)
    kept_files: int = 0
    kept_collections: set[tuple[str, str]] = field(default_factory=set)
    too_recent: int = 0
    left: list[Path] = field(default_factory=list)  # links met, and files a delete found behind one
    left_collections: list[tuple[str, str]] = field(default_factory=list)  # whose files are behind one

    @property
    def bytes(self) -> int:
        return sum(n for _, n in self.files) + sum(n for _, n in self.cache_parts)

    def lines(self, applied: bool, to_apply: str = "run again with --apply") -> list[str]:
        did = "removed" if applied else "would remove"
        by_stage: dict[str, list[int]] = {}
        for path, n in self.files:
            by_stage.setdefault(path.parent.name, []).append(n)
        out = [
            f"{did} {len(self.files)} artifact file(s), {len(self.cache_parts)} embedding-cache part(s) and "
            f"{len(self.collections)} vector collection(s): {_size(self.bytes)}"
        ]
        out += [f"  {s:22} {len(ns):5d} files  {_size(sum(ns)):>9}" for s, ns in sorted(by_stage.items())]
        if self.cache_parts:
            out.append(
                f"  {'embedding_cache':22} {len(self.cache_parts):5d} parts  "
                f"{_size(sum(n for _, n in self.cache_parts)):>9}"
            )
        out += [f"  {store} collection {name}" for store, name in self.collections]
        out.append(
            f"kept {self.kept_files} artifact file(s) and {len(self.kept_collections)} collection(s) the sweeps "
            f"need"
            + (
                f"; {self.too_recent} unneeded file(s) younger than --older-than left"
                if self.too_recent
                else ""
            )
        )
        if self.left or self.left_collections:
            out.append(
                f"left {len(self.left)} link(s) and {len(self.left_collections)} collection(s) reached through "
                "one: gc never follows a link nor deletes outside the data dir"
            )
            out += [f"  {path}" + _target(path) for path in self.left]
            out += [f"  {store} collection {name}" for store, name in self.left_collections]
        if not applied and (self.files or self.collections or self.cache_parts):
            out.append(f"nothing was deleted: {to_apply} to remove them")
        return out


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def _target(path: Path) -> str:
    try:
        return f" -> {os.readlink(path)}"
    except OSError:  # not a link itself (a folder on its way is)
        return ""


def parse_age(text: str) -> float:
    """'30d', '12h', '45m', '0' -> seconds; a bad value is a one-line error."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text or "")
    if not m:
        raise SpecError(f"--older-than {text!r}: expected a number and a unit, e.g. 30d, 12h, 45m or 0")
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]


def collect(plans: list[Plan], data: Path, instance, older_than_s: float) -> Garbage:
    """What the sweeps of `plans` do not need in the data dir `data` (nothing is deleted); `instance`: the
    Dagster instance their runs are recorded in."""
    _refuse_unnamed_sweeps(data, plans)
    plans = with_recorded_configs(data, plans)  # every sweep file that ran here, with what its run added
    keep: set[tuple[str, str]] = set()
    for plan in plans:
        keep |= _needed(plan, instance, data)
    garbage = Garbage()
    cutoff = time.time() - older_than_s
    for folder in FOLDERS:
        paths, links = listed_files(data / folder, data)
        garbage.left += links
        for path in paths:
            m = ARTIFACT_FILE.match(path.name)
            if m is None:
                continue
            if (folder, m.group(1)) in keep:
                garbage.kept_files += 1
                continue
            st = path.stat()  # once: a request on object storage
            if st.st_mtime > cutoff:
                garbage.too_recent += 1
            else:
                garbage.files.append((path, st.st_size))
    protected = _registered_collections(plans, data) | {
        _marker_collection(ArtifactRef(data, "vector_index", fp)) for s, fp in keep if s == "vector_index"
    }
    garbage.kept_collections = {c for c in protected if c is not None}
    left_markers = []
    for path, _ in garbage.files:
        if path.parent.name == "vector_index" and len(path.name) == 64 + len(".parquet"):  # the marker itself
            found = _marker_collection(ArtifactRef(data, "vector_index", path.name[:64]))
            if found is not None and found not in garbage.kept_collections:
                if _collection_contained(*found, data):
                    garbage.collections.append(found)
                else:  # its marker stays too: a gc after the link is gone finds it again
                    garbage.left_collections.append(found)
                    left_markers.append(path)
    garbage.files = [f for f in garbage.files if f[0] not in left_markers]
    garbage.cache_parts = _unneeded_cache_parts(data, keep, cutoff, garbage.left)
    return garbage


def remove(garbage: Garbage, data: Path) -> None:
    """Delete what `collect` found: collections first (their markers go last, so an interrupted gc that
    is run again still finds them), then cache parts, then the artifact files."""
    from resources.vector_stores import VectorStores

    stores = VectorStores.from_env(str(data))
    for found in list(garbage.collections):
        if _collection_contained(*found, data):  # again: a folder may have become a link since
            stores.get(found[0]).delete(found[1])
        else:
            garbage.collections.remove(found)
            garbage.left_collections.append(found)
    for kind in (garbage.cache_parts, garbage.files):
        for entry in sorted(kind, key=lambda f: f[0].parent.name == "vector_index"):
            if not unlink_contained(entry[0], data):
                kind.remove(entry)
                garbage.left.append(entry[0])


def _collection_contained(backend: str, name: str, data: Path) -> bool:
    """Whether deleting a collection deletes only files under the data dir: a server store's is on its
    server; an embedded store's alias file and build are in `data/<backend>`, reached without a link."""
    from rag_core.components.stores import keeps_files
    from resources.vector_stores.embedded import AliasDirectory

    try:
        if keeps_files(backend) == "server":
            return True
    except ValueError:  # a plug-in store no longer installed: nothing here can open it to delete
        return False
    if not PLAIN_NAME.fullmatch(name):
        return False
    if is_remote(data):
        return True
    root = data / backend
    if not contained(root, data, folder=True):
        return False
    alias = root / "_aliases" / f"{name}.json"
    if not os.path.lexists(alias):
        return True  # no alias: the store's delete finds nothing to remove
    if not contained(alias, data):
        return False
    record = AliasDirectory(root).get(name)
    physical = record["physical"] if record else None
    if physical is None:
        return True
    builds = [
        root / physical,
        root / f"{physical}.lance",
    ]  # a build's folder, as each embedded store names it
    return bool(PLAIN_NAME.fullmatch(physical)) and all(
        contained(b, data, folder=True) for b in builds if os.path.lexists(b)
    )


def _refuse_unnamed_sweeps(data: Path, plans: list[Plan]) -> None:
    """Another sweep that ran on this data dir shares its artifacts by content: gc cannot tell which it needs."""
    claims = data / "sweep_prefixes"
    ran = {p.read_text().strip() for p in claims.glob("*.txt")} if claims.exists() else set()
    missing = sorted(ran - {p.sweep.name for p in plans})
    if missing:
        raise SpecError(
            f"data dir {data} also holds the sweep(s) {', '.join(missing)}: give their sweep files too (gc keeps "
            "only what the sweeps it is given need, and sweeps share artifacts)"
        )


def _needed(plan: Plan, instance, data: Path) -> set[tuple[str, str]]:
    """(stage, fingerprint) of every artifact the plan needs now, and what the instance last recorded."""
    sweep = plan.sweep
    inputs = snapshot_fingerprints(sweep)
    expected = dict(plan.fingerprints(inputs))
    qa = ArtifactRef(data, "qa_set", inputs.get("qa_set", ""))
    if sweep.search.how == "halving" and "qa_set" in inputs and qa.exists():  # else no rung ran on it
        questions = read_parquet(qa.path(), columns=["query_id"]).height
        n = questions - holdout_size(questions, sweep.decision.holdout)
        size = min(sweep.search.start_questions, n)
        while size < n:  # every rung's artifacts: a rerun of the search finds each one
            expected |= plan.fingerprints(inputs, rung=size)
            size = next_rung(size, sweep.search.growth, n)
    keep = {(stage, fp) for (stage, _), fp in expected.items()} | {(n, fp) for n, fp in inputs.items()}
    for s in PARTITIONED:
        latest = latest_fingerprints(instance, asset_key(plan, s.name))
        keep |= {(s.name, fp) for key, fp in latest.items() if key in plan.partitions[s.name]}
        if s.name in plan.holdout_partitions:  # the finalists' holdout, in its own asset
            latest = latest_fingerprints(instance, holdout_asset_key(plan, s.name))
            keep |= {(s.name, fp) for key, fp in latest.items() if key in plan.holdout_partitions[s.name]}
    for name in ("corpus", "qa_set", "leaderboard", "confirmation"):
        if fp := latest_fingerprint(instance, asset_key(plan, name), None):
            keep.add((name, fp))
    if plan.optimizable_keys:
        latest = latest_fingerprints(instance, asset_key(plan, "prompt_optimizations"))
        keep |= {("prompt_optimizations", fp) for k, fp in latest.items() if k in plan.optimizable_keys}
    return keep


def _marker_collection(ref: ArtifactRef) -> tuple[str, str] | None:
    try:
        marker = ref.read()
    except Exception:  # a marker already gone or damaged: its collection is not known
        return None
    return str(marker["store"][0]), str(marker["collection"][0])


def _registered_collections(plans: list[Plan], data: Path) -> set[tuple[str, str]]:
    """(store, collection) of every registered version of the sweeps' models: a shipped model on a server
    store searches its collection (an embedded store's model rebuilds its index from the bundle)."""
    import json

    import mlflow

    from rag_core.components.stores import keeps_files
    from resources.shipping.pipeline import BUNDLE, MANIFEST
    from resources.tracking import MlflowTracking

    tracking = MlflowTracking(default_dir=str(data))
    if tracking.never_made():  # no store yet (a dry run on a data dir no run used): none registered
        return set()
    client, out = tracking.client(), set()
    for plan in plans:
        try:  # a name never registered gives no versions, not an error
            versions = client.search_model_versions(f"name = '{plan.sweep.name}'")
        except Exception as e:  # a registry that cannot be read could hide a champion's collection
            raise SpecError(
                f"the model registry of {tracking.display_uri()} cannot be read ({type(e).__name__}), so gc "
                "cannot tell which collections a registered model searches; nothing was deleted"
            ) from e
        for v in versions:
            try:
                path = mlflow.artifacts.download_artifacts(
                    artifact_uri=f"{v.source}/artifacts/{BUNDLE}/{MANIFEST}",
                    tracking_uri=tracking.resolved_uri(),
                )
                manifest = json.loads(Path(path).read_text())
            except Exception as e:  # files that cannot be read: refuse rather than break a champion
                raise SpecError(
                    f"registered model {plan.sweep.name} version {v.version}: its manifest cannot be read "
                    f"({type(e).__name__}), so gc cannot tell which collection it searches; nothing was deleted"
                ) from e
            try:  # an embedded store's model builds its index from its bundle
                embedded = keeps_files(manifest["store"]) != "server"
            except ValueError:  # a plug-in store no longer installed: its collection is kept, as a server's
                embedded = False
            if not embedded:
                out.add((manifest["store"], manifest["collection"]))
    return out


def _unneeded_cache_parts(
    data: Path, keep: set[tuple[str, str]], cutoff: float, links: list[Path]
) -> list[tuple[Path, int]]:
    """Embedding-cache parts none of whose texts a kept chunkset or QA set holds (the links met: `links`)."""
    root = data / "embedding_cache"
    folders, met = subfolders(root, data)
    links += met
    if not folders:
        return []
    needed: set[str] = set()
    for stage, fp in keep:
        if stage in ("chunksets", "qa_set"):
            ref = ArtifactRef(data, stage, fp)
            if ref.exists():
                column = "index_text" if stage == "chunksets" else "question"
                needed |= set(map(text_hash, read_parquet(ref.path(), columns=[column])[column].to_list()))
    parts = []
    for folder in folders:
        found, met = listed_files(folder, data)
        parts += found
        links += met
    out = []
    for part in parts:
        st = part.stat()  # once: a request on object storage
        if st.st_mtime > cutoff:
            continue
        hashes = read_parquet(part, columns=["text_hash"])["text_hash"].to_list()
        if needed.isdisjoint(hashes):
            out.append((part, st.st_size))
    return out
