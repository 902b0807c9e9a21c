"""`rag-sweep`: run a sweep end to end through the same Dagster assets, in process, no server needed.

    rag-sweep run SPEC [--data-dir DIR] [--output leaderboard.csv|.parquet] [--force]
    rag-sweep validate SPEC

Stages run in order, one partition at a time, into a persistent Dagster instance under
`<data-dir>/dagster_home` (so `dagster dev` can show them). A partition whose artifact already exists for
the same content fingerprint is skipped, so re-running an unchanged spec recomputes nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("DAGSTER_DISABLE_TELEMETRY", "1")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

QUIET_LOGS = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


def _instance(data_dir: Path):
    import dagster as dg

    if os.environ.get("DAGSTER_HOME"):
        return dg.DagsterInstance.get()
    home = data_dir / "dagster_home"
    home.mkdir(parents=True, exist_ok=True)
    if not (home / "dagster.yaml").exists():
        (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    return dg.DagsterInstance.from_config(str(home))


def plan(sweep, artifacts, force: bool, backend: str = "lancedb") -> list[tuple[str, str | None]]:
    """(asset, partition) steps in dependency order, leaving out partitions whose artifact exists."""
    from rag_assets.lineage import Lineage

    lineage = Lineage(sweep, backend)
    steps: list[tuple[str, str | None]] = [("corpus", None), ("qa_set", None)]
    stages = [
        ("chunksets", "chunk_key", "chunksets", lineage.chunk_fp),
        ("embeddings", "embedding_key", "embeddings", lineage.embedding_fp),
        ("vector_index", "index_key", "indexes", lineage.store_fp),
        ("retrievals", "retrieval_key", "retrievals", lineage.retrieval_fp),
        ("rerankings", "rerank_key", "rerankings", lineage.rerank_fp),
        ("answers", "config_key", "answers", lineage.answers_fp),
        # evaluations always run: cheap, and they make sure the MLflow store holds each config's run
        ("evaluations", "config_key", None, lineage.evaluation_fp),
    ]
    for asset, attr, stage, fp_of in stages:
        keys = dict.fromkeys(getattr(c, attr) for c in sweep.configs)
        for key in keys:
            c = sweep.first(attr, key)
            if force or stage is None or not artifacts.exists(stage, fp_of(c)):
                steps.append((asset, key))
    steps.append(("leaderboard", None))
    return steps


def run_sweep(
    spec: str,
    data_dir: str | None = None,
    force: bool = False,
    verbose: bool = False,
    progress: bool = True,
    resources: dict | None = None,
):
    """Materialize every stage of the sweep; return (leaderboard, definitions, instance, sweep, data dir).
    `resources` overrides the configured ones (e.g. an LLM client pointed at another server)."""
    import dagster as dg
    import polars as pl
    from tqdm import tqdm

    from rag_assets.common import FORCE_TAG
    from rag_assets.definitions import build_definitions
    from rag_assets.leaderboard import leaderboard_path
    from rag_core.spec import load_sweep
    from resources.artifacts import ArtifactStore, default_data_dir

    sweep = load_sweep(spec)
    data = Path(data_dir or default_data_dir()).resolve()
    defs = build_definitions(sweep, str(data), resources)
    instance = _instance(data)
    artifacts = ArtifactStore(data_dir=str(data))
    assets = list(defs.assets)
    resources = defs.resources
    steps = plan(sweep, artifacts, force, resources["vector_store"].backend)
    tags = {"sweep": sweep.name, **({FORCE_TAG: "true"} if force else {})}
    bar = tqdm(steps, desc="sweep", unit="step", disable=not progress, file=sys.stderr)
    for asset, key in bar:
        bar.set_description(f"{asset}{'[' + key + ']' if key else ''}"[:70])
        result = dg.materialize(
            assets,
            selection=[asset],
            partition_key=key,
            instance=instance,
            resources=resources,
            tags=tags,
            run_config={} if verbose else QUIET_LOGS,
            raise_on_error=True,
        )
        if not result.success:  # pragma: no cover - raise_on_error raises first
            raise RuntimeError(f"{asset} {key} failed")
    board = pl.read_parquet(leaderboard_path(artifacts, sweep))
    return board, defs, instance, sweep, data


def _print_board(board) -> None:
    from rag_core.leaderboard import to_markdown

    cols = [
        "rank",
        "config_key",
        "overall_score",
        "overall_ci95",
        "vs_leader",
        "recall_at_k",
        "ndcg_at_k",
        "exact_match",
        "token_f1",
        "faithfulness",
        "retrieval_p50_ms",
    ]
    print(to_markdown(board, cols))


def _write(board, output: str) -> None:
    path = Path(output)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".csv":
        board.write_csv(path)
    elif path.suffix == ".parquet":
        board.write_parquet(path)
    else:
        raise SystemExit(f"--output {output}: use a .csv or .parquet path")
    print(f"leaderboard written to {path}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="rag-sweep", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="materialize a sweep end to end and print its leaderboard")
    run.add_argument("spec", help="sweep YAML file")
    run.add_argument("--data-dir", help="artifact directory (default $RAG_DATA_DIR or ./.rag_data)")
    run.add_argument("--output", help="also write the leaderboard to this .csv or .parquet path")
    run.add_argument("--force", action="store_true", help="recompute every stage even if its artifact exists")
    run.add_argument("--verbose", action="store_true", help="show Dagster's event log")
    val = sub.add_parser("validate", help="validate a sweep file and list its configs")
    val.add_argument("spec")
    args = parser.parse_args(argv)

    from rag_core.datasets import DatasetError
    from rag_core.spec import SpecError, load_sweep

    try:
        if args.command == "validate":
            sweep = load_sweep(args.spec)
            print(f"{sweep.name}: {len(sweep.configs)} configs, {len(sweep.index_keys)} indexes")
            for key in sweep.config_keys:
                print(f"  {key}")
            return 0
        t0 = time.perf_counter()
        board, _, _, sweep, data = run_sweep(args.spec, args.data_dir, args.force, args.verbose)
    except (SpecError, DatasetError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(
        f"\nLeaderboard of sweep {sweep.name} ({board.height} configs, {time.perf_counter() - t0:.0f} s):\n"
    )
    _print_board(board)
    if args.output:
        _write(board, args.output)
    spec_path = Path(args.spec).resolve()
    print(
        "\nExplore the results:\n"
        f"  Dagster UI: DAGSTER_HOME={data / 'dagster_home'} RAG_SWEEP={spec_path} RAG_DATA_DIR={data} "
        ".venv/bin/dagster dev   (then open http://127.0.0.1:3000)\n"
        f"  MLflow UI:  LITELLM_LOCAL_MODEL_COST_MAP=True .venv/bin/mlflow ui --backend-store-uri "
        f"sqlite:///{data / 'mlflow.db'}   (then open http://127.0.0.1:5000, experiment {sweep.name})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
