"""$RAG_DEVICE on a machine without a GPU: `auto` takes the CPU and says why, `cuda` is one clear error before
any work, the device is in no fingerprint, and where each vector was computed is recorded with it.
(tests/test_gpu_device.py runs the GPU's side where there is one.)"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import polars as pl
import pytest

from resources import devices
from resources.embedders import EmbeddingService
from tests.conftest import ROOT, cli

MODEL = "all-MiniLM-L6-v2"
TEXTS = ["Scott Derrickson is an American director.", "Ed Wood was an American filmmaker.", "Who?"]


@pytest.fixture(autouse=True)
def fresh(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))  # the measured rates of this test alone
    devices.resolve_device.cache_clear()
    yield
    devices.resolve_device.cache_clear()


def test_auto_takes_the_cpu_here_says_why_and_never_imports_torch_to_learn_it():
    code = (
        "import sys; from resources.devices import resolve_device; d = resolve_device('auto'); "
        "print(d.name, '|', d.why, '|', 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    name, why, imported = (p.strip() for p in out.stdout.split("|"))
    assert name == "cpu" and why.startswith("auto: ") and ("CUDA" in why or "torch" in why)
    assert imported == "False"  # the driver is asked first: a CPU machine pays nothing for `auto`
    assert devices.resolve_device("cpu") == devices.Device("cpu", "cpu", "RAG_DEVICE=cpu")


@pytest.mark.parametrize("setting", ["cuda", "cuda:1"])
def test_a_gpu_this_machine_lacks_is_one_clear_error(setting):
    with pytest.raises(devices.DeviceUnavailable) as e:
        devices.resolve_device(setting)
    said = str(e.value)
    assert said.startswith(f"$RAG_DEVICE={setting}: this machine has no such device: ")
    assert "set RAG_DEVICE=auto" in said and "\n" not in said


def test_a_bad_setting_names_the_variable(monkeypatch):
    from rag_core.planning.spec import SpecError
    from resources import build_resources
    from resources.environment import device_setting

    for good, value in (("", "auto"), ("CUDA:0", "cuda:0"), ("cpu", "cpu")):
        monkeypatch.setenv("RAG_DEVICE", good)
        assert device_setting() == value
    monkeypatch.setenv("RAG_DEVICE", "gpu")
    with pytest.raises(SpecError, match=r"\$RAG_DEVICE='gpu': expected auto, cpu, cuda or cuda:N"):
        build_resources("/tmp/unused")


def test_run_and_plan_with_cuda_where_there_is_none_stop_before_any_work(slice_sweep, tmp_path, monkeypatch):
    data = tmp_path / "data"
    monkeypatch.setenv("RAG_DEVICE", "cuda")
    for command in ("run", "plan"):
        r = cli(command, str(slice_sweep), "--data-dir", str(data))
        assert r.returncode == 2, r.stderr
        (line,) = [x for x in r.stderr.splitlines() if x.startswith("error:")]
        assert line.startswith("error: $RAG_DEVICE=cuda: this machine has no such device"), r.stderr
        assert "Traceback" not in r.stderr
        assert not any(data.glob("*/*.parquet"))  # no artifact, no snapshot: nothing was paid for


def test_the_cache_is_shared_across_devices_and_says_where_each_vector_was_computed(tmp_path, monkeypatch):
    """The device is in no key: a second service on another setting finds every vector; parts written
    before the device was recorded count as the CPU's, the only device there was."""
    cache = tmp_path / "cache"
    first = EmbeddingService(cache_dir=str(cache), device="cpu")
    vectors, stats = first.embed(MODEL, TEXTS)
    assert stats.embedded == 3 and stats.device == "cpu · onnx" and stats.embedded_on == {"cpu · onnx": 3}
    again, stats = EmbeddingService(cache_dir=str(cache), device="auto").embed(MODEL, TEXTS)
    assert stats.embedded == 0 and stats.device == "" and stats.embedded_on == {"cpu · onnx": 3}
    assert np.array_equal(vectors, again)
    (part,) = [p for p in cache.rglob("*.parquet")]
    pl.read_parquet(part).drop("embedded_on").write_parquet(part)  # as a part of an earlier version
    monkeypatch.setattr("resources.embedders._PARTS", {})
    _, stats = EmbeddingService(cache_dir=str(cache)).embed(MODEL, [*TEXTS, "a new one"])
    assert stats.embedded_on == {"cpu": 3, "cpu · onnx": 1}


def test_the_plan_estimates_with_the_rate_measured_on_this_device(tmp_path):
    from rag_core.common.local_models import model_version

    cpu = devices.resolve_device("auto")
    key = model_version(MODEL)
    assert devices.measured_rate(key, cpu) is None
    devices.record_rate(key, cpu, "cpu · onnx", 10, 500, 1.0)  # too few texts: it would time the start
    assert devices.measured_rate(key, cpu) is None
    EmbeddingService(cache_dir=str(tmp_path / "cache")).embed(MODEL, [f"text number {i}" for i in range(80)])
    measured = devices.measured_rate(key, cpu)
    assert measured["engine"] == "cpu · onnx" and measured["texts"] == 80 and measured["texts_per_second"] > 0
    chars = sum(len(f"text number {i}") for i in range(80))
    assert measured["chars_per_second"] == pytest.approx(measured["texts_per_second"] * chars / 80, rel=0.01)
