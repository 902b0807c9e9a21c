"""The deployment's own files and processes, without a server: the image holds every package the wheel
names, the daemon's loops are short and a bad tick is one line, the deployment's runs execute in their own
process unless the fleet is configured."""

import os
import re
import subprocess
import sys
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


def test_the_compose_daemon_is_the_one_with_short_loops():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert compose["services"]["daemon"]["command"][0] == "rag-sweep-daemon"
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["rag-sweep-daemon"] == "rag_sweep.daemon:main"


def _daemon(code: str, tick: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "RAG_DAEMON_TICK_S"}
    if tick is not None:
        env["RAG_DAEMON_TICK_S"] = tick
    return subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True)


LOOPS = """
from rag_sweep.daemon import main, shorten_loops
from resources.environment import daemon_tick_s
shorten_loops(daemon_tick_s())
from dagster._daemon import asset_daemon, controller, sensor
print(controller.DEFAULT_DAEMON_INTERVAL_SECONDS, sensor.MIN_INTERVAL_LOOP_TIME, asset_daemon.MIN_INTERVAL_LOOP_SECONDS)
"""


def test_the_daemon_loops_wait_the_tick_and_a_bad_tick_is_one_line():
    # Dagster's own waits, which the wrapper replaces: a Dagster that changed them needs a look
    from dagster._daemon import asset_daemon, controller, sensor

    assert (
        controller.DEFAULT_DAEMON_INTERVAL_SECONDS,
        sensor.MIN_INTERVAL_LOOP_TIME,
        asset_daemon.MIN_INTERVAL_LOOP_SECONDS,
    ) == (30, 5, 5)
    assert _daemon(LOOPS, None).stdout.split() == ["2.0"] * 3
    assert _daemon(LOOPS, "0.5").stdout.split() == ["0.5"] * 3
    bad = _daemon("import sys; from rag_sweep.daemon import main; sys.exit(main())", "soon")
    assert bad.returncode == 1 and "Traceback" not in bad.stderr
    assert (
        bad.stderr.strip() == "rag-sweep-daemon: $RAG_DAEMON_TICK_S='soon': expected a finite positive float"
    )


def test_a_deployment_runs_its_steps_in_the_run_process_unless_a_fleet_is_configured(monkeypatch):
    monkeypatch.delenv("RAG_EXECUTOR", raising=False)
    assert deployment_definitions("/tmp/unused").executor is dg.in_process_executor
