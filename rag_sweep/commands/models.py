"""`rag-sweep export`, `verify-model` and `serve`: an evaluated config as a model folder; a model folder or
registered version checked without running any of its code, on a private copy; that copy served."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from rag_assets.board_files import leaderboard_path, read_decision
from rag_core.planning.spec import SpecError
from rag_sweep.printing import _print_export
from resources import environment
from resources.storage import check_new_file, data_root, read_parquet


def add_parser(sub) -> None:
    """Three commands: export, verify-model and serve."""
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
    ver.add_argument(
        "--fingerprint",
        type=fingerprint,
        help="the folder fingerprint to hold it to: what `rag-sweep export` printed for a folder; for a "
        "registered version, one pinned instead of its signature",
    )
    ver.add_argument("--download", help="a registered version: the new folder to download it to, checked")
    srv = sub.add_parser(
        "serve", help="serve a model folder or a registered version from a private copy checked first"
    )
    srv.add_argument("model", help="a model folder, or models:/NAME@ALIAS or models:/NAME/N")
    srv.add_argument(
        "--fingerprint", type=fingerprint, help="the folder fingerprint to hold it to (as verify-model takes)"
    )
    srv.add_argument("-p", "--port", type=int, default=5001, help="the port to serve on (default 5001)")
    srv.add_argument("-H", "--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1)")
    exp.set_defaults(handler=export)
    ver.set_defaults(handler=verify_model)
    srv.set_defaults(handler=serve)


def fingerprint(text: str) -> str:
    """A folder fingerprint as `export` prints it (64 hex digits): anything else, a placeholder copied from
    the docs or a fingerprint cut short, is a usage error, not a folder that fails its check."""
    if not re.fullmatch(r"[0-9a-f]{64}", text.strip().lower()):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a folder fingerprint: `rag-sweep export` prints one of 64 hex digits"
        )
    return text.strip().lower()


def export(args) -> int:
    """The config as a model folder: the pipeline it was evaluated as, loadable and servable by MLflow."""
    from rag_sweep.runner import load_plan, local_instance
    from resources.shipping.bundle import ExportError, collect, config_key_of, fingerprints, save

    data = data_root(args.data_dir or environment.default_data_dir())
    out = Path(args.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise SpecError(f"--out {out}: exists and is not an empty folder; name a new one")
    check_new_file(out / "MLmodel", "--out")
    plan = load_plan(args.spec, args.store, data)
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


def verified_copy(model: str, dst: Path | None, fingerprint: str | None) -> tuple[Path, str]:
    """(a private copy of `model`, checked; its folder fingerprint). A registered version: against its
    signed registry tags (or `fingerprint`, pinned). A folder: each bundled file against its manifest, and
    the whole against `fingerprint` when given (nothing else outside a bare folder says what it was). Each
    file is read once from where another may write: into the copy, which is what is checked and used."""
    import json
    import os
    import shutil

    from resources.shipping.pipeline import (
        BUNDLE,
        MANIFEST,
        TamperedModel,
        folder_files,
        folder_fingerprint,
        verify,
    )
    from resources.shipping.registry import check_regular_files, download_verified, private_folder

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # the command's output: its result
    try:
        if model.startswith("models:/"):
            folder = download_verified(model, dst, fingerprint)
            manifest = json.loads((folder / "artifacts" / BUNDLE / MANIFEST).read_text())
            verify(folder / "artifacts" / BUNDLE, manifest)  # loads here: its plug-ins, its embedder
            return folder, folder_fingerprint(folder_files(folder))
        source = Path(model)
        if not (source / "MLmodel").is_file():
            raise SpecError(f"{source}: not a model folder (no MLmodel)")
        folder = private_folder(dst) / "model"
        shutil.copytree(source, folder, symlinks=True)  # a link stays a link: refused below
    except ValueError as e:  # a --download folder that is not new, a URI that is no version
        raise SpecError(str(e)) from None
    check_regular_files(folder)
    found = folder_fingerprint(folder_files(folder))
    if fingerprint and fingerprint != found:
        raise TamperedModel(
            f"{source}: its fingerprint {found} is not the fingerprint {fingerprint} it was exported with: a "
            "file was changed, added or removed: refusing it"
        )
    try:
        manifest = json.loads((folder / "artifacts" / BUNDLE / MANIFEST).read_text())
    except (OSError, ValueError) as e:
        raise TamperedModel(f"{source}: its {MANIFEST} cannot be read ({e}): refusing it") from None
    verify(folder / "artifacts" / BUNDLE, manifest)
    return folder, found


def verify_model(args) -> int:
    """A registered version: downloaded into a private folder and checked there. A folder: checked on a
    private copy. No code of the model runs."""
    import shutil

    from resources.shipping.pipeline import MissingPlugin, TamperedModel

    registered = args.model.startswith("models:/")
    if args.download and not registered:
        raise SpecError("--download: for a registered version (models:/...) only")
    try:
        folder, found = verified_copy(
            args.model, Path(args.download) if args.download else None, args.fingerprint
        )
    except (TamperedModel, MissingPlugin) as e:
        print(f"error: {environment.redact(str(e))}", file=sys.stderr)
        return 1
    if registered:
        anchor = "the fingerprint pinned" if args.fingerprint else "its signed registry tags"
        print(
            f"{args.model}: the registered model, as {anchor} record it, in {folder}\n  fingerprint {found}"
        )
        return 0
    shutil.rmtree(folder.parent, ignore_errors=True)  # the folder's copy: only checked
    print(
        f"{args.model}: fingerprint {found}"
        + (
            " (the exported one)"
            if args.fingerprint
            else "\n  its files match its own manifest; compare the fingerprint with the one `rag-sweep "
            "export` printed (--fingerprint FP checks it)"
        )
    )
    return 0


def serve(args) -> int:
    """`mlflow models serve` on a private copy of the model, checked as `verify-model` checks it: the
    server loads exactly what was verified (MLflow serving a registry URI would run the code of the
    registry's own folder before any check). The server ends with this command, however it is ended
    (rag_core/common/children.py), and the copy is removed."""
    import os
    import shutil

    from rag_core.common.children import run_until_signalled
    from resources.shipping.pipeline import MissingPlugin, TamperedModel

    if not 1 <= args.port <= 65535:  # before any work: MLflow would serve on another port than the one said
        raise SpecError(f"--port {args.port}: not a TCP port; give one from 1 to 65535")
    try:
        folder, found = verified_copy(args.model, None, args.fingerprint)
    except (TamperedModel, MissingPlugin) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    try:
        print(f"serving {args.model} (fingerprint {found}) from its checked copy {folder}", file=sys.stderr)
        bin_dir = Path(sys.executable).parent  # MLflow starts its uvicorn from PATH
        command = [str(bin_dir / "mlflow"), "models", "serve", "-m", str(folder), "--env-manager", "local"]
        # the server's temporary files (the model's built index) in the copy's folder, removed below: a
        # server's workers end without Python's exit handlers, which would remove their own
        scratch = folder.parent / "tmp"
        scratch.mkdir(mode=0o700)
        env = {
            **os.environ,
            "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
            "TMPDIR": str(scratch),
        }
        return run_until_signalled([*command, "-p", str(args.port), "-h", args.host], env=env)
    finally:
        shutil.rmtree(folder.parent, ignore_errors=True)
