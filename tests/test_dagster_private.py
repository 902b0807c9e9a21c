"""Dagster through its public API: the product (every .py outside tests/ and .venv, benchmarks included)
reaches `dagster._…` only through resources/dagster_private.py and assigns nothing into Dagster's modules
or objects; and each private name that module holds is still where, and what, the project relies on (a
Dagster release that moves or changes one fails here)."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import dagster as dg

from resources import dagster_private as private
from tests.conftest import ROOT

SHIM = ROOT / "resources" / "dagster_private.py"
SKIP = {".venv", "tests", ".git", "node_modules"}


def _product_files() -> list[Path]:
    return [
        p
        for p in ROOT.rglob("*.py")
        if not SKIP.intersection(p.relative_to(ROOT).parts)
        and not p.relative_to(ROOT).parts[0].startswith(".")
    ]


def test_no_private_dagster_outside_the_one_module():
    found = [
        f"{p.relative_to(ROOT)}:{n}: {line.strip()}"
        for p in _product_files()
        if p != SHIM
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if re.search(r"\bdagster\._", line)
    ]
    assert found == [], "\n".join(found)


def _dagster_names(tree: ast.Module) -> set[str]:
    """The names a module binds to Dagster's packages (dagster, dagster_celery, ...) or what it imports
    from them."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names if a.name.startswith("dagster")}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("dagster"):
            names |= {a.asname or a.name for a in node.names}
    return names


def _root(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _assignments_into_dagster(source: str) -> list[str]:
    """Each assignment into a Dagster module or object (`dagster_x.mod.name = ...`, `Class.attr = ...`)
    and each `setattr`/`monkeypatch.setattr` on anything but `self`, in a module that imports Dagster."""
    tree = ast.parse(source)
    dagster = _dagster_names(tree)
    if not dagster:
        return []
    found = []
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for target in targets:
            if isinstance(target, (ast.Attribute, ast.Subscript)) and _root(target) in dagster:
                found.append(f"{node.lineno}: {ast.unparse(node)[:80]}")
        if isinstance(node, ast.Call):
            func = node.func
            named = (
                func.id
                if isinstance(func, ast.Name)
                else func.attr
                if isinstance(func, ast.Attribute)
                else ""
            )
            if named == "setattr" and node.args and _root(node.args[0]) not in ("self", "cls"):
                found.append(f"{node.lineno}: {ast.unparse(node)[:80]}")
    return found


def test_nothing_is_assigned_into_dagster():
    found = [
        f"{p.relative_to(ROOT)}:{where}"
        for p in _product_files()
        for where in _assignments_into_dagster(p.read_text())
    ]
    assert found == [], "\n".join(found)


def test_the_assignment_check_sees_the_ways_a_patch_is_written():
    patched = """
import dagster_celery.tasks
from dagster._utils import interrupts
from dagster import DagsterInstance
dagster_celery.tasks.DagsterInstance = object
interrupts._received_interrupt = {}
DagsterInstance.get = staticmethod(lambda: None)
for module in (interrupts,):
    setattr(module, "X", 1)
"""
    assert len(_assignments_into_dagster(patched)) == 4
    assert (
        _assignments_into_dagster("import dagster as dg\nclass A:\n    def f(self):\n        self.x = 1\n")
        == []
    )


def test_the_tags_a_batch_writes_are_the_ones_dagster_reads(tmp_path):
    key = dg.AssetKey(["up", "stream"])
    assert private.input_data_version_tag(key) == "dagster/input_data_version/up/stream"
    assert private.input_event_pointer_tag(key) == "dagster/input_event_pointer/up/stream"
    assert private.CODE_VERSION_TAG == "dagster/code_version"
    assert private.DATA_VERSION_IS_USER_PROVIDED_TAG == "dagster/data_version_is_user_provided"

    @dg.asset(code_version="3")
    def versioned():
        return dg.MaterializeResult(data_version=dg.DataVersion("abc"))

    with dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        assert dg.materialize([versioned], instance=instance).success
        tags = instance.fetch_materializations(versioned.key, limit=1).records[0].asset_materialization.tags
        assert tags[private.DATA_VERSION_TAG] == "abc"
        assert tags[private.CODE_VERSION_TAG] == "3"
        assert tags[private.DATA_VERSION_IS_USER_PROVIDED_TAG] == "true"
        # and a materialization logged with these tags is read back as its data version
        instance.report_runless_asset_event(
            dg.AssetMaterialization(versioned.key, tags={private.DATA_VERSION_TAG: "def"})
        )
        record = instance.get_latest_data_version_record(versioned.key)
        assert record.asset_materialization.tags[private.DATA_VERSION_TAG] == "def"


def _params(f) -> list[str]:
    return [p for p in inspect.signature(f).parameters if p not in ("self", "cls")]


def test_the_compute_log_parts_the_cli_instance_builds_on():
    assert issubclass(private.DagsterAssetCheckFailedError, dg.DagsterError)
    assert _params(private.mirror_stream_to_file) == ["stream", "filepath"]
    assert _params(private.redirect_to_file) == ["stream", "filepath"]
    assert _params(private.fileno) == ["stream"]
    assert _params(private.ensure_file) == ["path"] and _params(private.touch_file) == ["path"]
    manager = private.LocalComputeLogManager
    assert _params(manager.__init__)[:1] == ["base_dir"] and "inst_data" in _params(manager.__init__)
    assert _params(manager.capture_logs) == ["log_key"]
    assert _params(manager.get_captured_local_path)[:2] == ["log_key", "extension"]
    assert _params(manager.complete_artifact_path) == ["log_key"]
    assert set(private.IO_TYPE_EXTENSION) == {private.ComputeIOType.STDOUT, private.ComputeIOType.STDERR}
    assert private.CapturedLogContext(["run", "step"]).log_key == ["run", "step"]


def test_the_sqlite_storages_the_cli_instance_builds_on(tmp_path):
    events, runs = private.ConsolidatedSqliteEventLogStorage, private.SqliteRunStorage
    assert _params(events.__init__)[:1] == ["base_dir"] and "inst_data" in _params(events.__init__)
    assert _params(runs.from_local)[:1] == ["base_dir"]
    for cls, methods in ((events, ("_connect", "has_table", "dispose")), (runs, ("connect", "dispose"))):
        assert all(callable(getattr(cls, m, None)) for m in methods), cls


def test_the_no_op_compute_logs_are_configured_through_this_module(tmp_path):
    overrides = {"compute_logs": {"module": "resources.dagster_private", "class": "NoOpComputeLogManager"}}
    with dg.instance_for_test(temp_dir=str(tmp_path), overrides=overrides) as instance:
        assert isinstance(instance.compute_log_manager, private.NoOpComputeLogManager)


def _private_overrides(source: str) -> list[str]:
    """In each class built on a name imported from the shim: every method with a private name (`_x`, not a
    dunder) and every `self._x` it reads without setting it or defining it itself."""
    tree = ast.parse(source)
    shimmed = {
        a.asname or a.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "resources.dagster_private"
        for a in node.names
    }
    found = []
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        if not any(_root(base) in shimmed for base in cls.bases):
            continue
        own = {f.name for f in cls.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}
        set_here = {
            t.attr
            for n in ast.walk(cls)
            if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign))
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
            if isinstance(t, ast.Attribute) and _root(t) == "self"
        }
        found += [f"{cls.name}.{m}" for m in own if m.startswith("_") and not m.startswith("__")]
        found += [
            f"{cls.name}: self.{n.attr}"
            for n in ast.walk(cls)
            if isinstance(n, ast.Attribute)
            and isinstance(n.ctx, ast.Load)
            and isinstance(n.value, ast.Name)
            and n.value.id == "self"
            and n.attr.startswith("_")
            and not n.attr.startswith("__")
            and n.attr not in own | set_here
        ]
    return found


def test_no_private_dagster_hook_is_overridden_outside_the_shim():
    found = [
        f"{p.relative_to(ROOT)}: {where}"
        for p in _product_files()
        if p != SHIM
        for where in _private_overrides(p.read_text())
    ]
    assert found == [], "\n".join(found)


def test_the_override_check_sees_a_private_hook_and_a_private_attribute():
    overriding = """
from resources.dagster_private import ConsolidatedSqliteEventLogStorage as Base
class Mine(Base):
    def _connect(self):
        return self._conn_string
    def has_table(self, name):
        self._seen = name
        return self._seen
"""
    assert sorted(_private_overrides(overriding)) == ["Mine._connect", "Mine: self._conn_string"]


def test_the_pooled_storages_keep_one_engine_and_read_dagsters_tables(tmp_path):
    home = tmp_path / "home"
    overrides = {
        "run_storage": {
            "module": "resources.dagster_private",
            "class": "PooledSqliteRunStorage",
            "config": {"base_dir": str(home / "history")},
        },
        "event_log_storage": {
            "module": "resources.dagster_private",
            "class": "PooledSqliteEventLogStorage",
            "config": {"base_dir": str(home / "history")},
        },
    }

    @dg.asset
    def one():
        return 1

    with dg.instance_for_test(temp_dir=str(tmp_path), overrides=overrides) as instance:
        assert isinstance(instance.event_log_storage, private.PooledSqliteEventLogStorage)
        assert dg.materialize([one], instance=instance).success
        engine = instance.event_log_storage._engine()  # the project's own method: one engine kept
        assert instance.event_log_storage._engine() is engine
        assert instance.fetch_materializations(one.key, limit=1).records
        private.release_connections(instance)
