"""The docs' reference is generated from the code (scripts/docs/gen_reference.py): every setting, flag and
variable has a description, the code reads no variable it does not declare, and the committed pages are what
the generator writes now."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REGENERATE = ".venv/bin/python scripts/docs/gen_reference.py"


@pytest.fixture(scope="module")
def gen():
    spec = importlib.util.spec_from_file_location("gen_reference", ROOT / "scripts/docs/gen_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_setting_flag_and_variable_has_a_description(gen):
    missing = gen.missing_descriptions()
    assert not missing, "no description:\n" + "\n".join(missing)


def test_the_code_reads_no_variable_the_environment_module_does_not_declare(gen):
    undeclared = gen.undeclared_variables()
    assert not undeclared, "declare these in resources/environment.py VARIABLES:\n" + "\n".join(
        f"{name} (read in {', '.join(sorted(files))})" for name, files in sorted(undeclared.items())
    )


def test_the_committed_reference_pages_are_what_the_generator_writes(gen):
    stale = [path for path, text in gen.pages().items() if (ROOT / path).read_text() != text]
    assert not stale, f"stale reference pages {stale}: run {REGENERATE}"


def test_the_reference_covers_every_setting_flag_variable_metric_and_extension_point(gen):
    from rag_core.metrics.registry import METRICS
    from rag_core.planning.extension_points import EXTENSION_POINTS
    from rag_core.planning.spec import RerankConfig, SearchBudget
    from resources.environment import VARIABLES

    pages = gen.pages()
    settings, cli = pages["docs/reference/settings.md"], pages["docs/reference/cli.md"]
    for field in RerankConfig.model_fields:
        assert f"| `rerank.{field}` |" in settings
    for field in SearchBudget.model_fields:
        assert f"| `search.budget.{field}` |" in settings
    assert (
        "| `qa_generation.passage_chars` |" in settings
        and "| `optimize.budget.max_metric_calls` |" in settings
    )
    for command in ("run", "validate", "plan", "gate", "gc", "serve", "export", "verify-model", "components"):
        assert f"\n## rag-sweep {command}\n" in cli
    assert "| `--older-than` `" in cli and "| `-p`, `--port` `PORT` |" in cli
    environment = pages["docs/reference/environment.md"]
    assert all(f"| `{v.name}` |" in environment for v in VARIABLES)
    metrics = pages["docs/reference/metrics-registry.md"]
    assert all(f"| `{m}` |" in metrics for m in METRICS.names() if m not in METRICS.plugin_names())
    points = pages["docs/reference/extension-points.md"]
    assert all(f"`{p.registry.group}`" in points for p in EXTENSION_POINTS)


def test_a_missing_description_or_an_undeclared_variable_is_named(gen, monkeypatch):
    from rag_core.planning.spec import ChunkingConfig
    from resources import environment

    monkeypatch.setattr(ChunkingConfig.model_fields["unit"], "description", None)
    monkeypatch.setattr(
        environment,
        "VARIABLES",
        tuple(
            environment.Variable(v.name, v.default, "", v.topic) if v.name == "RAG_BATCH_SIZE" else v
            for v in environment.VARIABLES
            if v.name != "RAG_DEVICE"
        ),
    )
    missing = gen.missing_descriptions()
    assert "setting chunking.unit" in missing and "variable RAG_BATCH_SIZE" in missing
    assert "resources/environment.py" in gen.undeclared_variables()["RAG_DEVICE"]
