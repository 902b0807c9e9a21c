"""What a shipped model holds: an evaluated config's settings, the rows and vectors of its index (the
chunkset and embeddings it was evaluated on, each with its sha256), and the figures it was chosen on (the
selection score with its interval, the holdout's when the sweep holds questions out, cost per 1k queries,
p95 latency, the sweep and the leaderboard it came from). `collect` reads them from a data dir; `save`
writes the MLflow pyfunc model (resources/shipping/pipeline.py) to a folder."""

from __future__ import annotations

import json
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import polars as pl

from rag_core.common.local_models import model_version
from rag_core.planning.extension_points import config_plugin_names, config_plugins
from rag_core.planning.plan import Plan
from resources.artifacts import ArtifactRef, latest_fingerprint
from resources.shipping import ExportWarning
from resources.shipping.pipeline import (
    BUNDLE,
    INDEX_BUILD,
    MANIFEST,
    canonical_sha256,
    file_sha256,
    folder_files,
    folder_fingerprint,
    manifest_parts,
)

# the board's figures a model carries as its metadata (those present: holdout ones only after a confirmation)
FIGURES = (
    "rank",
    "tier",
    "overall_score",
    "overall_ci_low",
    "overall_ci_high",
    "overall_ci_withheld",  # why no interval is given (too few questions, no spread): said, not a figure
    "holdout_overall_score",
    "holdout_ci_low",
    "holdout_ci_high",
    "holdout_ci_withheld",
    "n_queries",
    "retrieval_p95_ms",
    "generation_p95_ms",
)
REQUIREMENTS = ("mlflow", "polars", "pyarrow", "pandas", "litellm", "lancedb", "rag-sweep")
CODE = Path(__file__).with_name("model_code.py")  # the model's code: no pickle in the folder
# the model's input example: records (a DataFrame example makes MLflow trip a pandas deprecation warning)
EXAMPLE = [{"question": "What does the corpus say about ...?"}]


class ExportError(ValueError):
    """The config cannot be shipped: unknown, never evaluated, or no recommendation to ship."""


@dataclass
class Bundle:
    config_key: str
    label: str
    tables: dict[str, pl.DataFrame]  # file name -> rows (chunks, embeddings, corpus for parent expansion)
    manifest: dict  # pipeline.json: the config, the index's identity (content hashes added by `write`)
    metadata: dict  # the MLflow model's metadata: identity and figures
    # an approximate index's evaluated build (its folder in the store, its alias record): shipped as files,
    # since a rebuild is another random draw of its training (it searched other chunks on 10-15 of 70 questions)
    index_build: tuple[Path, dict] | None = None


def config_key_of(plan: Plan, wanted: str | None, recommended: str | None) -> str:
    """The config to ship: `wanted` (a key or a label), else the leaderboard's recommendation."""
    if wanted is None:
        if not recommended:
            raise ExportError(
                f"sweep {plan.sweep.name}: its leaderboard recommends no config (none meets the decision's "
                "limits): pass --config KEY to ship one"
            )
        return recommended
    if wanted in plan.config_keys:
        return wanted
    by_label = {label: key for key, label in plan.labels.items()}
    if wanted in by_label:
        return by_label[wanted]
    known = ", ".join(sorted(by_label)[:12])
    raise ExportError(f"sweep {plan.sweep.name} has no config {wanted!r} (a key or a label: {known} ...)")


def _expected(plan: Plan, instance: dg.DagsterInstance) -> dict:
    """(stage, key) -> the fingerprint each partition has for the input snapshots as last materialized."""
    inputs = {
        s: latest_fingerprint(instance, dg.AssetKey([plan.prefix, s]), None) for s in ("corpus", "qa_set")
    }
    if None in inputs.values():
        raise ExportError(f"sweep {plan.sweep.name} was never run on this data dir: run it first")
    return {**plan.fingerprints(inputs), **{(s, None): fp for s, fp in inputs.items()}}


def collect(
    plan: Plan, data: Path, instance: dg.DagsterInstance, board: pl.DataFrame | None, decision: dict, key: str
) -> Bundle:
    """The bundle of config `key`, evaluated in `data` for the inputs as last snapshotted; `board` and
    `decision`: the sweep's latest leaderboard (its figures; None when it was never ranked)."""
    config = plan.config(key)
    label = plan.labels.get(key, key)
    expected = _expected(plan, instance)
    row = board.filter(pl.col("config_key") == key).to_dicts() if board is not None else []
    ref = {
        stage: ArtifactRef(data, stage, expected[(stage, part)], part)
        for stage in ("chunksets", "embeddings", "vector_index", "evaluations")
        for part in [plan.key_of(config, stage)]
    }
    if row:  # the evaluation the board ranked (a halving rung's saw a subset of the questions) ...
        ranked = row[0]["fingerprint"]
        rung = plan.fingerprints(
            {s: expected[(s, None)] for s in ("corpus", "qa_set")}, rung=int(row[0]["n_queries"])
        ).get(("evaluations", ref["evaluations"].partition))
        if ranked not in (ref["evaluations"].fp, rung):  # ... of this config as it is here, or none
            raise ExportError(
                f"config {label} ({key}): the leaderboard ranked an evaluation of other settings than this "
                "environment gives it (another LLM endpoint, model or store: `rag-sweep plan` shows its "
                "steps to run), so its figures are not this config's: run the sweep here first"
            )
        ref["evaluations"] = ArtifactRef(data, "evaluations", ranked, ref["evaluations"].partition)
    if not ref["evaluations"].intact():
        raise ExportError(
            f"config {label} ({key}) of sweep {plan.sweep.name} was never evaluated on this data dir's inputs: "
            "run the sweep (or its search) first"
        )
    for stage in ("chunksets", "embeddings", "vector_index"):
        if not ref[stage].intact():
            raise ExportError(
                f"{stage}[{ref[stage].partition}] of config {label} is missing or damaged: run the sweep again"
            )
    tables = {
        "chunks.parquet": ref["chunksets"].read(),
        "embeddings.parquet": ref["embeddings"].read().select("chunk_id", "vector"),
    }
    if config.generation.context_expand == "parent":  # answers read the parent documents
        tables["corpus.parquet"] = ArtifactRef(data, "corpus", expected[("corpus", None)]).read()
    index = ref["vector_index"].read()
    figures = {k: row[0][k] for k in FIGURES if row and row[0].get(k) is not None}
    if row:
        figures["cost_per_1k_queries_usd"] = row[0]["cost_usd"] / max(row[0]["n_queries"], 1) * 1000
        figures["p95_latency_ms"] = row[0]["retrieval_p95_ms"] + row[0]["generation_p95_ms"]
    if not row:
        warnings.warn(
            f"config {label} ({key}) is not on the latest leaderboard of sweep {plan.sweep.name}: the model "
            "carries no rank, score interval or holdout figure",
            ExportWarning,
            stacklevel=2,
        )
    holdout = decision.get("holdout") or {}
    if holdout.get("status") == "failed":  # its scores measure an outage: none is a figure of the config
        figures = {k: v for k, v in figures.items() if not k.startswith("holdout_")}
    # the holdout's verdict is about the recommended config: another config carries its own figures only
    verdict = (
        holdout.get("verdict") if holdout.get("recommended", decision.get("recommended")) == key else None
    )
    identity = {
        "sweep": plan.sweep.name,
        "config_key": key,
        "label": label,
        "evaluation_fingerprint": ref["evaluations"].fp,
        "vector_index_fingerprint": ref["vector_index"].fp,
        "store": str(index["store"][0]),
        "collection": str(index["collection"][0]),
        "count": int(index["count"][0]),
        "embedder_version": model_version(config.embedding.model),
    }
    manifest = manifest_of(identity, config)
    build = _evaluated_build(data, config, identity) if config.index.ann.approximate else None
    metadata = {
        **identity,
        "leaderboard_evaluated_at": decision.get("evaluated_at"),
        "recommended": decision.get("recommended") == key,
        "on_leaderboard": bool(row),
        "holdout_verdict": verdict,
        "settings": config.flat_params(),
        "figures": figures,
    }
    return Bundle(key, label, tables, manifest, metadata, build)


def _evaluated_build(data: Path, config, identity: dict) -> tuple[Path, dict] | None:
    """The evaluated build of an approximate index on an embedded store, to ship as it is; None on a server
    store (the model searches the evaluated collection itself). A store that cannot hand its build over is
    refused: a rebuilt approximate index is not the one that was measured."""
    from rag_core.components.stores import keeps_files
    from resources.vector_stores import VectorStores

    if keeps_files(identity["store"]) == "server":
        return None
    store = VectorStores(data_dir=str(data)).get(identity["store"])
    build = store.shipped_build(identity["collection"]) if hasattr(store, "shipped_build") else None
    if build is None:
        raise ExportError(
            f"config {identity['label']}: its approximate index ({config.index.ann.key}) on {identity['store']} "
            "cannot be shipped as it was evaluated (its build is not one local folder): a rebuild would be "
            "another draw of its training; use a local data dir, or an exact index"
        )
    return build


def manifest_of(identity: dict, config) -> dict:
    """pipeline.json but its files' hashes: the model's identity, its config, and the plug-ins it runs
    with (their packages, which the model installs, and the names they give: a model loaded where one is
    missing refuses, naming the package)."""
    manifest = {**identity, "config": config.model_dump(mode="json")}
    if plugins := config_plugins(config):
        manifest["plugins"] = plugins
        manifest["plugin_components"] = config_plugin_names(config)
    return manifest


def write(bundle: Bundle, folder: Path) -> Path:
    """The bundle's files and pipeline.json (with each file's sha256) in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    hashes = {}
    for name, frame in bundle.tables.items():
        frame.write_parquet(folder / name)
        hashes[name] = file_sha256(folder / name)
    manifest = dict(bundle.manifest)
    if bundle.index_build is not None:  # the evaluated build's files, each hashed like the tables
        import shutil

        source, record = bundle.index_build
        shipped = folder / INDEX_BUILD / source.name
        shutil.copytree(source, shipped)
        for path in sorted(p for p in shipped.rglob("*") if p.is_file()):
            hashes[path.relative_to(folder).as_posix()] = file_sha256(path)
        manifest["index_build"] = {"folder": shipped.relative_to(folder).as_posix(), "record": record}
    manifest["content_sha256"] = hashes
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=1, default=str))
    return folder


def _signature():
    """The reply's columns (resources/shipping/pipeline.py, OUTPUT). No input schema: MLflow enforces one before
    `predict` sees the rows, and a `question: string` column rejects a whole batch whose column pandas types
    as numbers or booleans, and `{"dataframe_records": []}` (a frame without columns); served, it casts a
    null to the text "None". `predict` checks each row itself: a row that is not a question is its error."""
    from mlflow.models import ModelSignature
    from mlflow.types import ColSpec, Schema
    from mlflow.types.schema import Array

    texts = [ColSpec("string", name, required=False) for name in ("question", "answer", "error")]
    lists = [ColSpec(Array("string"), name) for name in ("chunk_ids", "doc_ids", "titles", "texts")]
    return ModelSignature(outputs=Schema(texts + lists))


def requirements(plugins: list[str] = (), extras: list[str] = ()) -> list[str]:
    """The model's pip requirements, each pinned to the version installed here (what it was built with),
    rag-sweep with the extras its config's components need, and the plug-in packages they come from
    (`package==version`)."""
    from importlib.metadata import version

    with_extras = {"rag-sweep": f"rag-sweep[{','.join(extras)}]"} if extras else {}
    return [f"{with_extras.get(name, name)}=={version(name)}" for name in REQUIREMENTS] + list(plugins)


def model_extras(manifest: dict) -> list[str]:
    """The rag-sweep extras the shipped config's components need (its store, reranker, BM25 analyzer)."""
    from rag_core.common.extras import needed
    from rag_core.planning.spec import RagConfig

    return sorted(needed([RagConfig.model_validate(manifest["config"])], None, {}))


def environment(plugins: list[str] = (), extras: list[str] = ()) -> dict:
    """The model's environment as MLflow records it (conda.yaml, requirements.txt, python_env.yaml): this
    Python and the pinned requirements. Given whole, so that MLflow neither looks up a pip version (a uv
    environment has none: it warns) nor copies the uv project of the working directory into the model."""
    import platform

    return {
        "name": "rag-model",
        "channels": ["conda-forge"],
        "dependencies": [
            f"python={platform.python_version()}",
            "pip",
            {"pip": requirements(plugins, extras)},
        ],
    }


def save(bundle: Bundle, out: Path) -> Path:
    """The model as a folder `out` (MLmodel, the bundle, the code file `model_code.py` and no pickle):
    `mlflow.pyfunc.load_model(out)` loads it."""
    import mlflow.pyfunc

    with tempfile.TemporaryDirectory() as tmp:
        mlflow.pyfunc.save_model(
            str(out),
            python_model=str(CODE),
            artifacts={BUNDLE: str(write(bundle, Path(tmp) / BUNDLE))},
            metadata=json.loads(json.dumps(bundle.metadata, default=str)),
            signature=_signature(),
            input_example=EXAMPLE,
            conda_env=environment(bundle.manifest.get("plugins", []), model_extras(bundle.manifest)),
            uv_project_path=tmp,  # no uv project: not the working directory's copied into the model
        )
    return out


def fingerprints(out: Path) -> dict[str, str]:
    """What a saved model folder is, recorded outside it (a registered version's tags; what `rag-sweep
    export` prints): `model_fingerprint` (every file of the folder), `model_files` (each file's sha256),
    `bundle_fingerprint` (pipeline.json's canonical sha256: the config's settings and prompts, every
    bundled file's hash) and `bundle_parts` (each part's, so that a changed one can be named)."""
    files = folder_files(out)
    manifest = json.loads((out / "artifacts" / BUNDLE / MANIFEST).read_text())
    return {
        "model_fingerprint": folder_fingerprint(files),
        "model_files": json.dumps(files, sort_keys=True),
        "bundle_fingerprint": canonical_sha256(manifest),
        "bundle_parts": json.dumps(manifest_parts(manifest), sort_keys=True),
    }
