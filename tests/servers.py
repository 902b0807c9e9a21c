"""Real servers for the tests, started as plain processes on free loopback ports.

- Weaviate: the binary built by scripts/ensure_servers.sh ($WEAVIATE_BIN), or $WEAVIATE_URL if set.
- PostgreSQL: initdb + pg_ctl in a temp dir ($PG_BINDIR); as root it runs as the `postgres` user.
- MLflow: `mlflow server` with a PostgreSQL backend store and a local artifact root.
- S3: an S3-compatible server (gofakes3, built by scripts/ensure_servers.sh: $S3_SERVER_BIN) storing its
  buckets in a temp dir, with one bucket `rag`.
- RabbitMQ: Debian's rabbitmq-server ($RABBITMQ_SERVER_BIN) as a plain process with its own node name,
  ports and files in a temp dir: the fleet's broker.
- A Celery worker of the fleet (`celery -A rag_sweep.fleet.celery_app worker`) in an empty working directory.
- A Dagster deployment: the webserver and the daemon on a PostgreSQL instance (`deployment`).
- An LLM: llama.cpp's server with the packaged Gemma 3 270M (the local-llm extra, resources/local_llm.py),
  and a proxy that records what it answered (`RecordingProxy`).
Each start measures its own start-up time (printed in the test log).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_port_pair() -> int:
    """A port p such that p and p + 1 are both free (Weaviate wants gossip/data and raft/rpc adjacent)."""
    for _ in range(100):
        p = free_port()
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", p + 1))
                return p
            except OSError:
                continue
    raise RuntimeError("no adjacent free ports")


def wait_http(
    url: str, timeout: float, proc: subprocess.Popen | None = None, log: Path | None = None
) -> float:
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(
                f"server exited with {proc.returncode}: {log.read_text()[-2000:] if log else ''}"
            )
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return time.perf_counter() - t0
        except OSError:
            pass
        time.sleep(0.3)
    raise TimeoutError(f"{url} not ready after {timeout} s: {log.read_text()[-2000:] if log else ''}")


def graphql(url: str, query: str, variables: dict) -> dict:
    """A query to the Dagster webserver's GraphQL API, as the UI sends it: its data (errors fail)."""
    req = urllib.request.Request(
        f"{url}/graphql",
        data=json.dumps({"query": query, "variables": variables}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=60) as r:
        body = json.loads(r.read())
    assert "errors" not in body, body["errors"]
    return body["data"]


LIVE: list = []  # servers started and not stopped yet, newest last


def _live(server):
    LIVE.append(server)
    return server


def stop_all() -> None:
    """Stop every server still running (newest first), e.g. when pytest gets SIGTERM."""
    while LIVE:
        server = LIVE.pop()
        try:
            server.stop()
        except Exception:  # keep stopping the others
            pass


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@dataclass
class Weaviate:
    url: str
    grpc_port: int
    startup_s: float = 0.0
    proc: subprocess.Popen | None = None
    tmp: Path | None = None

    @classmethod
    def start(cls) -> Weaviate:
        if os.environ.get("WEAVIATE_URL"):
            return cls(
                url=os.environ["WEAVIATE_URL"], grpc_port=int(os.environ.get("WEAVIATE_GRPC_PORT", "50051"))
            )
        binary = os.environ.get("WEAVIATE_BIN") or str(
            Path.home() / ".cache" / "rag-sweep" / "weaviate-v1.35.2" / "weaviate-server"
        )
        if not Path(binary).exists():
            raise RuntimeError(f"no Weaviate binary at {binary}: run scripts/ensure_servers.sh")
        tmp = Path(tempfile.mkdtemp(prefix="weaviate-"))
        http, grpc, gossip, raft = free_port(), free_port(), free_port_pair(), free_port_pair()
        data, rpc = gossip + 1, raft + 1
        env = {
            **os.environ,
            "PERSISTENCE_DATA_PATH": str(tmp / "data"),
            "AUTHENTICATION_ANONYMOUS_ACCESS_ENABLED": "true",
            "DEFAULT_VECTORIZER_MODULE": "none",
            "ENABLE_MODULES": "",
            "DISABLE_TELEMETRY": "true",
            "LOG_LEVEL": "warning",
            "CLUSTER_HOSTNAME": "node1",
            "CLUSTER_IN_LOCALHOST": "true",
            "CLUSTER_ADVERTISE_ADDR": "127.0.0.1",
            "CLUSTER_BIND_ADDR": "127.0.0.1",
            "CLUSTER_GOSSIP_BIND_PORT": str(gossip),
            "CLUSTER_DATA_BIND_PORT": str(data),
            "GRPC_PORT": str(grpc),
            "RAFT_PORT": str(raft),
            "RAFT_INTERNAL_RPC_PORT": str(rpc),
            "RAFT_BOOTSTRAP_EXPECT": "1",
            "RAFT_JOIN": f"node1:{raft}",
        }
        log = tmp / "weaviate.log"
        proc = subprocess.Popen(
            [binary, "--host", "127.0.0.1", "--port", str(http), "--scheme", "http"],
            env=env,
            stdout=log.open("w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        url = f"http://127.0.0.1:{http}"
        startup = wait_http(f"{url}/v1/.well-known/ready", 240, proc, log)
        return _live(cls(url=url, grpc_port=grpc, startup_s=startup, proc=proc, tmp=tmp))

    def stop(self) -> None:
        if self in LIVE:
            LIVE.remove(self)
        if self.proc:
            _stop(self.proc)
        if self.tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)


@dataclass
class Postgres:
    port: int
    tmp: Path
    bindir: Path
    startup_s: float = 0.0
    user: str = "rag"
    dbs: list[str] = field(default_factory=list)

    def _as_owner(self, *cmd: str) -> list[str]:
        return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else list(cmd)

    @classmethod
    def start(cls) -> Postgres:
        bindir = Path(os.environ.get("PG_BINDIR") or sorted(Path("/usr/lib/postgresql").glob("*/bin"))[-1])
        tmp = Path(tempfile.mkdtemp(prefix="pg-"))
        pg = cls(port=free_port(), tmp=tmp, bindir=bindir)
        if os.geteuid() == 0:  # initdb refuses root
            shutil.chown(tmp, "postgres")
        t0 = time.perf_counter()
        subprocess.run(
            pg._as_owner(
                str(bindir / "initdb"), "-D", str(tmp / "data"), "-U", pg.user, "--auth=trust", "-E", "UTF8"
            ),
            check=True,
            capture_output=True,
        )
        subprocess.run(
            pg._as_owner(
                str(bindir / "pg_ctl"),
                "-D",
                str(tmp / "data"),
                "-l",
                str(tmp / "pg.log"),
                "-w",
                "start",
                "-o",
                f"-p {pg.port} -k {tmp} -c listen_addresses=127.0.0.1 -c fsync=off",
            ),
            check=True,
            capture_output=True,
        )
        pg.startup_s = time.perf_counter() - t0
        return _live(pg)

    def create_db(self, name: str) -> str:
        subprocess.run(
            [str(self.bindir / "createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", self.user, name],
            check=True,
            capture_output=True,
        )
        self.dbs.append(name)
        return name

    def url(self, db: str) -> str:
        return f"postgresql+psycopg2://{self.user}@127.0.0.1:{self.port}/{db}"

    def stop(self) -> None:
        if self in LIVE:
            LIVE.remove(self)
        subprocess.run(
            self._as_owner(
                str(self.bindir / "pg_ctl"), "-D", str(self.tmp / "data"), "-m", "fast", "-w", "stop"
            ),
            capture_output=True,
        )
        shutil.rmtree(self.tmp, ignore_errors=True)


@dataclass
class Mlflow:
    url: str
    proc: subprocess.Popen
    tmp: Path
    startup_s: float

    @classmethod
    def start(cls, backend_uri: str) -> Mlflow:
        tmp = Path(tempfile.mkdtemp(prefix="mlflow-"))
        port = free_port()
        log = tmp / "mlflow.log"
        env = {
            **os.environ,
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "MLFLOW_DISABLE_TELEMETRY": "true",
            # no job runner: the product starts no MLflow server job, and its seven consumer processes took
            # ~2.6 GB and a steady share of the two cores for the whole suite
            "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
        }
        proc = subprocess.Popen(
            [
                str(Path(sys.executable).parent / "mlflow"),
                "server",
                "--backend-store-uri",
                backend_uri,
                "--artifacts-destination",
                (tmp / "artifacts").as_uri(),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--workers",
                "1",
            ],
            env=env,
            stdout=log.open("w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        url = f"http://127.0.0.1:{port}"
        startup = wait_http(f"{url}/health", 300, proc, log)
        return _live(cls(url=url, proc=proc, tmp=tmp, startup_s=startup))

    def stop(self) -> None:
        if self in LIVE:
            LIVE.remove(self)
        _stop(self.proc)
        shutil.rmtree(self.tmp, ignore_errors=True)


@dataclass
class S3Server:
    endpoint: str
    proc: subprocess.Popen
    tmp: Path
    startup_s: float
    bucket: str = "rag"
    key_id: str = "rag-sweep-test"
    secret: str = "s3-secret-0123456789abcdef"  # must never be written into what a run stores

    @classmethod
    def start(cls) -> S3Server:
        binary = os.environ.get("S3_SERVER_BIN") or str(
            Path.home() / ".cache/rag-sweep/gofakes3-v1.2.0/gofakes3"
        )
        if not Path(binary).exists():
            raise RuntimeError(f"no S3 server binary at {binary}: run scripts/ensure_servers.sh")
        tmp = Path(tempfile.mkdtemp(prefix="s3-"))
        port = free_port()
        log = tmp / "s3.log"
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            [
                binary,
                "-backend",
                "fs",
                "-fs.path",
                str(tmp / "buckets"),
                "-fs.create",
                "-host",
                f"127.0.0.1:{port}",
                "-initialbucket",
                "rag",
            ],
            stdout=log.open("w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        endpoint = f"http://127.0.0.1:{port}"
        wait_http(f"{endpoint}/rag", 30, proc, log)
        return _live(cls(endpoint=endpoint, proc=proc, tmp=tmp, startup_s=time.perf_counter() - t0))

    def env(self) -> dict[str, str]:
        """The standard AWS variables a client of this server needs."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.key_id,
            "AWS_SECRET_ACCESS_KEY": self.secret,
            "AWS_REGION": "us-east-1",
        }

    def stop(self) -> None:
        if self in LIVE:
            LIVE.remove(self)
        _stop(self.proc)
        shutil.rmtree(self.tmp, ignore_errors=True)


@contextmanager
def mlflow_tracking(url: str):
    """Point MLflow's fluent API at `url` for a block, then restore it (set_tracking_uri also sets the
    MLFLOW_TRACKING_URI variable, which would leak into later tests)."""
    import mlflow

    old = os.environ.get("MLFLOW_TRACKING_URI")
    mlflow.set_tracking_uri(url)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("MLFLOW_TRACKING_URI", None)
            mlflow.set_tracking_uri(None)
        else:
            mlflow.set_tracking_uri(old)


def wait_tcp(port: int, timeout: float, proc: subprocess.Popen, log: Path) -> float:
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}: {log.read_text()[-2000:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return time.perf_counter() - t0
        time.sleep(0.3)
    raise TimeoutError(f"port {port} not open after {timeout} s: {log.read_text()[-2000:]}")


@dataclass
class RabbitMQ:
    port: int
    proc: subprocess.Popen
    tmp: Path
    startup_s: float

    @classmethod
    def start(cls) -> RabbitMQ:
        binary = os.environ.get("RABBITMQ_SERVER_BIN") or "/usr/lib/rabbitmq/bin/rabbitmq-server"
        if not Path(binary).exists():
            raise RuntimeError(f"no RabbitMQ at {binary}: run scripts/ensure_servers.sh")
        tmp = Path(tempfile.mkdtemp(prefix="rabbitmq-"))
        port, dist = free_port(), free_port()
        (tmp / "enabled_plugins").write_text("[].")
        (tmp / "rabbitmq.conf").write_text("loopback_users = none\n")
        env = {
            **os.environ,
            "RABBITMQ_NODENAME": f"rag{port}@localhost",
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(port),
            "RABBITMQ_DIST_PORT": str(dist),
            "RABBITMQ_MNESIA_BASE": str(tmp / "mnesia"),
            "RABBITMQ_LOG_BASE": str(tmp / "log"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(tmp / "enabled_plugins"),
            "RABBITMQ_CONFIG_FILE": str(tmp / "rabbitmq"),  # its base name: .conf is added
        }
        log = tmp / "rabbitmq.out"
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            [binary], env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True
        )
        wait_tcp(port, 120, proc, log)
        return _live(cls(port=port, proc=proc, tmp=tmp, startup_s=time.perf_counter() - t0))

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}//"

    def stop(self) -> None:
        if self in LIVE:
            LIVE.remove(self)
        _stop(self.proc)
        shutil.rmtree(self.tmp, ignore_errors=True)


@dataclass
class CeleryWorker:
    """One fleet worker: its own process group (killed whole, as a lost machine), an empty working directory
    and only the environment given (the broker, the deployment's servers, the data dir's URI)."""

    name: str
    queues: str
    proc: subprocess.Popen
    cwd: Path
    log: Path

    @classmethod
    def start(cls, name: str, queues: str, env: dict[str, str], where: Path) -> CeleryWorker:
        cwd = where / f"worker-{name}"
        cwd.mkdir()
        log = where / f"worker-{name}.log"
        proc = subprocess.Popen(
            [
                str(Path(sys.executable).parent / "celery"),
                "-A",
                "rag_sweep.fleet.celery_app",
                "worker",
                "-Q",
                queues,
                "-c",
                "1",
                "-n",
                f"{name}@%h",
                "--without-gossip",
                "--without-mingle",
                "-l",
                "INFO",
            ],
            cwd=cwd,
            env=env,
            stdout=log.open("w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        worker = _live(cls(name=name, queues=queues, proc=proc, cwd=cwd, log=log))
        t0 = time.perf_counter()
        while "ready." not in log.read_text():
            if proc.poll() is not None or time.perf_counter() - t0 > 120:
                worker.stop()
                raise RuntimeError(f"worker {name} did not start: {log.read_text()[-3000:]}")
            time.sleep(0.3)
        return worker

    def kill(self) -> None:
        """SIGKILL the worker and its child: as a machine that is gone, nothing is handed back."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self in LIVE:
            LIVE.remove(self)
        _stop(self.proc)


def fleet_servers() -> dict:
    """The servers a fleet shares, started (stopped by `stop_all`): PostgreSQL (`pg`), the S3 server (`s3`),
    RabbitMQ (`broker`) and an MLflow server on PostgreSQL (`mlflow`)."""
    pg = Postgres.start()
    servers = {"pg": pg, "s3": S3Server.start(), "broker": RabbitMQ.start()}
    servers["mlflow"] = Mlflow.start(pg.url(pg.create_db("mlflow")))
    return servers


def fleet_instance(label: str, servers: dict, tmp: Path) -> tuple[dict[str, str], Path]:
    """A fresh Dagster database and home on the shared servers: the environment a runner and its workers
    share (S3, PostgreSQL, the MLflow server, the broker) and the runner's DAGSTER_HOME."""
    pg, s3 = servers["pg"], servers["s3"]
    db = pg.create_db(f"fleet_{label}")
    home = tmp / f"home-{label}"
    home.mkdir()
    (home / "dagster.yaml").write_text(
        (ROOT / "deploy" / "dagster.yaml").read_text()
        + "\ncompute_logs:\n  module: resources.dagster_private\n"
        "  class: NoOpComputeLogManager\n"
    )
    shared = {
        **s3.env(),
        "DAGSTER_PG_HOST": "127.0.0.1",
        "DAGSTER_PG_PORT": str(pg.port),
        "DAGSTER_PG_USER": pg.user,
        "DAGSTER_PG_PASSWORD": "unused",
        "DAGSTER_PG_DB": db,
        "MLFLOW_TRACKING_URI": servers["mlflow"].url,
        "CELERY_BROKER_URL": servers["broker"].url,
    }
    return shared, home


def deployment_env() -> dict[str, str]:
    """The environment docker-compose.yml gives every container of the deployment (`x-rag-env`)."""
    import yaml

    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())["x-rag-env"]


class Deployment:
    """The webserver and the daemon of a deployment whose instance lives in PostgreSQL, on one sweep file
    (`$RAG_SWEEP`). `env` adds to or overrides the deployment's environment (an MLflow server, a fleet);
    `instance_yaml` is appended to deploy/dagster.yaml."""

    def __init__(
        self,
        tmp: Path,
        spec: Path,
        data,
        postgres: Postgres,
        env: dict | None = None,
        instance_yaml: str = "",
    ):
        self.tmp = tmp
        self.home = tmp / "dagster_home"
        self.home.mkdir(parents=True)
        # the deployment's instance, its run monitoring looking every 5 s (its start timeout as in deploy/:
        # a run worker the code server spawns imports everything first, minutes on a loaded machine)
        instance = (ROOT / "deploy" / "dagster.yaml").read_text()
        instance = instance.replace("poll_interval_seconds: 30", "poll_interval_seconds: 5")
        assert "poll_interval_seconds: 5" in instance
        (self.home / "dagster.yaml").write_text(instance + instance_yaml)
        self.env = {
            **os.environ,
            "DAGSTER_HOME": str(self.home),
            "DAGSTER_PG_HOST": "127.0.0.1",
            "DAGSTER_PG_PORT": str(postgres.port),
            "DAGSTER_PG_USER": postgres.user,
            "DAGSTER_PG_PASSWORD": "unused",
            "DAGSTER_PG_DB": postgres.create_db(f"dagster_{tmp.name[-20:]}".replace("-", "_").lower()),
            "RAG_SWEEP": str(spec),
            "RAG_DATA_DIR": str(data),
            "RAG_VECTOR_STORE": "lancedb",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "DAGSTER_DISABLE_TELEMETRY": "1",
            # the deployment's launch deadline (a run worker's start on a busy machine), as docker-compose's
            "DAGSTER_GRPC_TIMEOUT_SECONDS": deployment_env()["DAGSTER_GRPC_TIMEOUT_SECONDS"],
            **(env or {}),
        }
        self._bin = Path(sys.executable).parent
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.webserver = self._start(
            "webserver", "dagster-webserver", "-h", "127.0.0.1", "-p", str(self.port)
        )
        self.daemon = self.start_daemon()

    def _start(self, name: str, exe: str, *args: str) -> subprocess.Popen:
        log = (self.tmp / f"{name}.log").open("a")
        return subprocess.Popen(
            [str(self._bin / exe), *args, "-w", "workspace.yaml"],
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def start_daemon(self) -> subprocess.Popen:
        return self._start("daemon", "dagster-daemon", "run")

    def instance(self):
        import dagster as dg

        keys = [k for k in self.env if k.startswith("DAGSTER_PG_")]
        saved = {k: os.environ.get(k) for k in keys}
        os.environ.update({k: self.env[k] for k in keys})
        try:
            return dg.DagsterInstance.from_config(str(self.home))
        finally:
            for k, v in saved.items():
                os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)

    def log(self, name: str) -> str:
        return (self.tmp / f"{name}.log").read_text()[-4000:]

    def launch_backfill(self, assets: list[list[str]], title: str = "backfill") -> str:
        """A backfill of every partition of `assets` (asset key paths), as the UI's "Materialize all"."""
        launched = graphql(
            self.url,
            LAUNCH_BACKFILL,
            {
                "params": {
                    "assetSelection": [{"path": p} for p in assets],
                    "allPartitions": True,
                    "title": title,
                }
            },
        )["launchPartitionBackfill"]
        assert launched["__typename"] == "LaunchBackfillSuccess", launched
        return launched["backfillId"]

    def launch_run(self, job: str, run_config: dict | None = None) -> str:
        """A run of the code location's job `job`, as the UI's Launchpad launches it; its run id."""
        params = {
            "selector": {
                "repositoryLocationName": "rag_sweep",
                "repositoryName": "__repository__",
                "jobName": job,
            },
            **({"runConfigData": run_config} if run_config else {}),
        }
        launched = graphql(self.url, LAUNCH_RUN, {"params": params})["launchRun"]
        assert launched["__typename"] == "LaunchRunSuccess", launched
        return launched["run"]["runId"]

    def stop(self) -> None:
        for p in (self.webserver, self.daemon):
            _stop(p)


LAUNCH_RUN = """
mutation($params: ExecutionParams!) {
  launchRun(executionParams: $params) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on PythonError { message stack }
    ... on RunConfigValidationInvalid { errors { message } }
  }
}"""

LAUNCH_BACKFILL = """
mutation($params: LaunchBackfillParams!) {
  launchPartitionBackfill(backfillParams: $params) {
    __typename
    ... on LaunchBackfillSuccess { backfillId }
    ... on PythonError { message stack }
  }
}"""


@contextmanager
def deployment(
    tmp: Path, spec: Path, data, postgres: Postgres, env: dict | None = None, instance_yaml: str = ""
):
    d = Deployment(tmp, spec, data, postgres, env, instance_yaml)
    try:
        wait_http(f"{d.url}/server_info", 300, d.webserver, tmp / "webserver.log")
        yield d
    finally:
        d.stop()


def local_llm(**settings):
    """llama.cpp's server with the packaged model (resources/local_llm.py), started and stopped by `stop_all`
    too; the test is skipped where the local-llm extra is not installed (nothing else skips it)."""
    import pytest

    from rag_core.common.extras import MissingExtra
    from resources.local_llm import LocalLLM

    class LocalLLMServer(LocalLLM):
        def stop(self) -> None:
            if self in LIVE:
                LIVE.remove(self)
            super().stop()

    server = LocalLLMServer(**settings)
    try:
        server.start()
    except MissingExtra as e:
        pytest.skip(str(e))
    return _live(server)


class RecordingProxy:
    """An HTTP proxy in front of an OpenAI-protocol server that keeps every exchange as the server sent
    it, before any client parsed it: the request's body, the reply's status and body (`exchanges`), so a
    test counts what the server answered and compares it with what the product reports."""

    def __init__(self, api_base: str):
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        from threading import Lock, Thread
        from urllib.parse import urlsplit

        self.upstream = "http://" + urlsplit(api_base).netloc  # the proxy's paths are the server's
        self.exchanges: list[dict] = []
        lock, proxy = Lock(), self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output clean
                pass

            def do_POST(self):
                data = self.rfile.read(int(self.headers["Content-Length"]))
                request = urllib.request.Request(
                    proxy.upstream + self.path,
                    data=data,
                    headers={
                        "Content-Type": "application/json",
                        "Authorization": self.headers.get("Authorization", ""),
                    },
                    method="POST",
                )
                t0 = time.perf_counter()
                try:
                    with urllib.request.urlopen(request, timeout=600) as r:
                        status, body = r.status, r.read()
                except urllib.error.HTTPError as e:
                    status, body = e.code, e.read()
                try:
                    reply = json.loads(body)
                except ValueError:
                    reply = body.decode(errors="replace")
                with lock:
                    proxy.exchanges.append(
                        {
                            "path": self.path,
                            "request": json.loads(data),
                            "status": status,
                            "reply": reply,
                            "seconds": time.perf_counter() - t0,
                        }
                    )
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = Thread(target=self.server.serve_forever, daemon=True)

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> RecordingProxy:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def prompt_of(exchange: dict) -> str:
    return exchange["request"]["messages"][-1]["content"]


def reply_text(exchange: dict) -> str | None:
    """The completion's text as the server sent it; None for an error status or a body off the protocol."""
    try:
        return exchange["reply"]["choices"][0]["message"]["content"] if exchange["status"] == 200 else None
    except (KeyError, IndexError, TypeError):
        return None
