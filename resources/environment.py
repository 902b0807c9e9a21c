"""Every environment variable the project reads, in one module: the deployment's settings (data dir, vector
store, LLM endpoint, servers, limits) and the process defaults set before litellm and MLflow are imported.
VARIABLES declares each one with its default and what it does (the docs' reference is generated from it).

Anything else asks these functions; a bad value is a one-line error naming the variable.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

# Process defaults, set once before litellm, MLflow or Dagster are imported: litellm fetches a remote cost
# map at import and deadlocks with mlflow without the first (shared/notes/stack.md); no telemetry; the
# embedding models are read from the local cache only; no URL printed by MLflow.
# the tokenizer's threads are off by default (a process that forks after using them is warned at, and a CPU's
# cores are the model's); a GPU encoder turns them on unless the user chose (resources/gpu_encoders.py)
TOKENIZER_THREADS_CHOSEN = bool(os.environ.get("TOKENIZERS_PARALLELISM"))
for _name, _value in {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "DAGSTER_DISABLE_TELEMETRY": "1",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "HF_HUB_OFFLINE": "1",
    # MLflow's client prints "🏃 View run … at: URL" on every run it ends on a server, the URL being the
    # tracking URI with its password (a step's stdout: the console and Dagster's compute logs); the
    # product gives the run's link itself, redacted (resources/tracking.py)
    "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true",
    "TOKENIZERS_PARALLELISM": "false",
    # S3-compatible servers other than AWS (MinIO, Ceph, SeaweedFS ...) often refuse the AWS SDKs' newer
    # streamed checksums; a checksum only where the API requires one works on all of them
    "AWS_REQUEST_CHECKSUM_CALCULATION": "when_required",
    "AWS_RESPONSE_CHECKSUM_VALIDATION": "when_required",
}.items():
    if not os.environ.get(_name):  # unset or empty (an empty variable is an unset one)
        os.environ[_name] = _value

SECRET_NAMES = ("KEY", "TOKEN", "SECRET", "PASSWORD")


@dataclass(frozen=True)
class Variable:
    """An environment variable the product reads (or sets for the libraries it imports): the docs'
    reference is generated from VARIABLES, and a test fails when the code reads a variable not declared here."""

    name: str
    default: str  # what applies when it is unset ("" for nothing)
    description: str
    topic: str


VARIABLES = (
    # where things are
    Variable(
        "RAG_DATA_DIR",
        "./.rag_data",
        "The data dir: artifacts, input snapshots, the embedding cache, "
        "embedded vector stores, leaderboards, ship reports, search state, and on the embedded default the "
        "Dagster instance and the MLflow store. A local folder, or `s3://bucket/prefix` (a deployment's: "
        "then `$DAGSTER_HOME`, `$DAGSTER_PG_HOST` and `$MLFLOW_TRACKING_URI` must be set).",
        "data",
    ),
    Variable(
        "RAG_SWEEP",
        "",
        "One sweep file that replaces the deployment's `rag_sweep/defs/` folder (what "
        "`rag-sweep run` prints for its Dagster UI).",
        "data",
    ),
    Variable(
        "RAG_VECTOR_STORE",
        "lancedb",
        "The vector store of configs that name none (`index.store`): "
        "`lancedb`, `qdrant`, `chroma`, `milvus`, `weaviate` or a plug-in's.",
        "data",
    ),
    Variable(
        "XDG_CACHE_HOME",
        "~/.cache",
        "Where what is built once per machine goes (`rag-sweep/`: ONNX graphs, "
        "the empty MLflow store, the GPU calibration).",
        "data",
    ),
    Variable(
        "XDG_CONFIG_HOME",
        "~/.config",
        "Where the model-signing key is kept (`rag-sweep/signing.key`).",
        "data",
    ),
    Variable(
        "RAG_SWEEP_SIGNING_KEY",
        "",
        "Another file holding the key that signs registered models (32 random "
        "bytes, mode 0600; default `$XDG_CONFIG_HOME/rag-sweep/signing.key`).",
        "data",
    ),
    # LLMs
    Variable(
        "RAG_LLM_API_BASE",
        "",
        "The OpenAI-protocol endpoint LLM calls go to; part of the fingerprint of "
        "every partition that calls an LLM (the same model name on another server is another model).",
        "llm",
    ),
    Variable(
        "RAG_LLM_API_KEY",
        "",
        "The LLM endpoint's key (else litellm reads the provider's own variable, "
        "e.g. `OPENAI_API_KEY`); reaches Dagster as an `EnvVar`, never stored.",
        "llm",
    ),
    Variable(
        "OPENAI_API_KEY",
        "",
        "A provider's own key (`ANTHROPIC_API_KEY` and the like too), read by litellm "
        "when `$RAG_LLM_API_KEY` is unset.",
        "llm",
    ),
    Variable("RAG_LLM_TIMEOUT_S", "60", "Seconds one LLM call may take (a finite number above 0).", "llm"),
    Variable(
        "RAG_LLM_MAX_RETRIES",
        "2",
        "Retries of a failed LLM call (429, 500, a reply off the protocol, an empty completion, a timeout).",
        "llm",
    ),
    Variable("RAG_LLM_MAX_CONCURRENCY", "4", "LLM calls in flight at once within a stage.", "llm"),
    Variable(
        "RAG_LLM_REQUESTS_PER_MINUTE",
        "0",
        "The provider's quota: request starts are spaced 60/N s apart, "
        "shared by every stage and thread of a process per provider and endpoint; at least 1, or 0 for no "
        "limit. A wait longer than 5 s is logged once.",
        "llm",
    ),
    # local models
    Variable("RAG_EMBEDDING_API_BASE", "", "The endpoint of a litellm embedding model.", "models"),
    Variable(
        "RAG_EMBEDDING_BACKEND",
        "onnx",
        "How a local model embeds: `onnx` (ONNX Runtime, when its graph "
        "computes torch's vectors) or `torch` (sentence-transformers; the torch extra).",
        "models",
    ),
    Variable(
        "RAG_DEVICE",
        "auto",
        "Where local embedders and cross-encoders run: `auto` (the first CUDA device "
        "torch sees, else the CPU), `cpu`, `cuda` or `cuda:N` (an error before any work where there is no "
        "such device). Each embedding step's metadata says which device ran it and why.",
        "models",
    ),
    Variable(
        "TOKENIZERS_PARALLELISM",
        "false",
        "The tokenizer's threads: off unless chosen (a process that "
        "forks after using them is warned at); a GPU encoder turns them on unless the user chose.",
        "models",
    ),
    # servers of a deployment
    Variable(
        "DAGSTER_HOME",
        "",
        "The Dagster instance of a deployment (`deploy/dagster.yaml`); unset, "
        "`rag-sweep run` keeps its own in `<data dir>/dagster_home`.",
        "servers",
    ),
    Variable(
        "DAGSTER_PG_HOST",
        "",
        "The deployment's PostgreSQL (the Dagster instance's; also the LLM call "
        "cache, the ledger and the locks); unset: SQLite and file locks in the data dir.",
        "servers",
    ),
    Variable("DAGSTER_PG_PORT", "5432", "Its port.", "servers"),
    Variable("DAGSTER_PG_USER", "postgres", "Its user.", "servers"),
    Variable(
        "DAGSTER_PG_PASSWORD", "", "Its password (redacted from whatever is printed or stored).", "servers"
    ),
    Variable("DAGSTER_PG_DB", "dagster", "Its database.", "servers"),
    Variable(
        "MLFLOW_TRACKING_URI",
        "",
        "The MLflow tracking server; unset: `sqlite:///<data dir>/mlflow.db`.",
        "servers",
    ),
    Variable(
        "MLFLOW_UI_URL", "http://127.0.0.1:5000", "The MLflow UI the printed links point at.", "servers"
    ),
    Variable(
        "WEAVIATE_URL", "http://127.0.0.1:8080", "The Weaviate server of the `weaviate` store.", "servers"
    ),
    Variable("WEAVIATE_GRPC_PORT", "50051", "Its gRPC port.", "servers"),
    Variable("WEAVIATE_API_KEY", "", "Its key (reaches Dagster as an `EnvVar`, never stored).", "servers"),
    Variable(
        "AWS_ENDPOINT_URL",
        "",
        "The S3-compatible server of an `s3://` data dir other than AWS (`AWS_ENDPOINT_URL_S3` too).",
        "servers",
    ),
    Variable("AWS_ENDPOINT_URL_S3", "", "The same, for S3 only.", "servers"),
    Variable("AWS_REGION", "us-east-1", "The S3 region (`AWS_DEFAULT_REGION` too).", "servers"),
    Variable("AWS_DEFAULT_REGION", "us-east-1", "The same, as the AWS tools name it.", "servers"),
    Variable(
        "AWS_ACCESS_KEY_ID",
        "",
        "The S3 credentials (with `AWS_SECRET_ACCESS_KEY`), read by the S3 clients "
        "themselves: never in a URI, an artifact or a run record.",
        "servers",
    ),
    Variable(
        "RAG_CONNECT_TIMEOUT_S",
        "10",
        "Seconds within which every server a command may use must take a connection, before any work.",
        "servers",
    ),
    # the fleet and the deployment's runs
    Variable(
        "RAG_EXECUTOR",
        "in_process",
        "Where a run's steps execute: `in_process` (one after the other in "
        "the runner's process) or `celery` (a worker fleet; the fleet extra).",
        "fleet",
    ),
    Variable(
        "CELERY_BROKER_URL",
        "",
        "The fleet's broker, e.g. `amqp://user:password@rabbitmq:5672//`, read by "
        "the runner and every worker.",
        "fleet",
    ),
    Variable(
        "RAG_GPU_QUEUE",
        "",
        "The Celery queue of the steps that run a model over many texts (embedding, "
        "cross-encoder reranking, semantic chunking); unset: the default queue `dagster`.",
        "fleet",
    ),
    Variable(
        "RAG_INPUT_QUEUE",
        "",
        "The Celery queue of the steps that read the sweep's input files, served "
        "where those files are; unset: the default queue.",
        "fleet",
    ),
    Variable(
        "RAG_BATCH_SIZE", "100", "The most partitions of a stage one Dagster run materializes.", "fleet"
    ),
    Variable(
        "RAG_FLEET_WORKERS", "2", "The batches a stage's partitions are split into on the fleet.", "fleet"
    ),
    Variable(
        "RAG_NIGHTLY_CRON",
        "0 2 * * *",
        "When the nightly re-evaluation of a `$RAG_SWEEP` deployment runs "
        "(a `defs/` instance sets `nightly_cron`).",
        "fleet",
    ),
    Variable(
        "RAG_NIGHTLY_STATUS",
        "stopped",
        "Whether each sweep's nightly re-evaluation schedules start running (`running`) or stay off until "
        "turned on in the Dagster UI (`stopped`): a nightly re-asks every config's LLM calls.",
        "fleet",
    ),
    Variable(
        "RAG_ALERT_WEBHOOK",
        "",
        "Where failed `nightly_drift` checks are posted as JSON (an http(s) URL); unset: no alert is sent.",
        "fleet",
    ),
    Variable("RAG_DAGSTER_URL", "http://127.0.0.1:3000", "The Dagster UI the alerts link to.", "fleet"),
    Variable(
        "DAGSTER_COMPUTE_LOG_TAIL_WAIT_AFTER_FINISH",
        "0",
        "Seconds to wait for a step's captured output "
        "before its mirror to the terminal stops, as with Dagster's own mirror.",
        "fleet",
    ),
    # set by the product for the libraries it imports, unless already set
    *(
        Variable(
            name, value, f"Set to `{value}` when unset, before the library is imported: {why}.", "process"
        )
        for name, value, why in (
            (
                "LITELLM_LOCAL_MODEL_COST_MAP",
                "True",
                "litellm's cost map from the package (its remote fetch deadlocks with MLflow's import)",
            ),
            ("DAGSTER_DISABLE_TELEMETRY", "1", "no telemetry"),
            ("MLFLOW_DISABLE_TELEMETRY", "true", "no telemetry"),
            ("HF_HUB_OFFLINE", "1", "local models are read from the local cache only"),
            (
                "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT",
                "true",
                "MLflow would print the tracking URI with its "
                "password; the product prints the run's link itself, redacted",
            ),
            (
                "AWS_REQUEST_CHECKSUM_CALCULATION",
                "when_required",
                "S3-compatible servers often refuse the AWS SDKs' newer streamed checksums",
            ),
            ("AWS_RESPONSE_CHECKSUM_VALIDATION", "when_required", "the same"),
            (
                "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR",
                "false",
                "export and serve print their result, not MLflow's progress bars",
            ),
            ("PYTHAINLP_OFFLINE", "1", "PyThaiNLP downloads no corpus (newmm's is in the package)"),
            ("PYTHAINLP_READ_ONLY", "1", "PyThaiNLP creates no data folder in the home directory"),
        )
    ),
)


def drop_empty_variables() -> None:
    """An empty variable is an unset one, for every variable the product reads: `RAG_DATA_DIR=` must not name
    the current folder, nor `DAGSTER_PG_USER=` an empty user. Dropped from the environment, so the libraries
    that read the same variables (MLflow, boto, Dagster) see them unset too."""
    for variable in VARIABLES:
        if os.environ.get(variable.name) == "":
            del os.environ[variable.name]


drop_empty_variables()


class Unreachable(RuntimeError):
    """A server the environment names (MLflow, PostgreSQL) cannot be connected to: one line naming where
    (no password) and the variables that set it, before any work."""


def text(name: str, default: str | None = None) -> str | None:
    """A variable's value; unset or empty: `default`."""
    return os.environ.get(name) or default


def is_set(name: str) -> bool:
    return bool(os.environ.get(name))


def normalized(location: str | os.PathLike) -> str | os.PathLike:
    """A data dir as given, its scheme in lower case (`S3://b/p` is `s3://b/p`, not a local folder named
    `S3:`): the one spelling the check, `is_remote` and the stores all see."""
    if isinstance(location, str) and location[:5].lower() == "s3://":
        return "s3://" + location[5:]
    return location


def default_data_dir() -> str:
    return normalized(os.environ.get("RAG_DATA_DIR") or str(Path.cwd() / ".rag_data"))


def s3_settings() -> tuple[str | None, str]:
    """(the S3 endpoint, `$AWS_ENDPOINT_URL`, None for AWS itself; the region, `$AWS_REGION`, default
    us-east-1). The credentials stay in the AWS variables, read by the S3 clients themselves."""
    return os.environ.get("AWS_ENDPOINT_URL") or os.environ.get("AWS_ENDPOINT_URL_S3") or None, (
        os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    )


def shared_database_url() -> str | None:
    """The deployment's PostgreSQL (the Dagster instance's, `$DAGSTER_PG_*` as deploy/dagster.yaml reads
    them), where what every worker must share transactionally lives (the LLM call cache and ledger, the
    locks); None on the embedded default (SQLite and file locks in the data dir)."""
    host = os.environ.get("DAGSTER_PG_HOST")
    if not host:
        return None
    from urllib.parse import quote

    user = quote(os.environ.get("DAGSTER_PG_USER", "postgres"), safe="")
    password = os.environ.get("DAGSTER_PG_PASSWORD")
    auth = f"{user}:{quote(password, safe='')}" if password else user
    port = os.environ.get("DAGSTER_PG_PORT", "5432")
    return f"postgresql://{auth}@{host}:{port}/{os.environ.get('DAGSTER_PG_DB', 'dagster')}"


def shared_database_address() -> str:
    """The deployment's PostgreSQL as host:port (what an error may show: no user, no password)."""
    return f"{os.environ.get('DAGSTER_PG_HOST')}:{os.environ.get('DAGSTER_PG_PORT', '5432')}"


def user_cache_dir() -> Path:
    """This project's folder in the user's cache dir: what is built once per machine (not per data dir)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rag-sweep"


def deployment_store() -> str:
    """The vector store of configs that name none, when the sweep's instance names none either."""
    return os.environ.get("RAG_VECTOR_STORE", "lancedb").lower()


def llm_api_base() -> str | None:
    """The LLM endpoint the deployment's client calls ($RAG_LLM_API_BASE): part of the fingerprint of every
    partition that calls an LLM, as the same model name on another server is another model."""
    return os.environ.get("RAG_LLM_API_BASE") or None


def nightly_cron() -> str:
    """When the nightly re-evaluation of a `$RAG_SWEEP` deployment runs ($RAG_NIGHTLY_CRON, default
    02:00 UTC; a defs/ component instance sets its own `nightly_cron`)."""
    return os.environ.get("RAG_NIGHTLY_CRON") or "0 2 * * *"


def nightly_status() -> str:
    """The default status of the nightly re-evaluation schedules ($RAG_NIGHTLY_STATUS): `stopped` unless a
    deployment asks for them, as they spend LLM calls every night."""
    return env_choice("RAG_NIGHTLY_STATUS", "stopped", ("stopped", "running"))


def sweep_file() -> str | None:
    """$RAG_SWEEP: one sweep file that replaces the deployment's `defs/` folder (what `rag-sweep run` prints)."""
    return os.environ.get("RAG_SWEEP") or None


def dagster_home() -> str | None:
    return os.environ.get("DAGSTER_HOME") or None


def alert_settings() -> tuple[str | None, str]:
    """(where drift alerts are posted: $RAG_ALERT_WEBHOOK, None for nowhere; the Dagster UI's address the
    alerts link to: $RAG_DAGSTER_URL, default http://127.0.0.1:3000). A webhook that is not an http(s) URL
    (file://, a bare host) is a one-line error; the URL itself is not echoed (a webhook's path is often
    its secret)."""
    from urllib.parse import urlsplit

    from rag_core.planning.spec import SpecError

    webhook = os.environ.get("RAG_ALERT_WEBHOOK") or None
    if webhook is not None:
        url = urlsplit(webhook)
        if url.scheme.lower() not in ("http", "https") or not url.netloc:
            raise SpecError(
                f"$RAG_ALERT_WEBHOOK: not an http(s) URL (scheme {url.scheme or 'none'!r}); set it to the "
                "webhook's http:// or https:// address: no alert is sent until then"
            )
    return webhook, os.environ.get("RAG_DAGSTER_URL") or "http://127.0.0.1:3000"


def weaviate_settings() -> tuple[str, int, bool]:
    """(WEAVIATE_URL, WEAVIATE_GRPC_PORT, whether WEAVIATE_API_KEY is set)."""
    return (
        os.environ.get("WEAVIATE_URL", "http://127.0.0.1:8080"),
        int(os.environ.get("WEAVIATE_GRPC_PORT", "50051")),
        bool(os.environ.get("WEAVIATE_API_KEY")),
    )


def executor() -> str:
    """Where a sweep run's steps execute: `in_process` (default: one after the other in the runner's
    process) or `celery` (on a worker fleet through Dagster's Celery executor: rag_sweep/fleet/)."""
    return env_choice("RAG_EXECUTOR", "in_process", ("in_process", "celery"))


def _positive(name: str, default: int) -> int:
    raw = os.environ.get(name) or str(default)
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"${name} must be a whole number of at least 1, not {raw!r}")
    return value


def batch_size() -> int:
    """The most partitions of a stage one Dagster run materializes ($RAG_BATCH_SIZE, default 100)."""
    return _positive("RAG_BATCH_SIZE", 100)


def fleet_workers() -> int:
    """How many runs a stage's partitions are split into on the fleet, one per worker that may take one
    ($RAG_FLEET_WORKERS, default 2)."""
    return _positive("RAG_FLEET_WORKERS", 2)


def celery_broker_url() -> str | None:
    """The fleet's broker ($CELERY_BROKER_URL, e.g. amqp://user:password@rabbitmq:5672//), read by the
    runner and every worker; never stored (the executor is configured in code, not in a run's config)."""
    return os.environ.get("CELERY_BROKER_URL") or None


def gpu_queue() -> str | None:
    """The Celery queue of the steps that load a model (embedding, cross-encoder reranking): $RAG_GPU_QUEUE,
    served by the GPU workers only; unset, every step goes to the default queue (`dagster`)."""
    return os.environ.get("RAG_GPU_QUEUE") or None


def input_queue() -> str | None:
    """The Celery queue of the steps that read the sweep's input files (the corpus and QA set snapshots,
    a generated QA file) on a deployment's fleet: a queue served where those files are
    ($RAG_INPUT_QUEUE; unset: the default queue, every worker seeing the files)."""
    return os.environ.get("RAG_INPUT_QUEUE") or None


def mlflow_tracking_uri() -> str | None:
    return os.environ.get("MLFLOW_TRACKING_URI") or None


def mlflow_ui_url() -> str:
    return os.environ.get("MLFLOW_UI_URL", "http://127.0.0.1:5000").rstrip("/")


def secret_values() -> list[str]:
    """The values of secret-named variables (…_API_KEY, …_TOKEN …) and the secrets inside every variable
    that holds a URL (the password of $MLFLOW_TRACKING_URI, $CELERY_BROKER_URL ..., a `?token=` value):
    redacted from whatever is printed or stored."""
    from rag_core.common.redaction import url_secrets

    named = [v for k, v in os.environ.items() if any(n in k.upper() for n in SECRET_NAMES)]
    return named + [s for v in os.environ.values() if "://" in v for s in url_secrets(v)]


_GIVEN_SECRETS: set[str] = set()  # the secrets of URLs given on the command line (hide_secrets_of)


def hide_secrets_of(values: list[str]) -> None:
    """The secrets inside URLs given on the command line (a data dir `s3://user:password@...?token=...`, also
    inside `--opt=URL`): redacted from whatever this process prints or stores, as the environment's are. An
    `s3://` URL's user-info is a secret whole (S3 has no user names: `s3://TOKEN@bucket` is a credential)."""
    import re

    from rag_core.common.redaction import url_secrets

    for value in values:
        for url in re.findall(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>`]+", value):
            _GIVEN_SECRETS.update(url_secrets(url))
            if url[:5].lower() == "s3://" and "@" in (netloc := url[5:].split("/", 1)[0]):
                _GIVEN_SECRETS.update(p for p in netloc.rsplit("@", 1)[0].split(":") if p)


def redact(text: str, *secrets: str | None) -> str:
    """`text` (a message, a traceback, a log line) with every URL's password and secret query values, every
    given secret and every secret the environment holds (secret_values) replaced by ***: a provider error
    that echoes the key, or a client's that names its server's URL, must not reach an artifact or a log."""
    from rag_core.common.redaction import redact_urls

    text = redact_urls(text)
    values = [*secrets, *secret_values(), *_GIVEN_SECRETS]
    for value in sorted({v for v in values if v and len(v) >= 6}, key=len, reverse=True):
        text = text.replace(value, "***")
    return text


def env_number(name: str, default, cast, positive: bool = False):
    """A finite non-negative number from the environment (above zero if `positive`: a timeout of 0 fails
    every call), or a one-line error naming the variable."""
    import math

    from rag_core.planning.spec import SpecError

    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = cast(raw)
    except ValueError:
        value = -1
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        kind = "positive" if positive else "non-negative"
        raise SpecError(f"${name}={raw!r}: expected a finite {kind} {cast.__name__}")
    return value


MIN_REQUESTS_PER_MINUTE = 1.0  # slower, a sweep's calls would take days, each one waited for in silence


def llm_requests_per_minute() -> float | None:
    """$RAG_LLM_REQUESTS_PER_MINUTE, the provider's quota: None (unset or 0) for no limit; a rate below
    one request per minute is a one-line error naming the variable (0.001 waited ~17 hours a call)."""
    from rag_core.planning.spec import SpecError

    rate = env_number("RAG_LLM_REQUESTS_PER_MINUTE", 0.0, float)
    if 0 < rate < MIN_REQUESTS_PER_MINUTE:
        raise SpecError(
            f"$RAG_LLM_REQUESTS_PER_MINUTE={os.environ['RAG_LLM_REQUESTS_PER_MINUTE']!r}: one call every "
            f"{60 / rate:,.0f} s; set at least {MIN_REQUESTS_PER_MINUTE:g} request per minute, or 0 for no limit"
        )
    return rate or None


def device_setting() -> str:
    """Where the local models (embedders, cross-encoders) run, $RAG_DEVICE: `auto` (the default: the first
    CUDA device when there is one, else the CPU), `cpu`, `cuda` or `cuda:N` (resources/devices.py)."""
    import re

    from rag_core.planning.spec import SpecError

    value = (os.environ.get("RAG_DEVICE") or "auto").strip().lower()
    if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", value):
        raise SpecError(f"$RAG_DEVICE={value!r}: expected auto, cpu, cuda or cuda:N (N a device number)")
    return value


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    """One of `choices` from the environment, or a one-line error naming the variable."""
    from rag_core.planning.spec import SpecError

    value = os.environ.get(name) or default
    if value not in choices:
        raise SpecError(f"${name}={value!r}: expected one of {', '.join(choices)}")
    return value
