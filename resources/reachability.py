"""The servers the environment names (MLflow, the S3 endpoint, PostgreSQL, the Celery broker), each tried
with one TCP connection before a command's work: one that takes none is a one-line error naming it (no
password) and the variables that set it, within $RAG_CONNECT_TIMEOUT_S (default 10 s) for all of them
together, not the minutes of retries each client would spend, then a traceback."""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass
from urllib.parse import urlsplit

from resources import environment
from resources.environment import Unreachable

DEFAULT_PORTS = {"http": 80, "https": 443, "amqp": 5672, "amqps": 5671, "redis": 6379, "rediss": 6379}


@dataclass(frozen=True)
class Server:
    what: str  # "MLflow at http://host:5000", as an error may show it
    variables: str  # "$MLFLOW_TRACKING_URI"
    host: str
    port: int
    advice: str  # what to do about it


MAX_CONNECT_TIMEOUT_S = 3600.0  # longer is a mistake (a threading timeout past ~1e9 s overflows)


def connect_timeout_s() -> float:
    """How long all the servers together are waited for ($RAG_CONNECT_TIMEOUT_S, default 10 s, at most an
    hour)."""
    from rag_core.planning.spec import SpecError

    value = environment.env_number("RAG_CONNECT_TIMEOUT_S", 10.0, float, positive=True)
    if value > MAX_CONNECT_TIMEOUT_S:
        raise SpecError(
            f"$RAG_CONNECT_TIMEOUT_S={value:g}: at most {MAX_CONNECT_TIMEOUT_S:g} s (an hour) is waited for a "
            "server to answer; set a smaller one"
        )
    return value


def _valid_url(url: str, variable: str) -> None:
    """A URL a variable (or option) gives that Python cannot parse (`http://[::1` , a port that is no number)
    is a one-line error naming the variable, not a library's traceback."""
    from rag_core.common.redaction import redact_url
    from rag_core.planning.spec import SpecError

    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises for a port that is no number or out of range
    except ValueError as e:
        raise SpecError(
            f"{variable}={environment.redact(redact_url(url))!r}: not a valid URL ({e})"
        ) from None


def tracking_driver_check(uri: str | None = None, variable: str = "$MLFLOW_TRACKING_URI") -> None:
    """A database tracking URI whose SQLAlchemy driver is not installed: `postgresql://` means psycopg 3,
    which the project does not install (psycopg2 is: `postgresql+psycopg2://`). Said in one line, before a
    library's ModuleNotFoundError."""
    import importlib.util

    from rag_core.planning.spec import SpecError

    uri = uri or environment.mlflow_tracking_uri()
    if not uri or "://" not in uri:
        return
    scheme = uri.split("://", 1)[0].lower()
    needs = {"postgresql": "psycopg", "postgres": "psycopg", "postgresql+psycopg": "psycopg",
             "postgresql+psycopg2": "psycopg2", "mysql": "MySQLdb", "mysql+pymysql": "pymysql"}.get(scheme)  # fmt: skip
    if needs and importlib.util.find_spec(needs) is None:
        hint = (
            "; write postgresql+psycopg2:// (installed) instead"
            if scheme.startswith("postgres") and needs == "psycopg"
            else ""
        )
        raise SpecError(
            f"{variable}: {scheme}:// needs the Python driver {needs}, which is not installed{hint}"
        )


def _address(url: str) -> tuple[str, int]:
    """(host, port) of a URL; a ValueError for a port that is no number or no host."""
    parts = urlsplit(url)
    port = parts.port or DEFAULT_PORTS.get(parts.scheme.lower())
    if not parts.hostname or port is None:
        raise ValueError(f"no host and port in {parts.scheme}:// URL")
    return parts.hostname, port


def _shown(url: str) -> str:
    """A URL as an error shows it: no user-info, its secrets redacted."""
    parts = urlsplit(url)
    if "@" in parts.netloc:
        parts = parts._replace(netloc=parts.netloc.rsplit("@", 1)[1])
    return environment.redact(parts.geturl())


def mlflow_server(uri: str | None = None) -> Server | None:
    """The MLflow server of `uri` (a command's --tracking-uri), else of $MLFLOW_TRACKING_URI."""
    variable = "--tracking-uri" if uri else "$MLFLOW_TRACKING_URI"
    uri = uri or environment.mlflow_tracking_uri()
    if not uri:
        return None
    if "://" in uri:
        _valid_url(uri, variable)
    tracking_driver_check(uri, variable)
    if not uri.startswith(("http://", "https://")):
        return None
    return _server(
        f"MLflow at {_shown(uri)}",
        variable,
        uri,
        f"start it, or set {variable} to its address (unset: a SQLite store in the data dir)",
    )


def s3_server() -> Server | None:
    endpoint, _ = environment.s3_settings()
    if not endpoint:  # AWS itself
        return None
    _valid_url(endpoint, "$AWS_ENDPOINT_URL")
    return _server(
        f"the S3 endpoint {_shown(endpoint)}",
        "$AWS_ENDPOINT_URL",
        endpoint,
        "start it, or set $AWS_ENDPOINT_URL to its address",
    )


def database_server() -> Server | None:
    if not environment.shared_database_url():
        return None
    host, _, port = environment.shared_database_address().rpartition(":")
    return Server(
        f"PostgreSQL at {host}:{port}",
        "the deployment's database, set by $DAGSTER_PG_HOST, $DAGSTER_PG_PORT, $DAGSTER_PG_USER, "
        "$DAGSTER_PG_PASSWORD, $DAGSTER_PG_DB",
        host,
        int(port) if port.isdigit() else -1,
        "start it or fix those variables",
    )


def broker_server() -> Server | None:
    url = environment.celery_broker_url()
    if not url or environment.text("RAG_EXECUTOR", "in_process") != "celery":
        return None
    _valid_url(url, "$CELERY_BROKER_URL")
    return _server(
        f"the Celery broker at {_shown(url)}",
        "$CELERY_BROKER_URL",
        url,
        "start it, or set $CELERY_BROKER_URL to its address",
    )


def _server(what: str, variables: str, url: str, advice: str) -> Server:
    try:
        host, port = _address(url)
    except ValueError:
        host, port = "", -1  # said by check(): a port that is no number
    return Server(what, variables, host, port, advice)


def _reason(server: Server, deadline: float) -> str | None:
    """Why `server` takes no connection, or None when it takes one."""
    if not server.host or not 0 < server.port < 65536:
        return "no host and port in it"
    try:
        socket.create_connection((server.host, server.port), timeout=deadline).close()
    except OSError as e:  # refused, no such host, timed out
        return getattr(e, "strerror", None) or str(e) or type(e).__name__
    return None


def check(servers: list[Server | None]) -> None:
    """Each of `servers` (None: not configured) tried at once, in threads of their own: the first that
    takes no connection, in the given order, is an Unreachable naming it. A name lookup that hangs is not
    waited for past the timeout (its daemon thread is left to end by itself)."""
    servers = [s for s in servers if s is not None]
    if not servers:
        return
    timeout = connect_timeout_s()
    reasons: dict[int, str | None] = {}

    def probe(i: int, server: Server) -> None:
        reasons[i] = _reason(server, timeout)

    threads = [threading.Thread(target=probe, args=(i, s), daemon=True) for i, s in enumerate(servers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)  # all started together: at most about `timeout` in all
    for i, server in enumerate(servers):
        reason = reasons.get(i, f"no answer within {timeout:g} s ($RAG_CONNECT_TIMEOUT_S)")
        if reason is not None:
            raise Unreachable(
                f"{server.what} ({server.variables}) cannot be reached ({environment.redact(reason)}): "
                f"{server.advice}"
            )


def check_all(data_dir_remote: bool, runs_steps: bool, tracking_uri: str | None = None) -> None:
    """Every server a command may use: MLflow (`tracking_uri`, else $MLFLOW_TRACKING_URI's), the database,
    the S3 endpoint where the data dir is on object storage, the broker where the command runs steps on
    the fleet."""
    connect_timeout_s()  # a bad value is said whether or not a server is named
    check(
        [
            mlflow_server(tracking_uri),
            s3_server() if data_dir_remote else None,
            database_server(),
            broker_server() if runs_steps else None,
        ]
    )
