"""The one place the project reaches into MLflow's private or internal names, as resources/dagster_private.py
is for Dagster. Nothing else may (tests/test_mlflow_private.py greps the product), and each name here is
checked there against the MLflow installed, so a release that moves or changes one fails there first.

| name | used by | why no public form |
|---|---|---|
| `parse_model_uri` (`mlflow.store.artifact.utils.models._parse_model_uri`) | resources/shipping/pipeline.py | Tells a registered version's URI (`models:/NAME@alias`, `models:/NAME/N`) from a logged model's (`models:/m-<id>`); MLflow resolves both but exports no parser. |
| `get_model_name_and_version` (`mlflow.store.artifact.utils.models`) | resources/shipping/pipeline.py | The version an alias or a number names, as `mlflow.pyfunc.load_model` resolves it (an internal module). |
| `SqlAlchemyStore` (`mlflow.store.tracking.sqlalchemy_store`) | resources/tracking.py | Builds an empty SQLite store once (the schema migrations) to copy for each new data dir. |
| `client_stores(client)` (`MlflowClient._tracking_client.store`, `._get_registry_client().store`) | resources/tracking.py | The SQLAlchemy engines MLflow pools per store URI for the process: disposed when the SQLite file they write was replaced, else they write into the deleted file. MLflow has no public way to reset them. |
"""

from __future__ import annotations


def parse_model_uri(uri: str):
    from mlflow.store.artifact.utils.models import _parse_model_uri

    return _parse_model_uri(uri)


def get_model_name_and_version(client, uri: str):
    from mlflow.store.artifact.utils.models import get_model_name_and_version as resolve

    return resolve(client, uri)


def sqlalchemy_store():
    """MLflow's SQLAlchemy tracking store class."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    return SqlAlchemyStore


def client_stores(client) -> tuple:
    """The tracking and the registry store an `MlflowClient` talks to."""
    return client._tracking_client.store, client._get_registry_client().store
