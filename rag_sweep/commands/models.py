"""`rag-sweep export` and `rag-sweep verify-model`: an evaluated config as a model folder, and a model
folder or registered version checked without running any of its code."""

from __future__ import annotations

import sys
from pathlib import Path

from rag_assets.board_files import leaderboard_path, read_decision
from rag_core.planning.spec import SpecError
from rag_sweep.printing import _print_export
from resources import environment
from resources.storage import check_new_file, data_root, read_parquet


def add_parsers(sub) -> None:
    exp = sub.add_parser("export", help="write an evaluated config as an MLflow pyfunc model folder")
    exp.add_argument("spec", help="sweep YAML file")
    exp.add_argument("--config", help="a config key or label (default: the leaderboard's recommendation)")
    exp.add_argument("--out", required=True, help="the model folder to write (new or empty)")
    exp.add_argument("--data-dir", help="artifact directory (default $RAG_DATA_DIR or ./.rag_data)")
    exp.add_argument("--store", help="vector store of configs that name none")
    ver = sub.add_parser(
        "verify-model", help="check a model folder or a registered version without running any of its code"
    )
    ver.add_argument(
        "model",
        help="a model folder, or a registered version: models:/NAME@ALIAS or models:/NAME/N (the registry "
        "of $MLFLOW_TRACKING_URI)",
    )
    ver.add_argument("--fingerprint", help="a folder: the fingerprint `rag-sweep export` printed for it")
    ver.add_argument("--download", help="a registered version: the folder to download it to, checked")


def export(args) -> int:
    """The config as a model folder: the pipeline it was evaluated as, loadable and servable by MLflow."""
    from runner import load_plan, local_instance
    from shipping.bundle import ExportError, collect, config_key_of, fingerprints, save

    data = data_root(args.data_dir or environment.default_data_dir())
    out = Path(args.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise SpecError(f"--out {out}: exists and is not an empty folder; name a new one")
    check_new_file(out / "MLmodel", "--out")
    plan = load_plan(args.spec, args.store)
    board_file = leaderboard_path(data, plan.sweep.name)
    if not board_file.exists():
        raise SpecError(f"sweep {plan.sweep.name} has no leaderboard in {data}: run it first")
    decision = read_decision(data, plan.sweep.name)
    try:
        key = config_key_of(plan, args.config, decision.get("recommended"))
        bundle = collect(plan, data, local_instance(data), read_parquet(board_file), decision, key)
    except ExportError as e:
        raise SpecError(str(e)) from e
    save(bundle, out)
    _print_export(bundle.label, key, out, fingerprints(out)["model_fingerprint"])
    return 0


def verify_model(args) -> int:
    """A registered version: downloaded and checked against its registry tags. A folder: each bundled file
    against its manifest, and the whole folder against the fingerprint `rag-sweep export` printed (nothing
    else outside the folder says what it was). No code of the model runs."""
    import json

    from shipping.pipeline import BUNDLE, MANIFEST, TamperedModel, folder_files, folder_fingerprint, verify
    from shipping.registry import download_verified

    try:
        if args.model.startswith("models:/"):
            folder = download_verified(args.model, args.download)
            print(f"{args.model}: the registered model, as its registry tags record it, in {folder}")
            return 0
        if args.download:
            raise SpecError("--download: for a registered version (models:/...) only")
        folder = Path(args.model)
        if not (folder / "MLmodel").is_file():
            raise SpecError(f"{folder}: not a model folder (no MLmodel)")
        found = folder_fingerprint(folder_files(folder))
        if args.fingerprint and args.fingerprint != found:
            raise TamperedModel(
                f"{folder}: its fingerprint {found} is not the fingerprint {args.fingerprint} it was "
                "exported with: a file was changed, added or removed: refusing it"
            )
        verify(
            folder / "artifacts" / BUNDLE, json.loads((folder / "artifacts" / BUNDLE / MANIFEST).read_text())
        )
    except TamperedModel as e:
        print(f"error: {environment.redact(str(e))}", file=sys.stderr)
        return 1
    print(
        f"{folder}: fingerprint {found}"
        + (
            " (the exported one)"
            if args.fingerprint
            else "\n  its files match its own manifest; compare the fingerprint with the one `rag-sweep "
            "export` printed (--fingerprint FP checks it)"
        )
    )
    return 0
