"""Credentials never leave in a URL: redact_url, and the redaction of free text (resources/environment.py)."""

from __future__ import annotations

import os
from urllib.parse import quote, urlencode, urlunsplit

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rag_core.common.redaction import is_secret_param, redact_url, redact_urls, url_secrets
from resources.environment import redact
from tests.conftest import ROOT


@pytest.mark.parametrize(
    "url, redacted",
    [
        ("http://user:PASSWORD@host:5000", "http://user:***@host:5000"),
        ("http://user:PASSWORD@host:5000/", "http://user:***@host:5000/"),
        ("https://u:p%40ss%2Fw@mlflow.example.com/path", "https://u:***@mlflow.example.com/path"),
        ("amqp://guest:s3cret@rabbitmq:5672//", "amqp://guest:***@rabbitmq:5672//"),
        ("postgresql://postgres:pw@db:5432/dagster", "postgresql://postgres:***@db:5432/dagster"),
        ("http://:onlypassword@h:1", "http://:***@h:1"),
        (
            "https://hooks.example.com/x?token=abc&channel=ops",
            "https://hooks.example.com/x?token=***&channel=ops",
        ),
        (
            "https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4&X-Amz-Credential=AK%2F1&X-Amz-Signature=de&X-Amz-Date=1",
            "https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4&X-Amz-Credential=***&X-Amz-Signature=***"
            "&X-Amz-Date=1",
        ),
        (
            "https://a.blob.core.windows.net/c?sv=2020&sig=abc%3D&se=1",
            "https://a.blob.core.windows.net/c?sv=2020&sig=***&se=1",
        ),
        (
            "http://h/?password=p&secret=s&api_key=k&key=k2&access_token=t",
            "http://h/?password=***&secret=***&api_key=***&key=***&access_token=***",
        ),
        ("http://h/#access_token=t&state=1", "http://h/#access_token=***&state=1"),
        # not secrets: MLflow's sort key in its UI link, empty values, a URL without credentials
        (
            "http://127.0.0.1:5000/#/experiments/1/runs?orderByKey=metrics.%60overall_score%60&orderByAsc=false",
            "http://127.0.0.1:5000/#/experiments/1/runs?orderByKey=metrics.%60overall_score%60&orderByAsc=false",
        ),
        (
            "http://127.0.0.1:5000/#/experiments/1/runs?viewStateShareKey=rag-sweep-ranked",
            "http://127.0.0.1:5000/#/experiments/1/runs?viewStateShareKey=rag-sweep-ranked",
        ),
        ("http://h/?token=&a=1", "http://h/?token=&a=1"),
        ("http://user@host:5000/a?b=c", "http://user@host:5000/a?b=c"),
        ("sqlite:////tmp/data/mlflow.db", "sqlite:////tmp/data/mlflow.db"),
        ("http://[::1]:5000/x", "http://[::1]:5000/x"),
        ("http://u:p@[::1]:5000/x", "http://u:***@[::1]:5000/x"),
    ],
)
def test_a_url_keeps_everything_but_its_password_and_secret_parameters(url, redacted):
    assert redact_url(url) == redacted


def test_what_is_not_a_url_passes_as_it_was():
    assert redact_url(None) is None
    assert redact_url("") == ""
    assert redact_url("lancedb") == "lancedb"
    assert redact_url("http://[bad") == "http://[bad"


@pytest.mark.parametrize(
    "name, secret",
    [
        ("token", True),
        ("X-Amz-Security-Token", True),
        ("X-Amz-Signature", True),
        ("sig", True),
        ("Password", True),
        ("client_secret", True),
        ("x-api-key", True),
        ("key", True),
        ("AccessKey", True),
        ("orderByKey", False),
        ("viewStateShareKey", False),
        ("shareKey", True),
        ("partitionKey", False),
        ("sslmode", False),
        ("signal", False),
        ("channel", False),
    ],
)
def test_secret_looking_parameter_names(name, secret):
    assert is_secret_param(name) is secret


def test_every_url_in_a_text_is_redacted_the_rest_kept():
    text = (
        "MlflowException: API request to http://user:PASSWORD@127.0.0.1:5000/api/2.0/mlflow/runs/create failed; "
        "retry ('https://s3.local/b?X-Amz-Signature=abc'), broker <amqp://g:pw@rabbit//>. Done."
    )
    assert redact_urls(text) == (
        "MlflowException: API request to http://user:***@127.0.0.1:5000/api/2.0/mlflow/runs/create failed; "
        "retry ('https://s3.local/b?X-Amz-Signature=***'), broker <amqp://g:***@rabbit//>. Done."
    )
    assert redact_urls("no url at all: key=value") == "no url at all: key=value"


def test_the_secrets_of_a_url_as_written_and_decoded():
    assert url_secrets("http://u:p%40ss@h/?token=t%2B1&a=b") == ["p%40ss", "p@ss", "t%2B1", "t+1"]
    assert url_secrets("http://h:5000") == url_secrets(None) == []


def test_the_general_redaction_scrubs_urls_and_the_passwords_the_environment_holds(monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://user:hunter2-pw@mlflow:5000")
    monkeypatch.setenv("CELERY_BROKER_URL", "amqp://guest:broker-pw-9@rabbit//")
    monkeypatch.setenv("RAG_LLM_API_KEY", "sk-named-secret")
    text = (
        "ConnectionError(host=mlflow, auth=('user', 'hunter2-pw')) broker-pw-9 sk-named-secret http://a:b@c/"
    )
    assert redact(text) == "ConnectionError(host=mlflow, auth=('user', '***')) *** *** http://a:***@c/"


_part = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=30
)  # any text, percent-encoded into the URL below


@settings(max_examples=300, deadline=None)
@given(
    scheme=st.sampled_from(["http", "https", "amqp", "postgresql", "redis"]),
    user=st.text(st.characters(codec="ascii", categories=("L", "N")), max_size=10),
    password=_part,
    host=st.sampled_from(["127.0.0.1", "mlflow.example.com", "[::1]", "db"]),
    port=st.one_of(st.none(), st.integers(1, 65535)),
    path=st.lists(_part, max_size=3),
    query=st.lists(st.tuples(_part, _part), max_size=3),
    token=_part,
    fragment=st.one_of(st.none(), _part),
)
def test_a_url_built_with_a_password_and_a_token_never_keeps_them(
    scheme, user, password, host, port, path, query, token, fragment
):
    netloc = f"{quote(user, safe='')}:{quote(password, safe='')}@{host}" + (f":{port}" if port else "")
    url = urlunsplit(
        (
            scheme,
            netloc,
            "/" + "/".join(quote(p, safe="") for p in path),
            urlencode([*query, ("token", token)]),
            quote(fragment, safe="") if fragment is not None else "",
        )
    )
    redacted = redact_url(url)
    encoded = {password, quote(password, safe=""), token, urlencode([("t", token)])[2:]}
    assert not any(f":{s}@" in redacted for s in encoded)
    assert f"token={urlencode([('t', token)])[2:]}" not in redacted
    assert redacted.startswith(f"{scheme}://{quote(user, safe='')}:***@{host}")
    assert redacted.endswith("token=***" + (f"#{quote(fragment, safe='')}" if fragment is not None else ""))
    assert redact_urls(f"error at {url} (retrying)") == f"error at {redacted} (retrying)"


# ---- where the product prints or stores a URL ---------------------------------------------------------

PASSWORD = "pw-Secret-0123"
URI = f"http://user:{PASSWORD}@127.0.0.1:1"  # nothing listens on port 1


def test_the_tracking_uri_and_mlflow_links_are_shown_without_the_password(tmp_path):
    from resources.tracking import MlflowTracking

    tracking = MlflowTracking(tracking_uri=URI + "/", default_dir=str(tmp_path))
    assert tracking.display_uri() == "http://user:***@127.0.0.1:1/"
    assert tracking.ui_url() == "http://user:***@127.0.0.1:1"
    assert tracking.resolved_uri() == URI + "/"  # the client itself still authenticates


def test_an_mlflow_error_naming_the_server_keeps_no_password(tmp_path, monkeypatch):
    from mlflow.exceptions import MlflowException

    from resources.tracking import MlflowTracking

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")
    tracking = MlflowTracking(tracking_uri=URI, default_dir=str(tmp_path))
    with pytest.raises(MlflowException) as error:
        tracking.experiment_id("sweep")
    assert "http://user:***@127.0.0.1:1/api/" in str(error.value)
    assert PASSWORD not in str(error.value) and error.value.__cause__ is None


def test_mlflow_prints_no_run_url_in_our_processes():
    import subprocess
    import sys

    code = "import os, resources.environment; print(os.environ['MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT'])"
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT)
    assert out.stdout.strip() == "true", out.stderr


def test_a_failed_alert_names_the_webhook_without_its_token():
    from sensors.alerts import post_json

    with pytest.raises(Exception) as error:
        post_json(f"http://127.0.0.1:1/hook?token={PASSWORD}", {"a": 1}, timeout_s=2)
    with pytest.raises(Exception) as bad:
        post_json(f"hooks.example.com/hook?token={PASSWORD}", {"a": 1}, timeout_s=2)  # no scheme
    for e in (error.value, bad.value):
        assert PASSWORD not in str(e) and e.__cause__ is None
    assert "token=***" in str(bad.value)


def test_an_llm_endpoint_with_a_password_reaches_dagster_as_its_variables_name(tmp_path, monkeypatch):
    import dagster as dg

    from resources import build_resources

    monkeypatch.setenv("RAG_LLM_API_BASE", f"http://user:{PASSWORD}@127.0.0.1:1/v1")
    monkeypatch.setenv("RAG_EMBEDDING_API_BASE", f"http://127.0.0.1:1/v1?api_key={PASSWORD}")
    resources = build_resources(str(tmp_path))
    assert (
        isinstance(resources["llm"].api_base, dg.EnvVar) and resources["llm"].api_base == "RAG_LLM_API_BASE"
    )
    assert resources["embedder"].api_base == "RAG_EMBEDDING_API_BASE"
    monkeypatch.setenv("RAG_LLM_API_BASE", "http://127.0.0.1:1/v1")  # no secret: the value, as before
    assert build_resources(str(tmp_path))["llm"].api_base == "http://127.0.0.1:1/v1"


class _Version:
    version, tags = "3", {"config_key": "k"}


class _Tracking:
    enabled = True

    def __init__(self, uri):
        self.uri = uri

    def client(self):
        class Client:
            def get_model_version_by_alias(self, name, alias):
                return _Version()

        return Client()

    def resolved_uri(self):
        return self.uri

    def display_uri(self):
        return redact_url(self.uri)

    def remembered(self, question, ask):  # nothing remembered: the registry is asked
        return ask()

    def ranked_runs_url(self, experiment):
        return None


def test_the_commands_to_load_and_serve_the_champion_never_print_the_password(capsys):
    from rag_sweep.cli import _print_champion
    from rag_sweep.runner.up_to_date import shipping_facts

    _print_champion(shipping_facts(_Tracking(URI), "sweep"), "sweep", None)
    out = capsys.readouterr().out
    assert PASSWORD not in out
    assert "mlflow.set_tracking_uri(os.environ['MLFLOW_TRACKING_URI'])" in out
    assert 'MLFLOW_TRACKING_URI="$MLFLOW_TRACKING_URI" rag-sweep serve models:/sweep@champion' in out
    assert "http://user:***@127.0.0.1:1 holds a password" in out
    _print_champion(
        shipping_facts(_Tracking("http://127.0.0.1:5000"), "sweep"), "sweep", None
    )  # no password: the URI itself, as before
    out = capsys.readouterr().out
    assert "mlflow.set_tracking_uri('http://127.0.0.1:5000')" in out and "holds a password" not in out


# ---- a real sweep against an MLflow server reached with a password --------------------------------------

SECRETS = {  # one password per variable, so a leak names its source
    "MLFLOW_TRACKING_URI": "mlflowPW-7f3a9c",
    "AWS_ENDPOINT_URL": "s3PW-2b8e41",
    "CELERY_BROKER_URL": "brokerPW-9d0c55",
    "DAGSTER_PG_PASSWORD": "pgPW-4a6f12",
    "WEAVIATE_URL": "weaviatePW-81c3e0",
    "RAG_ALERT_WEBHOOK": "hookPW-5e7d29",
    "RAG_LLM_API_BASE": "llmPW-3f1b86",
}


@pytest.fixture(scope="module")
def credentialed_mlflow(tmp_path_factory):
    """A plain `mlflow server` (SQLite backend): it accepts the Basic auth a URL's user-info sends."""
    from tests.servers import Mlflow

    server = Mlflow.start(f"sqlite:///{tmp_path_factory.mktemp('mlflow-backend') / 'mlflow.db'}")
    yield server
    server.stop()


@pytest.mark.stack
def test_a_sweep_tracked_on_a_server_with_a_password_writes_and_prints_no_secret(
    credentialed_mlflow, slice_data, tmp_path
):
    import subprocess
    import sys

    from mlflow import MlflowClient

    from tests.conftest import write_sweep
    from tests.test_resume import _stored_text

    host = credentialed_mlflow.url.removeprefix("http://")
    env = {
        **os.environ,
        "MLFLOW_TRACKING_URI": f"http://user:{SECRETS['MLFLOW_TRACKING_URI']}@{host}",
        # read by a local sweep, never used by it: they must not be printed or stored either
        "AWS_ENDPOINT_URL": f"http://minio:{SECRETS['AWS_ENDPOINT_URL']}@127.0.0.1:1",
        "CELERY_BROKER_URL": f"amqp://guest:{SECRETS['CELERY_BROKER_URL']}@127.0.0.1:1//",
        "DAGSTER_PG_PASSWORD": SECRETS["DAGSTER_PG_PASSWORD"],  # no DAGSTER_PG_HOST: the embedded instance
        "WEAVIATE_URL": f"http://admin:{SECRETS['WEAVIATE_URL']}@127.0.0.1:1",
        "RAG_ALERT_WEBHOOK": f"https://hooks.example.com/x?token={SECRETS['RAG_ALERT_WEBHOOK']}",
        "RAG_LLM_API_BASE": f"http://user:{SECRETS['RAG_LLM_API_BASE']}@127.0.0.1:1/v1",
    }
    spec = write_sweep(
        tmp_path / "s.yaml",
        slice_data,
        name="secrets",
        chunking=[{"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0}],
        retrieval={"mode": "bm25", "top_k": [2, 4]},
    )
    data = tmp_path / "data"
    r = subprocess.run(
        [sys.executable, "-m", "rag_sweep.cli", "run", str(spec), "--data-dir", str(data)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=900,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    client = MlflowClient(tracking_uri=credentialed_mlflow.url)  # the runs did reach the server
    exp = client.get_experiment_by_name("secrets")
    assert len(client.search_runs([exp.experiment_id], "tags.config_key != ''")) == 2
    assert f"open http://user:***@{host}/#/experiments/{exp.experiment_id}/runs" in r.stdout
    assert "View run" not in r.stdout
    files = [p for p in data.rglob("*") if p.is_file()]
    assert any(p.name == "runs.db" for p in files)
    leaks = {
        name: [str(p) for p in files if any(secret in text for text in _stored_text(p))]
        + [stream for stream, out in (("stdout", r.stdout), ("stderr", r.stderr)) if secret in out]
        for name, secret in SECRETS.items()
    }
    assert {name: where for name, where in leaks.items() if where} == {}
    # the config run's link in Dagster's metadata: there, with the password masked
    stored = "".join(t for p in files if p.name.endswith(".db") for t in _stored_text(p))
    assert f"http://user:***@{host}/#/experiments/{exp.experiment_id}/runs/" in stored


def test_a_weaviate_url_with_a_password_reaches_dagster_as_its_variables_name(tmp_path, monkeypatch):
    from resources.vector_stores import VectorStores

    monkeypatch.setenv("WEAVIATE_URL", f"http://admin:{PASSWORD}@127.0.0.1:1")
    stores = VectorStores.from_env(str(tmp_path))
    assert stores.weaviate_url == "WEAVIATE_URL"
    assert stores.get("weaviate").url == f"http://admin:{PASSWORD}@127.0.0.1:1"  # outside a run too
