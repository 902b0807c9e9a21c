"""What was made before runner/, orchestration/, fleet/ and shipping/ moved under rag_sweep/, and before
shipping/ and orchestration/ moved down the stack, still loads (rag_sweep/legacy_modules.py): a registered
model whose code imports `shipping.pipeline` or `rag_sweep.shipping.pipeline`, an instance whose dagster.yaml
names `runner.instance_storage`, a plug-in importing `orchestration.plans` or `rag_sweep.orchestration.plans`. Each runs in a
fresh Python, as a user's or Dagster's process would: the aliases come from the installed .pth file.
(move_layout: keep -- this file names the old paths on purpose.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rag_sweep.runner.instance import local_instance, storage_config
from resources.shipping import bundle
from resources.shipping.registry import register_champion
from tests.small_model import small_bundle
from tests.test_model_integrity import QUESTION, Tracking

# shipping/model_code.py as the models registered before the move hold it (their signed tags cover it)
OLD_MODEL_CODE = """from mlflow.models import set_model

from shipping.pipeline import RagPipeline

set_model(RagPipeline())
"""


def _python(code: str, cwd: Path, **env: str) -> str:
    import os

    done = subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, env={**os.environ, **env}
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


def test_the_old_module_paths_are_the_new_modules(tmp_path):
    same = _python(
        "import json, runner.instance_storage, orchestration.plans, fleet, shipping.bundle\n"
        "import rag_sweep.orchestration.plans, rag_sweep.shipping.bundle, rag_sweep.dagster_private\n"
        "from runner import load_plan\n"
        "from rag_sweep.shipping.pipeline import RagPipeline\n"
        "import rag_sweep.runner.instance_storage as r, rag_assets.orchestration.plans as o\n"
        "import rag_sweep.fleet as f, resources.shipping.bundle as s, resources.shipping.pipeline as p\n"
        "import resources.dagster_private as d\n"
        "print(json.dumps([runner.instance_storage is r, orchestration.plans is o, fleet is f,\n"
        "    shipping.bundle is s, load_plan is o.load_plan, rag_sweep.orchestration.plans is o,\n"
        "    rag_sweep.shipping.bundle is s, RagPipeline is p.RagPipeline, rag_sweep.dagster_private is d]))",
        tmp_path,
    )
    assert json.loads(same) == [True] * 9


def test_a_package_of_ones_own_with_an_old_name_comes_first(tmp_path):
    (tmp_path / "own" / "runner").mkdir(parents=True)
    (tmp_path / "own" / "runner" / "__init__.py").write_text("MINE = True\n")
    (tmp_path / "own" / "runner" / "sweep.py").write_text("MINE = True\n")
    found = _python(
        "import runner, runner.sweep; print(runner.MINE and runner.sweep.MINE)",
        tmp_path,
        PYTHONPATH=str(tmp_path / "own"),
    )
    assert found == "True"


def _old_yaml(home: Path) -> str:
    """An instance's dagster.yaml as `rag-sweep run` wrote it before the move (its storages were then
    runner/instance_storage.py's; they are the Dagster shim's now)."""
    return (
        storage_config(home)
        .replace("module: rag_sweep.runner.", "module: runner.")
        .replace("module: resources.dagster_private", "module: runner.instance_storage")
    )


def test_an_instance_naming_the_old_modules_opens_in_dagster_and_is_migrated(tmp_path):
    home = tmp_path / "data" / "dagster_home"
    home.mkdir(parents=True)
    (home / "dagster.yaml").write_text(_old_yaml(home))
    assert "module: runner.instance_storage" in (home / "dagster.yaml").read_text()
    # as `dagster dev` or the daemon opens it: Dagster imports the modules the file names
    kinds = _python(
        "import json, dagster as dg\n"
        f"i = dg.DagsterInstance.from_config({str(home)!r})\n"
        "print(json.dumps([type(i.run_storage).__module__, type(i.compute_log_manager).__name__]))",
        tmp_path,
    )
    assert json.loads(kinds) == ["resources.dagster_private", "TailedComputeLogManager"]
    # the CLI rewrites the file to the new paths, whatever part of it names them
    (home / "dagster.yaml").write_text(
        "telemetry:\n  enabled: false\n"
        "compute_logs:\n  module: runner.compute_logs\n  class: TailedComputeLogManager\n"
        f"  config:\n    base_dir: {json.dumps(str(home / 'storage'))}\n"
    )
    local_instance(tmp_path / "data").dispose()
    modules = [
        v["module"] for v in yaml.safe_load((home / "dagster.yaml").read_text()).values() if "module" in v
    ]
    assert modules == ["rag_sweep.runner.compute_logs"]


@pytest.mark.parametrize("package", ["shipping", "rag_sweep.shipping"])
def test_a_model_registered_before_the_move_loads(tmp_path, monkeypatch, package):
    """Registered with the old model code (its tags signed over it), then loaded by plain MLflow in a new
    Python that has not imported the project."""
    old_code = tmp_path / "old" / "model_code.py"
    old_code.parent.mkdir()
    old_code.write_text(OLD_MODEL_CODE.replace("from shipping.", f"from {package}."))
    monkeypatch.setattr(bundle, "CODE", old_code)
    tracking = Tracking(f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path / "mlartifacts")
    register_champion(tracking, small_bundle(tmp_path))
    client = tracking.client()
    folder = Path(client.get_model_version_download_uri("serve", "1"))
    assert f"from {package}.pipeline import RagPipeline" in (folder / "model_code.py").read_text()
    answer = _python(
        "import sys, mlflow.pyfunc, pandas as pd\n"
        "model = mlflow.pyfunc.load_model('models:/serve@champion')\n"
        f"answer = model.predict(pd.DataFrame({{'question': [{QUESTION!r}]}}))['answer'][0]\n"
        "assert 'resources.shipping.pipeline' in sys.modules\n"
        "print(type(answer).__name__, len(answer) > 0)",
        tmp_path,
        MLFLOW_TRACKING_URI=tracking.uri,
    )
    assert answer == "str True"
