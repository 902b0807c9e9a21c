"""Which parts import which: a deployment (its definitions, sensors and fleet workers) never
imports the CLI's driver (rag_sweep/runner/) or its printing, and what both need stays under rag_assets/orchestration/."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import tomllib

import pytest

from tests.conftest import ROOT

DEPLOYMENT = (
    "rag_sweep.definitions",
    "sensors.search",
    "sensors.holdout",
    "sensors.prompt_optimization",
    "sensors.schedules",
    "rag_sweep.fleet.step_jobs",
    "rag_sweep.fleet.celery_app",
)

LOADED = """
import importlib, json, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
print(json.dumps(sorted(sys.modules)))
"""


def _loaded(*modules: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", LOADED, *modules], capture_output=True, text=True, cwd=ROOT, check=True
    )
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.mark.extra("fleet")
def test_a_deployment_never_imports_the_clis_driver():
    loaded = _loaded(*DEPLOYMENT)
    cli = sorted(
        m for m in loaded if m.startswith(("rag_sweep.runner", "rag_sweep.cli", "rag_sweep.printing"))
    )
    assert cli == [], cli


def test_the_plan_and_the_leaderboards_files_load_without_dagster():
    """What an unchanged rerun reads (rag_sweep/runner/up_to_date.py) before it knows it has nothing to do."""
    loaded = _loaded(
        "rag_assets.orchestration.plans",
        "rag_assets.board_files",
        "rag_sweep.runner.up_to_date",
        "rag_sweep.cli",
    )
    assert not {m for m in loaded if m.split(".")[0] in ("dagster", "mlflow", "lancedb")}


VALIDATED = """
import json, sys
from rag_sweep.cli import main
assert main(["validate", sys.argv[1]]) == 0
print(json.dumps(sorted(sys.modules)))
"""


def test_validate_loads_no_dagster_mlflow_or_litellm():
    """`rag-sweep validate` checks a sweep and its data before any work: it pays none of the orchestration's,
    the tracking's or the LLM client's imports (`benchmarks/against_revision.py REV --validate`)."""
    example = str(ROOT / "examples" / "sweeps" / "example.yaml")
    done = subprocess.run(
        [sys.executable, "-c", VALIDATED, example], capture_output=True, text=True, cwd=ROOT, check=True
    )
    loaded = set(json.loads(done.stdout.strip().splitlines()[-1]))
    assert "rag_sweep.runner.inputs_check" in loaded
    assert not {m for m in loaded if m.split(".")[0] in ("dagster", "mlflow", "lancedb", "litellm")}


def _runtime_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Every import a module can run, in functions too; not those under `if TYPE_CHECKING:` (never run)."""
    found = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def import_graph() -> dict[str, set[str]]:
    """module -> the product's modules it imports (the wheel's packages; `from a import b` names module a.b
    when there is one, else a)."""
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"]["targets"]
    files = {}
    for package in packages["wheel"]["packages"]:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {}
    for module, path in files.items():
        here = module if path.name == "__init__.py" else module.rpartition(".")[0]
        graph[module] = set()
        for node in _runtime_imports(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                base = node.module or ""
                if node.level:
                    base = ".".join(here.split(".")[: len(here.split(".")) - node.level + 1] + [base]).strip(
                        "."
                    )
                names = [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names]
            for name in names:
                while name and name not in files:
                    name = name.rpartition(".")[0]
                if name and name != module:
                    graph[module].add(name)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The graph's strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while (w := stack.pop()) != v:
                component.append(w)
                on_stack.discard(w)
            on_stack.discard(v)
            if component:
                found.append(sorted([v, *component]))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def test_circles_are_found():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circles():
    """No module of the product imports, even inside a function, a module that imports it back."""
    graph = import_graph()
    assert "rag_sweep.runner.sweep" in graph and "rag_sweep.commands.align_judge" in graph
    found = circles(graph)
    assert found == [], "import circles: " + "; ".join(" <-> ".join(c) for c in found)


# The stack, lowest first: a package imports only the ones below it (rag_core: pure domain logic; resources:
# what talks to the outside, the Dagster and MLflow shims included; rag_assets: the stages' assets and what
# decides what to run; sensors: the drivers; rag_sweep: the definitions, the CLI and the fleet).
STACK = ("rag_core", "resources", "rag_assets", "sensors", "rag_sweep")


def arrows_up(graph: dict[str, set[str]], stack: tuple[str, ...] = STACK) -> list[tuple[str, str]]:
    """Every import from a package to one above it in `stack`, as (module, imported module)."""
    floor = {package: i for i, package in enumerate(stack)}
    return sorted(
        (module, name)
        for module, names in graph.items()
        for name in names
        if floor[module.split(".")[0]] < floor[name.split(".")[0]]
    )


def test_arrows_up_are_found():
    graph = {"rag_core.a": {"resources.b"}, "resources.b": {"rag_core.a"}, "rag_sweep.c": {"rag_core.a"}}
    assert arrows_up(graph) == [("rag_core.a", "resources.b")]


def test_the_packages_are_a_stack():
    """No package imports one above it, even inside a function: with the module circles test, no circle
    between packages either. A new package takes its floor in STACK."""
    graph = import_graph()
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"]["targets"]
    assert set(packages["wheel"]["packages"]) == set(STACK)
    found = arrows_up(graph)
    assert found == [], "imports up the stack: " + "; ".join(f"{m} -> {n}" for m, n in found)
