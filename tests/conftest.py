"""Shared fixtures: a small slice of the example data and a sweep over it.

The slice keeps 20 questions, their gold documents and 80 distractors, so the real embedding model
embeds a few hundred chunks instead of the whole corpus.
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("DAGSTER_DISABLE_TELEMETRY", "1")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.pop("MLFLOW_TRACKING_URI", None)
os.environ.pop("RAG_VECTOR_STORE", None)
# the tests' signing key for registered models: never the user's own (~/.config/rag-sweep/signing.key)
os.environ["RAG_SWEEP_SIGNING_KEY"] = os.path.join(__import__("tempfile").mkdtemp(), "signing.key")

import importlib.util  # noqa: E402
import re  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import polars as pl  # noqa: E402
import pytest  # noqa: E402
import yaml  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "data" / "hotpotqa_distractor_100"


def _write_slice(out: Path, questions: int, distractors: int) -> dict:
    """The example's first `questions` questions, their gold documents and `distractors` other documents."""
    qa = pl.read_parquet(EXAMPLE / "queries.parquet").head(questions)
    corpus = pl.read_parquet(EXAMPLE / "corpus.parquet")
    gold = set(qa["relevant_doc_ids"].explode().to_list())
    others = corpus.filter(~pl.col("doc_id").is_in(list(gold))).head(distractors)
    sliced = pl.concat([corpus.filter(pl.col("doc_id").is_in(list(gold))), others]).sort("doc_id")
    sliced.write_parquet(out / "corpus.parquet")
    qa.write_parquet(out / "queries.parquet")
    return {
        "dir": out,
        "corpus": out / "corpus.parquet",
        "qa": out / "queries.parquet",
        "n_docs": sliced.height,
    }


@pytest.fixture(scope="session")
def slice_data(tmp_path_factory) -> dict:
    return _write_slice(tmp_path_factory.mktemp("slice"), 20, 80)


@pytest.fixture(scope="session")
def small_slice(tmp_path_factory) -> dict:
    """8 questions, their gold documents and 12 distractors: a sweep whose point is not its scores (a
    plug-in, the judge's floor) embeds a few dozen chunks."""
    return _write_slice(tmp_path_factory.mktemp("small"), 8, 12)


# the recommendation takes the fastest config of a tied top tier (counted work first; between configs it
# cannot order, p95 within 2x counts as equally fast): two runs timed on a busy 2-core host (workers,
# object storage, another process) may still time two such configs apart
TIMED = ("recommended",)


def assert_same_board(a: pl.DataFrame, b: pl.DataFrame, skip: tuple[str, ...] = ()) -> None:
    """Two leaderboards agree on every config, rank and result; timings (and the `skip` columns) may differ."""
    import numpy as np

    a, b = a.sort("config_key"), b.sort("config_key")
    assert a["config_key"].to_list() == b["config_key"].to_list()
    differ = {}  # every column that differs, with each config's two values: the metric behind a score
    for col in a.columns:
        # measured, not computed: times (`_ms`, `_s`, seconds, latency) and memory (`_mb`, an index build's peak)
        measured = col.endswith(("_ms", "_s", "_mb")) or "latency" in col or "p50" in col or "seconds" in col
        if col in skip or measured:
            continue
        if a[col].dtype == pl.Float64:
            x, y = a[col].to_numpy(), b[col].to_numpy()
            same = np.isclose(x, y, atol=1e-12, rtol=0, equal_nan=True)
        elif a[col].dtype in (pl.String, pl.Boolean) or a[col].dtype.is_integer():
            x, y = a[col].to_list(), b[col].to_list()
            same = [u == v for u, v in zip(x, y, strict=True)]
        else:
            continue
        bad = [(a["config_key"][i], x[i], y[i]) for i, ok in enumerate(same) if not ok]
        if bad:
            differ[col] = bad
    assert not differ, "\n".join(f"{col}: {bad}" for col, bad in differ.items())


def cli(*args: str) -> subprocess.CompletedProcess:
    """`rag-sweep ARGS` as a user starts it, in a process of its own (its exit code, stdout and stderr)."""
    return subprocess.run(
        [sys.executable, "-m", "rag_sweep.cli", *map(str, args)], capture_output=True, text=True, cwd=ROOT
    )


def write_sweep(path: Path, data: dict, max_queries: int | None = None, **sections) -> Path:
    """A sweep file; without a `decision` section it holds no question out (`holdout: 0`), so a test of
    another feature sees the whole QA set (the holdout's tests ask for one). `max_queries`: the first
    questions only (`data.max_queries`)."""
    sections.setdefault("decision", {"holdout": 0})
    spec = {
        "name": sections.pop("name", "slice"),
        "data": {
            "corpus": str(data["corpus"]),
            "qa": str(data["qa"]),
            **({"max_queries": max_queries} if max_queries is not None else {}),
        },
        **sections,
    }
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


@pytest.fixture(scope="session")
def slice_sweep(slice_data, tmp_path_factory) -> Path:
    """2 chunkings x 2 retrieval modes = 4 configs on 20 questions."""
    return write_sweep(
        tmp_path_factory.mktemp("spec") / "slice.yaml",
        slice_data,
        chunking=[
            {"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
            {"method": "recursive", "chunk_size": 300, "chunk_overlap": 40},
        ],
        retrieval={"mode": ["vector", "hybrid"], "top_k": 4, "hybrid_alpha": 0.5, "fusion": "weighted"},
    )


@pytest.fixture(scope="session")
def sweep_run(slice_sweep, tmp_path_factory):
    """The slice sweep materialized once, in process, on the embedded defaults."""
    from rag_sweep.runner import run_sweep

    data_dir = tmp_path_factory.mktemp("data")
    run = run_sweep(str(slice_sweep), str(data_dir), progress=False)
    return {
        "board": run.board,
        "defs": run.defs,
        "instance": run.instance,
        "plan": run.plan,
        "data": run.data,
        "run": run,
    }


# ---- real servers (see tests/servers.py), started once per session ------------------------------

SERVER_FIXTURES = {
    "weaviate_server",
    "postgres_server",
    "mlflow_server",
    "s3_server",
    "rabbitmq_server",
    "local_llm_server",
}


def pytest_collection_modifyitems(items):
    """A test that starts a real server belongs to the `stack` tier, whatever file it is in. Files then run
    heaviest tier first (stack, slow, the rest), each file's tests in their own order: with pytest-xdist
    (`--dist loadfile`) the long files start at once and the many short ones fill in at the end, so no
    worker waits alone on a long file."""
    for item in items:
        if SERVER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.stack)
    _skip_without_extras(items)

    def tier(item) -> int:
        return 0 if item.get_closest_marker("stack") else 1 if item.get_closest_marker("slow") else 2

    file_tier: dict[Path, int] = {}
    for item in items:
        file_tier[item.path] = min(file_tier.get(item.path, 2), tier(item))
    items.sort(key=lambda item: file_tier[item.path])  # a stable sort: each file's tests keep their order


# ---- the default install's tier ----------------------------------------------------------------------------
# On an install without every extra (`bash scripts/test.sh --fast`), a test that needs a missing one is
# skipped, naming the extra and its install command, whether it says so (`@pytest.mark.extra("qdrant")`) or
# fails on it (MissingExtra, an import of one of the extra's modules, a refusal naming it). The full tier
# (scripts/test.sh, CI) sets RAG_TEST_EVERY_EXTRA=1: there a missing extra fails the test, never a skip.
EVERY_EXTRA = os.environ.get("RAG_TEST_EVERY_EXTRA") == "1"
# what the tests import beyond the components' extras (rag_core/common/extras.py)
TEST_EXTRA_MODULES = {"mkdocs": "docs", "material": "docs", "playwright": "test"}


def _extra_of_module(module: str) -> str | None:
    from rag_core.common.extras import EXTRAS

    top = module.split(".")[0]
    return next((e.name for e in EXTRAS.values() if top in e.modules), TEST_EXTRA_MODULES.get(top))


def _is_installed(extra: str) -> bool:
    from rag_core.common.extras import EXTRAS, installed

    if extra in EXTRAS:
        return installed(extra)
    modules = [m for m, e in TEST_EXTRA_MODULES.items() if e == extra]
    return all(importlib.util.find_spec(m) is not None for m in modules)


def _missing_extra(exc: BaseException | None) -> str | None:
    """The extra whose absence raised `exc` (or an exception it was raised from), if it is not installed."""
    from rag_core.common.extras import MissingExtra

    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        extra = None
        if isinstance(exc, MissingExtra):
            extra = exc.extra
        elif isinstance(exc, ModuleNotFoundError) and exc.name:
            extra = _extra_of_module(exc.name)
        elif found := re.search(r"needs the ([\w-]+) extra|No module named '([\w.]+)'", str(exc)):
            extra = found.group(1) or _extra_of_module(found.group(2))
        if extra and not _is_installed(extra):
            return extra
        exc = exc.__cause__ or exc.__context__
    return None


def _needs(extra: str) -> str:
    from rag_core.common.extras import install_hint

    return f"needs the {extra} extra, not installed here: {install_hint(extra)}"


def _skip_without_extras(items) -> None:
    """`@pytest.mark.extra(...)`: skipped where one is missing (reported at the test, naming the extra)."""
    for item in items:
        for mark in item.iter_markers("extra"):
            missing = [e for e in mark.args if not _is_installed(e)]
            if missing and not EVERY_EXTRA:
                item.add_marker(pytest.mark.skip(reason=_needs(missing[0])))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.failed and call.excinfo is not None and not EVERY_EXTRA:
        if extra := _missing_extra(call.excinfo.value):
            report.outcome = "skipped"
            report.longrepr = (str(item.path), (item.location[1] or 0) + 1, f"Skipped: {_needs(extra)}")
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector):
    """A test file that imports an extra's module at its top: skipped whole on an install without it."""
    report = yield
    if report.failed and not EVERY_EXTRA:
        found = re.search(r"No module named '([\w.]+)'", str(report.longrepr))
        extra = _extra_of_module(found.group(1)) if found else None
        if extra and not _is_installed(extra):
            report.outcome = "skipped"
            report.longrepr = (str(collector.path), 0, f"Skipped: {_needs(extra)}")
    return report


def _on_sigterm(signum, frame):
    """SIGTERM (a CI time-out, a killed job): stop the servers at once (a KeyboardInterrupt alone may be
    swallowed by code under test, e.g. Dagster's in-process execution), then interrupt pytest; a second
    SIGTERM kills."""
    from tests.servers import stop_all

    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    stop_all()
    raise KeyboardInterrupt


def pytest_configure(config):
    signal.signal(signal.SIGTERM, _on_sigterm)


STARTUP_TIMES: dict[str, float] = {}


@pytest.fixture(scope="session")
def weaviate_server():
    from tests.servers import Weaviate

    server = Weaviate.start()
    STARTUP_TIMES["weaviate"] = server.startup_s
    yield server
    server.stop()


@pytest.fixture(scope="session")
def postgres_server():
    from tests.servers import Postgres

    server = Postgres.start()
    STARTUP_TIMES["postgresql (initdb + start)"] = server.startup_s
    yield server
    server.stop()


@pytest.fixture(scope="session")
def mlflow_server(postgres_server):
    from tests.servers import Mlflow

    server = Mlflow.start(postgres_server.url(postgres_server.create_db("mlflow")))
    STARTUP_TIMES["mlflow server"] = server.startup_s
    yield server
    server.stop()


@pytest.fixture(scope="session")
def s3_server():
    from tests.servers import S3Server

    server = S3Server.start()
    STARTUP_TIMES["s3 server"] = server.startup_s
    yield server
    server.stop()


@pytest.fixture(scope="session")
def rabbitmq_server():
    from tests.servers import RabbitMQ

    server = RabbitMQ.start()
    STARTUP_TIMES["rabbitmq"] = server.startup_s
    yield server
    server.stop()


@pytest.fixture(scope="session")
def local_llm_server():
    """llama.cpp's server with the packaged Gemma 3 270M, on its defaults (2 slots of 2,048 tokens); skipped
    where the local-llm extra is not installed."""
    from tests.servers import local_llm

    server = local_llm()
    STARTUP_TIMES["llama-server"] = server.startup_s
    yield server
    server.stop()


WORKER_STARTUP_TIMES: dict[str, dict[str, float]] = {}  # pytest-xdist: each worker starts its own servers


def pytest_sessionfinish(session):
    if hasattr(session.config, "workeroutput"):  # an xdist worker: hand the times to the controller
        session.config.workeroutput["startup_times"] = dict(STARTUP_TIMES)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    times = getattr(node, "workeroutput", {}).get("startup_times")
    if times:
        WORKER_STARTUP_TIMES[node.gateway.id] = times


def pytest_terminal_summary(terminalreporter):
    by_process = dict(WORKER_STARTUP_TIMES)
    if STARTUP_TIMES:
        by_process["main"] = STARTUP_TIMES
    for who, times in sorted(by_process.items()):
        terminalreporter.write_line(
            f"server start-up ({who}): " + ", ".join(f"{k} {v:.1f} s" for k, v in times.items())
        )


@pytest.fixture(autouse=True)
def _no_dead_definitions_state():
    """Each test starts without a Dagster definitions-state storage left by an instance that is gone. An
    instance sets it while it is entered; one a schedule or sensor tick opens and never closes leaves it
    pointing at a disposed instance, and every later materialization in the process then fails ("undefined
    DagsterInstance weakref"). A test that leaves one is named."""
    yield
    try:
        from dagster._core.storage.defs_state.base import _current_storage
    except ImportError:  # another Dagster: nothing to check
        return
    storage = _current_storage.get()
    if storage is None or not getattr(storage, "_instance_weakref", None):
        return
    import gc

    gc.collect()  # an instance only the test's objects held is gone once they are collected
    if storage._instance_weakref() is None:
        _current_storage.set(None)
        import warnings

        warnings.warn(
            "this test left Dagster's definitions state pointing at a disposed instance", stacklevel=1
        )


def computing_runs(runs) -> list:
    """`runs` less the input files' observation, which the automation sensor launches at every quarter hour
    (rag_assets/inputs.py: two hashes read, nothing computed): a test whose window crosses a quarter hour
    sees one whatever it did."""
    files = {"corpus_file", "qa_file"}
    return [r for r in runs if not (r.asset_selection and {k.path[-1] for k in r.asset_selection} <= files)]
