"""The deployment's own files and processes, without a server: the image holds every package the wheel
names, the deployment runs on Dagster's stock daemon and default launcher with run retries, the
deployment's runs execute in their own process unless the fleet is configured."""

import re
import tomllib
from pathlib import Path

import dagster as dg
import yaml

from rag_sweep.definitions import deployment_definitions

ROOT = Path(__file__).resolve().parents[1]


def test_the_image_copies_every_package_of_the_wheel():
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"]["targets"][
        "wheel"
    ]["packages"]
    copied = set(re.findall(r"^COPY (\S+) \1$", (ROOT / "Dockerfile").read_text(), re.M))
    assert set(packages) <= copied, f"the Dockerfile does not copy {sorted(set(packages) - copied)}"


def test_the_deployment_runs_on_dagsters_stock_daemon_and_default_launcher(tmp_path):
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert compose["services"]["daemon"]["command"][:2] == ["dagster-daemon", "run"]
    assert (
        "rag-sweep-daemon" not in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    )
    # deploy/dagster.yaml as Dagster reads it (its PostgreSQL storage left out: no server here)
    config = yaml.safe_load((ROOT / "deploy" / "dagster.yaml").read_text())
    del config["storage"]
    (tmp_path / "dagster.yaml").write_text(yaml.safe_dump(config))
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        assert type(instance.run_launcher) is dg.DefaultRunLauncher
        # a run lost around its steps (a restarted daemon, a dead worker) runs again; a step's error does not
        assert instance.run_retries_enabled and instance.run_retries_max_retries >= 1
        assert not instance.run_retries_retry_on_asset_or_op_failure


def test_a_slow_or_restarting_code_server_does_not_fail_a_launch(tmp_path):
    """A launch waits for the code server to start the run's worker longer than Dagster's 60 s
    (DAGSTER_GRPC_TIMEOUT_SECONDS in every container's environment), and a worker gets minutes to start the
    run before run monitoring fails it; a launch that cannot reach the code server (a restart, code still
    loading) puts the run back in the queue, where run monitoring makes a late worker of the earlier launch
    ignored rather than a second run. A code server the daemon starts itself gets minutes to load (a
    location that did not load failed its backfills)."""
    from tests.servers import deployment_env

    config = yaml.safe_load((ROOT / "deploy" / "dagster.yaml").read_text())
    del config["storage"]
    (tmp_path / "dagster.yaml").write_text(yaml.safe_dump(config))
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        assert instance.run_monitoring_enabled and instance.run_monitoring_start_timeout_seconds >= 600
        assert instance.code_server_process_startup_timeout >= 600
        queue = instance.get_concurrency_config().run_queue_config
    assert int(deployment_env()["DAGSTER_GRPC_TIMEOUT_SECONDS"]) >= 180
    assert queue.max_user_code_failure_retries >= 3 and queue.user_code_failure_retry_delay >= 10


def test_a_drivers_runs_are_asked_again_by_the_driver_not_by_dagsters_run_retries(tmp_path):
    from sensors.holdout import _attempt

    with dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        request = _attempt(instance, 7, "confirmation", tags={"sweep": "s"}, job_name="confirm")
    assert request.tags["dagster/max_retries"] == "0"


def test_a_deployment_runs_its_steps_in_the_run_process_unless_a_fleet_is_configured(monkeypatch):
    monkeypatch.delenv("RAG_EXECUTOR", raising=False)
    assert deployment_definitions("/tmp/unused").executor is dg.in_process_executor
