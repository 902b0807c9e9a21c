"""Every environment variable the project reads, in one module: the deployment's settings (data dir, vector
store, LLM endpoint, servers, limits) and the process defaults set before litellm and MLflow are imported.

Anything else asks these functions; a bad value is a one-line error naming the variable.
"""

from __future__ import annotations

import os
from pathlib import Path

# Process defaults, set once before litellm, MLflow or Dagster are imported: litellm fetches a remote cost
# map at import and deadlocks with mlflow without the first (shared/notes/stack.md); no telemetry; the
# embedding models are read from the local cache only; no URL printed by MLflow.
# the tokenizer's threads are off by default (a process that forks after using them is warned at, and a CPU's
# cores are the model's); a GPU encoder turns them on unless the user chose (resources/gpu_encoders.py)
TOKENIZER_THREADS_CHOSEN = "TOKENIZERS_PARALLELISM" in os.environ
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
    os.environ.setdefault(_name, _value)

SECRET_NAMES = ("KEY", "TOKEN", "SECRET", "PASSWORD")


class Unreachable(RuntimeError):
    """A server the environment names (MLflow, PostgreSQL) cannot be connected to: one line naming where
    (no password) and the variables that set it, before any work."""


def text(name: str, default: str | None = None) -> str | None:
    """A variable's value; unset or empty: `default`."""
    return os.environ.get(name) or default


def is_set(name: str) -> bool:
    return bool(os.environ.get(name))


def default_data_dir() -> str:
    return os.environ.get("RAG_DATA_DIR", str(Path.cwd() / ".rag_data"))


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
    """The secrets inside URLs given on the command line (a data dir `s3://user:password@...?token=...`):
    redacted from whatever this process prints or stores, as the environment's are."""
    from rag_core.common.redaction import url_secrets

    _GIVEN_SECRETS.update(s for v in values if "://" in v for s in url_secrets(v))


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
