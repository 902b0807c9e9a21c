"""The Dagster versions the project supports: pyproject.toml states a range, constraints/dagster-lowest.txt
pins its floor, and scripts/test.sh runs this file (with tests/test_dagster_private.py and the definitions'
load) on an environment of those pins too (scripts/lowest_dagster.sh): a toy sweep through the CLI, end to
end, on whichever Dagster runs the tests."""

from __future__ import annotations

import tomllib
from importlib.metadata import version

import polars as pl
import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from tests.conftest import ROOT, cli, write_sweep

LOWEST = ROOT / "constraints" / "dagster-lowest.txt"


def _requirements() -> dict[str, Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    listed = project["dependencies"] + [
        r for extra in project["optional-dependencies"].values() for r in extra
    ]
    return {(req := Requirement(r)).name: req for r in listed if not r.startswith("rag-sweep")}


def _pins() -> dict[str, Version]:
    lines = [line.strip() for line in LOWEST.read_text().splitlines()]
    return {
        name: Version(v)
        for name, v in (line.split("==") for line in lines if line and not line.startswith("#"))
    }


def _floor(req: Requirement) -> Version:
    (low,) = [Version(s.version) for s in req.specifier if s.operator == ">="]
    return low


def test_the_lowest_pins_are_the_floor_of_each_dagster_requirement():
    reqs, pins = _requirements(), _pins()
    dagster = {name for name in reqs if name.startswith("dagster")}
    assert dagster == set(pins), f"{LOWEST.name} pins {sorted(pins)}, pyproject.toml has {sorted(dagster)}"
    for name in sorted(dagster):
        req, pin = reqs[name], pins[name]
        # the floor itself: nothing older is claimed, nothing newer is what is checked
        assert pin == _floor(req), f"{name}=={pin}: pyproject.toml's floor is {req}"
        assert req.specifier.contains(pin)
        # at least two minors: the floor's and the one after it
        assert req.specifier.contains(Version(f"{pin.major}.{pin.minor + 1}.0")), f"{req}: one minor only"
    # Dagster's libraries are numbered 0.(minor+16): the family is one release
    core = pins["dagster"]
    assert all(p.release[1:] == (core.minor + 16, core.micro) for n, p in pins.items() if p.major == 0)
    assert [n for n, p in pins.items() if p.major == 1 and p != core] == []


def test_the_installed_dagster_is_in_the_supported_range():
    reqs = _requirements()
    for name in ("dagster", "dagster-webserver", "dagster-postgres", "dagster-dg-cli"):
        assert reqs[name].specifier.contains(version(name)), f"{name} {version(name)} is not {reqs[name]}"


@pytest.mark.slow
def test_a_toy_sweep_runs_end_to_end_through_the_cli(small_slice, tmp_path):
    spec = write_sweep(
        tmp_path / "toy.yaml",
        small_slice,
        name="toy",
        chunking={"method": "recursive", "chunk_size": 384, "chunk_overlap": 48},
        retrieval={"mode": "hybrid", "top_k": 3},
    )
    board = tmp_path / "board.csv"
    r = cli("run", spec, "--data-dir", tmp_path / "data", "--output", board)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = pl.read_csv(board)
    assert rows.height == 1 and rows["recall_at_k"][0] > 0
    again = cli("run", spec, "--data-dir", tmp_path / "data", "--output", board)  # nothing left to do
    assert again.returncode == 0, again.stderr[-3000:]
    assert pl.read_csv(board).equals(rows)
