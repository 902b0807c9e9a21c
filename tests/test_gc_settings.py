"""`rag-sweep gc`'s settings, before any work (tests/test_gc.py runs it on sweeps)."""

from __future__ import annotations

import pytest

from tests.conftest import cli


def test_older_than_reads_units_and_a_bad_value_is_one_line_before_any_work(slice_sweep, tmp_path):
    from rag_assets.orchestration.gc import parse_age
    from rag_core.planning.spec import SpecError

    assert [parse_age(t) for t in ("30d", "12h", "45m", "90s", "0", "1.5d")] == [
        30 * 86400,
        12 * 3600,
        45 * 60,
        90,
        0,
        1.5 * 86400,
    ]
    with pytest.raises(SpecError, match=r"--older-than 'soon': expected a number and a unit"):
        parse_age("soon")
    data = tmp_path / "data"
    r = cli("gc", slice_sweep, "--data-dir", data, "--older-than", "soon")
    assert r.returncode == 2 and r.stderr.startswith("error: --older-than 'soon'") and not data.exists()
