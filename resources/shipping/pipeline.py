"""The shipped pipeline as an MLflow pyfunc model: `predict` takes questions and returns, for each, the
answer and the contexts it was given (chunk and doc ids, titles, texts), by running the sweep's own stage
functions (retrieve, rerank, answer) with the config it was evaluated as. One output row per input row: a row
that is not a question (`question_of`) is that row's error, the others are answered.

Loading checks what it loads: every bundled file must have the content the config was evaluated with (its
sha256 in `pipeline.json`), and the embedder the same version, else the model refuses to load with an error
naming the file, and every plug-in its config runs with installed (`MissingPlugin` names the package).
`pipeline.json` itself (the config's settings and prompts, the files' hashes) is checked against a
fingerprint recorded outside the folder: a registered version's registry tags (`model_files`,
`bundle_fingerprint`, `bundle_parts`, set at registration, and their signature `model_signature`, made with
a key the folder's writer does not hold: resources/shipping/signing.py), looked up when the model is loaded as
`models:/NAME@alias` or `models:/NAME/N` (MLflow writes the version it fetched into the folder,
`registered_model_meta`, before loading it); an edited part is named. A bare folder has no such anchor: its
printed fingerprint (`folder_fingerprint`) is what `rag-sweep export` printed, or it is not the exported one. An embedded store's index is built from the bundled rows and vectors into a folder of the
loading process (the same backend, the same analyzer); a server store's collection is the sweep's, found by
name with the connection settings of the environment (never a secret in the model) and checked by its count.
LLM calls (query rewriting, LLM reranking, generation) go through the project's client, configured from the
environment as a sweep's are.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import mlflow.pyfunc
import pandas as pd

BUNDLE = "bundle"  # the artifact (a folder) holding pipeline.json and the tables
MANIFEST = "pipeline.json"
INDEX_BUILD = "index"  # the folder in the bundle holding an approximate index's evaluated build
# the file MLflow writes into a registered model's folder each time it downloads it (its name and version,
# data MLflow reads, not code): not one of the files the model was registered with
MLFLOW_WRITES = "registered_model_meta"


class TamperedModel(RuntimeError):
    """A bundled file, the embedder or a server collection is not what the config was evaluated with."""


def file_sha256(path: Path) -> str:
    import hashlib

    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def canonical_sha256(value) -> str:
    """The sha256 of a JSON value's canonical text (keys sorted, no spaces): the same for the same value
    however the file holding it is formatted."""
    import hashlib

    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def manifest_parts(manifest: dict) -> dict[str, str]:
    """The sha256 of each part of a manifest, so that a changed one can be named: each section of the
    config (`config.generation`: its model and prompts ...), each bundled file's recorded hash
    (`content_sha256.chunks.parquet`), each identity field."""
    parts = {}
    for key, value in manifest.items():
        if key in ("config", "content_sha256") and isinstance(value, dict):
            parts.update({f"{key}.{k}": canonical_sha256(v) for k, v in value.items()})
        else:
            parts[key] = canonical_sha256(value)
    return parts


def folder_files(folder: Path) -> dict[str, str]:
    """Every file under a model folder (its path there, `/`-separated) -> its sha256: MLmodel, the model's
    code, its requirements, the bundle. A bytecode cache Python wrote there counts: it is code."""
    return {
        p.relative_to(folder).as_posix(): file_sha256(p) for p in sorted(folder.rglob("*")) if p.is_file()
    }


def folder_fingerprint(files: dict[str, str]) -> str:
    """The model folder's fingerprint: the sha256 of its files' hashes (`folder_files`)."""
    return canonical_sha256(files)


def check_files(folder: Path, expected: dict[str, str], where: str) -> None:
    """The folder holds exactly the files `expected` lists (path -> sha256), each with its content; else
    TamperedModel naming the first that differs (pipeline.json: the parts of it that changed, when the
    expected parts are known). Reads no code of the folder."""
    found = folder_files(folder)
    for name, sha in expected.items():
        if name not in found:
            raise TamperedModel(f"{folder / name}: missing from the {where}: refusing to load")
        if found[name] != sha:
            raise TamperedModel(
                f"{folder / name}: its content (sha256 {found[name][:12]}) is not the {where}'s "
                f"(sha256 {sha[:12]}): refusing to load"
            )
    if extra := sorted(set(found) - set(expected) - {MLFLOW_WRITES}):
        raise TamperedModel(
            f"{folder / extra[0]}: not a file of the {where} (added to the folder): refusing to load"
        )


def check_manifest(manifest: dict, fingerprint: str, parts: dict[str, str] | None, where: str) -> None:
    """`pipeline.json` is the one recorded (its canonical sha256 `fingerprint`), else TamperedModel naming
    the parts that changed (`parts`: the recorded `manifest_parts`, when known)."""
    if canonical_sha256(manifest) == fingerprint:
        return
    found = manifest_parts(manifest)
    changed = sorted(k for k in set(found) | set(parts or {}) if found.get(k) != (parts or {}).get(k))
    what = ", ".join(changed) if parts else "its settings, prompts or file hashes"
    raise TamperedModel(
        f"{MANIFEST}: {what} changed: not the manifest of the {where} (fingerprint {fingerprint[:12]}, "
        f"found {canonical_sha256(manifest)[:12]}): refusing to load"
    )


def registered_as(model_uri: str) -> tuple[str, str, dict] | None:
    """(name, version, its tags) of the registered model version a `models:/NAME@alias` or `models:/NAME/N`
    URI names (the registry of the tracking URI set), or None for any other URI."""
    if not isinstance(model_uri, str) or not model_uri.startswith("models:/"):
        return None
    from mlflow.tracking import MlflowClient

    from resources.mlflow_private import get_model_name_and_version, parse_model_uri

    if parse_model_uri(model_uri).model_id is not None:  # models:/m-<id>: a logged model, not a version
        return None
    name, version = get_model_name_and_version(MlflowClient(), model_uri)
    return str(name), str(version), version_tags(str(name), str(version))


def check_registered(
    folder: Path, manifest: dict | None, name: str, version: str, tags: dict, pinned: str | None = None
) -> None:
    """The model folder `folder` is the one registered as version `version` of `name`: every file as its
    registry tags record (`model_files`), and `manifest` (when given: already read) the recorded
    `bundle_fingerprint`. The tags are only as good as their anchor, which the folder's writer cannot
    forge: `pinned` (the folder fingerprint the user gives), else the tags' `model_signature`, made with
    this user's signing key (resources/shipping/signing.py). A version without them refuses: nothing outside its
    folder says what it held."""
    from resources.shipping.signing import SIGNATURE_VERSION, SigningKeyError, signed

    where = f"registered model {name} version {version}"
    if "model_files" not in tags or "bundle_fingerprint" not in tags:
        raise TamperedModel(
            f"{where}: its registry tags record no fingerprint (registered before models were "
            "fingerprinted): nothing checks its folder; register it again (rerun the sweep): refusing to load"
        )
    expected = json.loads(tags["model_files"])
    if pinned is not None:
        if (found := folder_fingerprint(folder_files(folder))) != pinned:
            raise TamperedModel(
                f"{where}: its fingerprint {found} is not the pinned {pinned}: a file was changed, added or "
                "removed: refusing to load"
            )
    elif "model_signature" not in tags:
        raise TamperedModel(
            f"{where}: not signed (registered before models were signed): register it again (rerun the "
            "sweep), or pin its fingerprint: refusing to load"
        )
    elif tags.get("signature_version") != SIGNATURE_VERSION:
        raise TamperedModel(
            f"{where}: signed over its files alone (before signatures named the model): it cannot be told "
            "from another sweep's model registered under this name; register it again (rerun the sweep), or "
            "pin its fingerprint: refusing to load"
        )
    else:
        # who it is, as asked for: the name it was fetched by, the sweep of that name, and the config and
        # evaluation its tags (and, below, its manifest) say; the key signed all of them with the files
        identity = {
            "registered_name": name,
            "sweep": name,
            "config_key": tags.get("config_key", ""),
            "evaluation_fingerprint": tags.get("evaluation_fingerprint", ""),
        }
        try:
            if not all(identity.values()) or not signed(expected, identity, tags["model_signature"]):
                raise TamperedModel(
                    f"{where}: its signature does not verify as {name}'s model with the signing key (its "
                    "files or registry tags were rewritten, it was signed as another sweep's, name's or "
                    "config's model, or another key signed it): refusing to load"
                )
        except SigningKeyError as e:
            raise TamperedModel(f"{where}: {e}: refusing to load") from None
    parts = json.loads(tags["bundle_parts"]) if "bundle_parts" in tags else None
    if manifest is not None:  # first: it names the part of the manifest that changed
        check_manifest(manifest, tags["bundle_fingerprint"], parts, where)
        for field, want in (("sweep", tags.get("sweep")), ("config_key", tags.get("config_key")),
                            ("evaluation_fingerprint", tags.get("evaluation_fingerprint"))):  # fmt: skip
            if want is not None and manifest.get(field) != want:
                raise TamperedModel(
                    f"{where}: its {MANIFEST} says {field} {manifest.get(field)!r}, its registry tags "
                    f"{want!r}: not the model registered as this version: refusing to load"
                )
    check_files(folder, expected, where)


def registered_meta(root: Path) -> tuple[str, str] | None:
    """(name, version) of the registered version a model folder was downloaded as: MLflow writes them to
    `registered_model_meta` each time it fetches a `models:/NAME@alias` or `models:/NAME/N` URI (for
    `mlflow.pyfunc.load_model` and `mlflow models serve` alike), just before loading it; None for a folder
    without it (an exported one)."""
    import yaml

    path = root / MLFLOW_WRITES
    if not path.is_file():
        return None
    meta = yaml.safe_load(path.read_text()) or {}
    if not isinstance(meta, dict) or not meta.get("model_name") or meta.get("model_version") is None:
        raise TamperedModel(f"{path}: not the registered name and version MLflow writes: refusing to load")
    return str(meta["model_name"]), str(meta["model_version"])


def version_tags(name: str, version: str) -> dict:
    """The registry tags of version `version` of `name` (the registry of the tracking URI set); TamperedModel
    when it holds no such version: nothing says what the folder should be."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    try:
        return dict(MlflowClient().get_model_version(name, version).tags)
    except MlflowException as e:
        raise TamperedModel(
            f"registered model {name} version {version}: not in the registry of this tracking URI (set "
            f"MLFLOW_TRACKING_URI to the one it was registered in), so nothing checks its folder: refusing "
            f"to load ({e.message})"
        ) from e


class MissingPlugin(RuntimeError):
    """A plug-in the model's config runs with is not installed here (or at another version)."""


def verify(folder: Path, manifest: dict) -> None:
    """Every bundled file has the content it was exported with; the embedder is the same version; every
    plug-in the config runs with is installed, at its version (else its name would be read as another kind:
    a `generation.model` that is no installed answer generator is a litellm model)."""
    from rag_core.common.local_models import model_version
    from rag_core.planning.extension_points import not_installed, packages_not_installed

    where = f"model of config {manifest['config_key']} (sweep {manifest['sweep']})"
    missing = not_installed(manifest.get("plugin_components") or {})
    if missing := missing or packages_not_installed(manifest.get("plugins") or []):
        raise MissingPlugin(f"the {where}: {missing[0]}: refusing to load")
    for name, sha in manifest["content_sha256"].items():
        path = folder / name
        if not path.is_file():
            raise TamperedModel(f"{path}: missing from the {where}: refusing to load")
        if (found := file_sha256(path)) != sha:
            raise TamperedModel(
                f"{path}: its content (sha256 {found[:12]}) is not what the {where} was evaluated with "
                f"(sha256 {sha[:12]}, vector index {manifest['vector_index_fingerprint'][:12]}): refusing to load"
            )
    model = manifest["config"]["embedding"]["model"]
    if (version := model_version(model)) != manifest["embedder_version"]:
        raise TamperedModel(
            f"embedder {model}: this machine has {version}, the {where} was evaluated with "
            f"{manifest['embedder_version']}: refusing to load"
        )


OUTPUT = ("question", "answer", "error", "chunk_ids", "doc_ids", "titles", "texts")  # predict's columns
NOT_A_STRING = "question is missing or not a string"


def rows_of(model_input) -> list:
    """One value per row of what `predict` is given, as given (not yet checked): a DataFrame with a
    `question` column, a list of strings or of records holding `question`, a string, or a mapping holding
    `question` (what `mlflow models serve` passes for each input format). No rows at all is an empty list,
    whatever the columns (`{"dataframe_records": []}` arrives as a DataFrame without any); rows without a
    `question` column are an error of the whole request."""
    import numpy as np
    import pandas as pd

    if isinstance(model_input, pd.DataFrame):
        if len(model_input) == 0:
            return []
        if "question" not in model_input.columns:
            raise ValueError(f"the input needs a 'question' column (got {list(model_input.columns)})")
        return model_input["question"].tolist()
    if isinstance(model_input, dict):
        if "question" not in model_input:
            raise ValueError(f"the input needs a 'question' key (got {list(model_input)})")
        value = model_input["question"]
        if isinstance(value, np.ndarray | pd.Series):
            return value.tolist()
        return list(value) if isinstance(value, list | tuple) else [value]
    if isinstance(model_input, np.ndarray | pd.Series):
        model_input = model_input.tolist()
    if isinstance(model_input, list | tuple):
        return [row.get("question") if isinstance(row, dict) else row for row in model_input]
    return [model_input]


def _is_null(value) -> bool:
    import math

    import pandas as pd

    return (
        value is None or value is pd.NA or value is pd.NaT or (isinstance(value, float) and math.isnan(value))
    )


def question_of(value) -> tuple[str | None, str | None]:
    """(the question, None) for a row that can be answered, else (None, why not): a null, a number, a list,
    a mapping or a boolean is not a question (a number is not read as its text: erring toward an error), nor
    is blank text, nor text that is not valid Unicode (a lone surrogate such as "\\ud800", which no UTF-8
    encoder takes)."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return None, "question is not valid Unicode text (it holds a lone surrogate)"
        if not value.strip():
            return None, "question is empty"
        return str(value), None
    return None, f"{NOT_A_STRING} (got {'null' if _is_null(value) else type(value).__name__})"


def shown(value) -> str | None:
    """A row's question as its output shows it: the text (a lone surrogate escaped, so the reply can be
    encoded), or null for a value that is not text."""
    return value.encode("utf-8", "backslashreplace").decode("utf-8") if isinstance(value, str) else None


def unanswered(question: str | None, error: str) -> dict:
    """The output row of a question not answered: a null answer, no contexts, the error."""
    return {"question": question, "answer": None, "error": error, **{c: [] for c in OUTPUT[3:]}}


class RagPipeline(mlflow.pyfunc.PythonModel):
    def load_context(self, context) -> None:
        import polars as pl

        from rag_core.planning.spec import RagConfig
        from resources.embedders import EmbeddingService, chunk_vectors, vectors_from_column
        from resources.environment import device_setting, env_choice, text
        from resources.llm import llm_from_env
        from resources.local_encoders import BACKENDS

        folder = Path(context.artifacts[BUNDLE])
        self.manifest = manifest = json.loads((folder / MANIFEST).read_text())
        root = folder.parent.parent  # the model folder (the bundle is its artifacts/bundle)
        if (registered := registered_meta(root)) is not None:  # loaded as a registered version: its record
            check_registered(root, manifest, *registered, version_tags(*registered))
        verify(folder, manifest)
        self.config = RagConfig.model_validate(manifest["config"])
        self.chunks = pl.read_parquet(folder / "chunks.parquet")
        embeddings = pl.read_parquet(folder / "embeddings.parquet")
        self.vectors = chunk_vectors(embeddings)
        corpus = folder / "corpus.parquet"
        self.corpus = pl.read_parquet(corpus) if corpus.exists() else None
        self._work = tempfile.TemporaryDirectory(prefix="rag-model-")  # the built index, the vector cache
        self.embedder = EmbeddingService(
            cache_dir=str(Path(self._work.name) / "embedding_cache"),
            api_base=text("RAG_EMBEDDING_API_BASE"),
            backend=env_choice("RAG_EMBEDDING_BACKEND", "onnx", BACKENDS),
            device=device_setting(),
        )
        self.embedder.local_device()  # $RAG_DEVICE=cuda where there is none: said at load, not at a query
        self.llm = llm_from_env(cache_path=None)
        self.collection = manifest["collection"]
        self.store = self._store(manifest, vectors_from_column(embeddings["vector"]), folder)

    def _store(self, manifest: dict, vectors, folder: Path):
        from rag_core.components.stores import keeps_files
        from resources.environment import weaviate_settings
        from resources.vector_stores import VectorStores

        backend = manifest["store"]
        if shipped := manifest.get("index_build"):  # the evaluated approximate build, as it was measured
            store = VectorStores(data_dir=str(Path(self._work.name) / "index")).get(backend)
            store.adopt_build(self.collection, folder / shipped["folder"], shipped["record"])
            return store
        if keeps_files(backend) != "server":  # an embedded store: its (exact) index rebuilt from the bundle
            store = VectorStores(data_dir=str(Path(self._work.name) / "index")).get(backend)
            rows = self.chunks.select(
                "chunk_id", "doc_id", self.chunks["index_text"].alias("text"), "metadata"
            ).to_dicts()
            index = self.config.index  # an approximate index is rebuilt with its settings, as evaluated
            ann = {"ann": index.ann} if index.ann.approximate else {}
            store.upsert(self.collection, rows, vectors, index.bm25_analyzer, **ann)
            return store
        url, grpc_port, _ = weaviate_settings()
        store = VectorStores(
            data_dir=self._work.name,
            weaviate_url=url,
            weaviate_grpc_port=grpc_port,
            weaviate_api_key=os.environ.get("WEAVIATE_API_KEY"),
        ).get(backend)
        info = store.info(self.collection)
        if not info["exists"] or info["count"] != manifest["count"]:
            raise TamperedModel(
                f"{backend} collection {self.collection}: holds {info['count'] if info['exists'] else 'nothing'}, "
                f"the model of config {manifest['config_key']} was evaluated on {manifest['count']} chunks: "
                "refusing to load"
            )
        return store

    def predict(self, context, model_input: pd.DataFrame, params: dict | None = None) -> pd.DataFrame:
        """One output row per input row, in order (OUTPUT's columns). A row that cannot be answered (not a
        question: `question_of`; or the pipeline failed on it) has a null answer, no contexts and its error;
        the others are answered. No rows: an empty frame with the same columns. Nulls are None: object
        columns, which pandas would otherwise type as strings holding NaN."""

        values = rows_of(model_input)
        checked = [question_of(v) for v in values]
        questions = [q for q, _ in checked if q is not None]
        answered = iter(self._answer_each(questions) if questions else [])
        rows = [
            next(answered) if q is not None else unanswered(shown(v), why)
            for v, (q, why) in zip(values, checked, strict=True)
        ]
        return pd.DataFrame(rows, columns=list(OUTPUT), dtype=object)  # a null stays None (not NaN)

    def _answer_each(self, questions: list[str]) -> list[dict]:
        """The questions answered together; when the pipeline fails on the batch, one at a time, so one
        question it fails on is that row's error and the others are answered."""
        try:
            return self._answer(questions)
        except Exception as e:
            if len(questions) == 1:
                return [unanswered(questions[0], f"{type(e).__name__}: {e}")]
        return [self._answer_each([q])[0] for q in questions]

    def _answer(self, questions: list[str]) -> list[dict]:
        """The pipeline on valid questions: one row per question (OUTPUT's columns), in order."""
        import litellm
        import polars as pl

        from rag_core.generation.answering import answer
        from rag_core.retrieval.rerank import rerank
        from rag_core.retrieval.retrieve import retrieve

        c = self.config
        qa = pl.DataFrame(
            {"query_id": [f"q{i}" for i in range(len(questions))], "question": questions},
            schema={"query_id": pl.String, "question": pl.String},
        )

        def embed(texts: list[str]):
            return self.embedder.embed(c.embedding.model, texts)[0]

        retrieved = retrieve(c, qa, self.chunks, self.store, self.collection, embed, self.llm)
        device = self.embedder.local_device().name if c.rerank.method == "cross_encoder" else "cpu"
        reranked = rerank(
            c, retrieved, qa, self.llm, chunk_vectors=lambda: self.vectors, embed=embed, device=device
        )
        answers = answer(
            c,
            qa,
            reranked,
            self.llm,
            lambda t: litellm.token_counter(model=c.generation.model, text=t),
            parents=lambda: (self.chunks, self.corpus),
        ).filter(pl.col("sample") == 0)
        out = (
            qa.join(answers.select("query_id", "answer", "error"), on="query_id", how="left")
            .join(
                reranked.select("query_id", "chunk_ids", "doc_ids", "titles", "texts"),
                on="query_id",
                how="left",
            )
            .sort(pl.col("query_id").str.slice(1).cast(pl.Int64))
        )
        if out["query_id"].to_list() != qa["query_id"].to_list():
            raise RuntimeError(f"the pipeline answered {out.height} rows for {qa.height} questions")
        return out.drop("query_id").select(OUTPUT).to_dicts()
