"""Credentials never leave in a URL: redact_url, and the redaction of free text (resources/environment.py)."""

from __future__ import annotations

from urllib.parse import quote, urlencode, urlunsplit

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rag_core.common.redaction import is_secret_param, redact_url, redact_urls, url_secrets
from resources.environment import redact


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
