"""MLflow tracking with explicit run ids (MlflowClient), one run per config evaluation.

No global fluent run: Dagster runs steps in several processes and a single-run backfill covers many
configs, so each evaluation creates, fills and terminates its own run.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import tempfile
import time
from pathlib import Path

import dagster as dg
import polars as pl

from rag_core.common.redaction import redact_url
from rag_core.decision.qualification import qualified
from resources.environment import mlflow_tracking_uri, mlflow_ui_url, redact, user_cache_dir
from resources.mlflow_private import client_stores
from resources.no_links import refuse_links_in
from resources.storage import is_remote, set_aside_damaged_store, sqlite_damage

_LOG = logging.getLogger(__name__)


@functools.cache
def _cached_client(uri: str):
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=uri)


_SQLITE_FILES: dict[str, tuple[int, int]] = {}  # a SQLite store's file as this process last opened it


def _client_for(uri: str):
    """One client per store and process: each new one set up its store again (~0.1 s, per MLflow call).
    A SQLite store deleted or replaced while this process lives (a user starting MLflow afresh under a
    deployment's code server) is seeded again, and the connections MLflow pools are closed: they would
    otherwise go on writing to the deleted file, and every run logged would be lost to other processes."""
    if not uri.startswith("sqlite:///"):
        return _cached_client(uri)
    db = Path(uri.removeprefix("sqlite:///"))
    seed_sqlite_store(db)
    if db.exists() and _SQLITE_FILES.get(uri) != _file_id(db) and (damage := sqlite_damage(db)):
        # random bytes, a cut-short copy (checked once per file and process): MLflow's own error was a
        # traceback, `file is not a database`
        set_aside_damaged_store(
            db, "MLflow store", damage, "a new store is begun (the runs it held are not in it)", _LOG
        )
        seed_sqlite_store(db)
    if db.exists() and _SQLITE_FILES.get(uri) != _file_id(db):
        reanchor_sqlite_store(db)
    client = _cached_client(uri)
    st = db.stat()
    if _SQLITE_FILES.setdefault(uri, (st.st_dev, st.st_ino)) != (st.st_dev, st.st_ino):
        _SQLITE_FILES[uri] = (st.st_dev, st.st_ino)
        # MLflow keeps one store per URI for the process (its tracking and registry stores): close their pools
        for store in client_stores(client):
            if (engine := getattr(store, "engine", None)) is not None:
                engine.dispose()
    return client


def _file_id(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_dev, st.st_ino


# Where a local store keeps file locations: MLflow writes them absolute (file:///…/mlartifacts/…)
_LOCATIONS = (
    ("experiments", "artifact_location"),
    ("runs", "artifact_uri"),
    ("model_versions", "source"),
    ("model_versions", "storage_location"),
    ("logged_models", "artifact_location"),
)
ARTIFACTS = "/mlartifacts"


def reanchor_sqlite_store(db: Path) -> list[str]:
    """A local store's artifacts live beside it (`<data dir>/mlartifacts`), but MLflow records their
    locations as absolute paths: after the data dir is moved, `models:/…@champion` fails to load (`No such
    artifact`), and a copied data dir silently serves the original's files. Every location under another
    folder's `mlartifacts` is pointed at this store's, once per store file and process, with a warning.
    Returns the earlier roots it replaced."""
    import sqlite3

    here = db.parent.resolve().as_uri() + ARTIFACTS
    con = sqlite3.connect(db, timeout=30)
    try:
        roots = {
            loc[: loc.index(ARTIFACTS) + len(ARTIFACTS)]
            for (loc,) in con.execute("SELECT artifact_location FROM experiments")
            if loc and loc.startswith("file://") and ARTIFACTS in loc
        } - {here}
        if not roots:
            return []
        tables = {name for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        with con:  # one transaction: every location moves, or none
            for old in sorted(roots):
                for table, column in _LOCATIONS:
                    if table in tables:
                        con.execute(
                            f"UPDATE {table} SET {column} = ? || substr({column}, ?) "
                            f"WHERE substr({column}, 1, ?) = ?",
                            (here, len(old) + 1, len(old), old),
                        )
    finally:
        con.close()
    _LOG.warning(
        f"MLflow store {db}: its artifacts were recorded under {', '.join(sorted(roots))} (the data dir was "
        f"moved or copied): every location now points at {here}"
    )
    return sorted(roots)


def seed_sqlite_store(db: Path) -> None:
    """Start a new SQLite store as a copy of an empty one of this MLflow version. MLflow builds a new store
    by running every schema migration since its first (~2.6 s on each new data dir); the empty store they
    produce is the same each time, so it is built once per machine and MLflow version (in the user's cache
    dir) and copied. Nothing happens when the store exists; the copy appears whole or not at all."""
    import shutil
    import sqlite3

    import mlflow

    if db.exists():
        return
    cache = user_cache_dir()
    template = cache / f"mlflow-{mlflow.__version__}-empty.db"
    try:
        if not template.exists():
            from resources.mlflow_private import sqlalchemy_store

            cache.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=cache) as tmp:
                fresh = Path(tmp) / "empty.db"
                sqlalchemy_store()(f"sqlite:///{fresh}", Path(tmp).as_uri()).engine.dispose()
                os.replace(fresh, template)  # whole, or not there: a concurrent builder's is as good
        db.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=db.parent) as tmp:
            copy = Path(tmp) / db.name
            shutil.copyfile(template, copy)
            with sqlite3.connect(copy) as con:  # the Default experiment's artifacts: in the data dir
                location = (db.parent.resolve() / "mlartifacts" / "0").as_uri()
                con.execute(
                    "UPDATE experiments SET artifact_location = ? WHERE experiment_id = 0", (location,)
                )
            con.close()
            try:
                os.link(copy, db)  # never over a store another process created meanwhile
            except FileExistsError:
                pass
    except OSError:  # no writable cache dir: MLflow builds the store itself, as it always could
        return


class TrackingError(RuntimeError):
    """An MLflow call's error other than MLflow's own (a connection's ...), its message redacted."""


class _Redacting:
    """An MLflow client whose errors never carry the tracking URI's password: MLflow names the URL it
    called in its errors (`API request to http://user:password@host/... failed`), which Dagster stores
    with a failed step and prints. Everything else is the client's."""

    def __init__(self, client):
        self._inner = client

    def __getattr__(self, name: str):
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr

        @functools.wraps(attr)
        def call(*args, **kwargs):
            try:
                return attr(*args, **kwargs)
            except Exception as e:
                if (redacted := redact(str(e))) == str(e):
                    raise
                from mlflow.exceptions import MlflowException
                from mlflow.protos.databricks_pb2 import ErrorCode

                if isinstance(e, MlflowException):  # callers tell MLflow's errors apart by their type
                    raise MlflowException(redacted, error_code=ErrorCode.Value(e.error_code)) from None
                raise TrackingError(f"{type(e).__name__}: {redacted}") from None

        return call


# a config's place in the leaderboard, one point per night: carried over when its run is replaced
HISTORY_METRICS = ("overall_score", "overall_ci_low", "overall_ci_high", "rank", "tier")
# The experiment's view that `rag-sweep run` links to: the config runs alone (not the leaderboard, gate,
# champion or prompt optimization runs), best first, with the board's figures as columns. MLflow's UI opens
# it from `?viewStateShareKey=NAME`, reading the experiment tag `mlflow.sharedViewState.NAME` (a view a user
# shares from the UI is saved the same way); it shows the metrics in alphabetical order.
RANKED_VIEW = "rag-sweep-ranked"
RANKED = {
    "searchFilter": "tags.kind = 'config'",
    "orderByKey": "metrics.`overall_score`",
    "orderByAsc": False,
    "selectedColumns": [
        *(f"metrics.`{m}`" for m in ("overall_score", "overall_ci_low", "overall_ci_high", "rank", "tier")),
        "tags.`recommended`",
    ],
}


class MlflowTracking(dg.ConfigurableResource):
    """`tracking_uri` None means $MLFLOW_TRACKING_URI, else a SQLite store in the data directory."""

    tracking_uri: str | None = None
    default_dir: str
    enabled: bool = True

    def resolved_uri(self) -> str:
        if self.tracking_uri:
            return self.tracking_uri
        if uri := mlflow_tracking_uri():
            return uri
        if is_remote(self.default_dir):
            raise ValueError(
                f"data dir {self.default_dir}: on object storage the config runs are tracked on the "
                "deployment's MLflow server: set $MLFLOW_TRACKING_URI (see docs/guides/deployment.md)"
            )
        folder = Path(self.default_dir).resolve()
        for name in ("mlflow.db", "mlflow.db-wal", "mlflow.db-shm", "mlflow.db-journal", "mlartifacts"):
            refuse_links_in(folder / name)  # SQLite and MLflow's artifact copies follow links
        folder.mkdir(parents=True, exist_ok=True)
        return f"sqlite:///{folder / 'mlflow.db'}"

    def never_made(self) -> bool:
        """The store is the data dir's SQLite default and does not exist yet (nothing was ever tracked)."""
        return (
            not self.tracking_uri
            and not mlflow_tracking_uri()
            and not is_remote(self.default_dir)
            and not (Path(self.default_dir) / "mlflow.db").exists()
        )

    def remembered(self, question: str, ask):
        """`ask()`'s answer (a JSON value): on a local SQLite store, remembered beside it while the store is
        unchanged (resources/store_answers.py), so an unchanged rerun neither imports MLflow nor queries it;
        a server is always asked."""
        uri = self.resolved_uri()
        if not uri.startswith("sqlite:///"):
            return ask()
        from resources.store_answers import StoreAnswers

        return StoreAnswers(Path(uri.removeprefix("sqlite:///"))).get(question, ask)

    def display_uri(self) -> str:
        """The tracking URI as printed and stored (Dagster metadata, log lines): its password and secret
        query values ***."""
        return redact_url(self.resolved_uri())

    def ui_url(self) -> str:
        """Where people open MLflow: the tracking server itself, or `mlflow ui` on a local store
        ($MLFLOW_UI_URL, default the address `rag-sweep run` prints); never with a password (the browser
        asks for it)."""
        uri = self.resolved_uri()
        if uri.startswith(("http://", "https://")):
            return redact_url(uri.rstrip("/"))
        return redact_url(mlflow_ui_url())

    def ranked_runs_url(self, experiment: str) -> str | None:
        """The experiment's config runs in the MLflow UI, best overall score first, with their score, rank
        and tier shown: the view `log_leaderboard` saves in the experiment."""
        if not self.enabled:
            return None

        def ask() -> str | None:
            exp = self._client().get_experiment_by_name(experiment)
            return None if exp is None else exp.experiment_id

        experiment_id = self.remembered(f"experiment_id/{experiment}", ask)
        if experiment_id is None:
            return None
        return f"{self.ui_url()}/#/experiments/{experiment_id}/runs?viewStateShareKey={RANKED_VIEW}"

    def run_url(self, run_id: str | None) -> str | None:
        """The MLflow UI page of a run (a Dagster URL metadata link), or None without tracking."""
        if not self.enabled or not run_id:
            return None
        run = self._client().get_run(run_id)
        return f"{self.ui_url()}/#/experiments/{run.info.experiment_id}/runs/{run_id}"

    def _client(self):
        return _Redacting(_client_for(self.resolved_uri()))

    def client(self):
        """The MLflow client of this tracking store (the model registry too)."""
        return self._client()

    def experiment_id(self, name: str) -> str:
        """The id of the experiment `name`, created when missing (artifacts beside a local store)."""
        client = self._client()
        return self._experiment_id(client, name)

    def _experiment_id(self, client, name: str) -> str:
        exp = client.get_experiment_by_name(name)
        if exp is not None:
            return exp.experiment_id
        uri = self.resolved_uri()
        artifact_location = None
        if uri.startswith("sqlite:"):  # keep artifacts beside the local store, not in the cwd
            artifact_location = (Path(self.default_dir).resolve() / "mlartifacts" / name).as_uri()
        try:
            return client.create_experiment(name, artifact_location=artifact_location)
        except Exception:  # created concurrently by another run
            return client.get_experiment_by_name(name).experiment_id

    def _search(self, experiment: str, filter_string: str, max_results: int | None = None) -> list:
        """The experiment's runs matching the filter (none when it does not exist yet); every page of them
        unless `max_results` (a page holds at most 1,000 runs, a sweep may have more configs)."""
        client = self._client()
        exp = client.get_experiment_by_name(experiment)
        if exp is None:
            return []
        if max_results is not None:
            return list(client.search_runs([exp.experiment_id], filter_string, max_results=max_results))
        runs, token = [], None
        while True:
            page = client.search_runs([exp.experiment_id], filter_string, page_token=token)
            runs += page
            if not (token := page.token):
                return runs

    def find_run(self, experiment: str, fingerprint: str, tag: str = "eval_fingerprint") -> str | None:
        """The id of a finished run already logged for this fingerprint (of an evaluation; with
        `tag="board_fingerprint"`, of a leaderboard), if any."""
        runs = self._search(
            experiment,
            f"tags.{tag} = '{fingerprint}' and attributes.status = 'FINISHED'",
            max_results=1,
        )
        return runs[0].info.run_id if runs else None

    def logged(self, experiment: str, tag: str) -> set[str] | None:
        """The values of `tag` over the experiment's finished runs (the evaluations and leaderboards MLflow
        holds), in one query; None without tracking (nothing to check)."""
        if not self.enabled:
            return None

        def ask() -> list[str]:
            runs = self._search(experiment, f"tags.{tag} != '' and attributes.status = 'FINISHED'")
            return sorted({r.data.tags[tag] for r in runs})

        return set(self.remembered(f"logged/{experiment}/{tag}", ask))

    def _config_runs(self, experiment: str) -> dict[str | None, str]:
        """Evaluation fingerprint -> the id of its finished run, over the experiment, in one query."""
        return {
            r.data.tags.get("eval_fingerprint"): r.info.run_id
            for r in self._search(experiment, "attributes.status = 'FINISHED'")
        }

    def _replace(self, experiment: str, tag: str, value: str, keep: str | None) -> None:
        """Delete every other run tagged `tag = value` (a recomputed evaluation or leaderboard replaces its
        earlier run: one run per content); one a kill left RUNNING is first marked KILLED."""
        client = self._client()
        for run in self._search(experiment, f"tags.{tag} = '{value}'"):
            if run.info.run_id == keep:
                continue
            if run.info.status == "RUNNING":
                client.set_terminated(run.info.run_id, "KILLED")
            client.delete_run(run.info.run_id)

    def ensure_run(
        self, experiment: str, fingerprint: str, force: bool, tags: dict[str, str], **kwargs
    ) -> str | None:
        """Log a run for this evaluation unless a finished one exists (a reused artifact is not logged
        twice); a logged run replaces the earlier ones of the same fingerprint (a forced or retried
        evaluation, or one a kill left RUNNING, which is never reused)."""
        if not self.enabled:
            return None
        if not force:
            existing = self.find_run(experiment, fingerprint)
            if existing:
                return existing
        run_id = self.log_evaluation(experiment, tags={**tags, "eval_fingerprint": fingerprint}, **kwargs)
        self._carry_history(experiment, fingerprint, run_id)
        self._replace(experiment, "eval_fingerprint", fingerprint, keep=run_id)
        return run_id

    def _carry_history(self, experiment: str, fingerprint: str, run_id: str) -> None:
        """A re-evaluation (the nightly one) replaces the config's run: the new run takes the earlier
        runs' history of its place in the leaderboard (one point per night), so it is never lost."""
        from mlflow.entities import Metric

        client = self._client()
        for old in self._search(experiment, f"tags.eval_fingerprint = '{fingerprint}'"):
            if old.info.run_id == run_id:
                continue
            points = [
                Metric(name, m.value, m.timestamp, m.step)
                for name in HISTORY_METRICS
                for m in client.get_metric_history(old.info.run_id, name)
            ]
            for i in range(0, len(points), 1000):  # log_batch takes at most 1,000 metrics
                client.log_batch(run_id, metrics=points[i : i + 1000])

    def log_evaluation(
        self,
        experiment: str,
        run_name: str,
        params: dict,
        metrics: dict[str, float],
        tags: dict[str, str],
        per_query: pl.DataFrame,
        extra_artifacts: dict[str, str] | None = None,
        per_question=None,  # a function that builds the frame (called only when the run is logged)
    ) -> str | None:
        """Create a finished run with params, metrics, tags and the per-query results; return its id.
        `per_question` (question, gold, retrieved, answer, metrics) is logged as an MLflow table, which the
        run's artifact view previews."""
        if not self.enabled:
            return None
        from mlflow.entities import Metric, Param, RunTag

        client = self._client()
        run = client.create_run(self._experiment_id(client, experiment), run_name=run_name, tags=tags)
        run_id = run.info.run_id
        try:
            client.log_batch(
                run_id,
                metrics=[Metric(k, float(v), 0, 0) for k, v in metrics.items()],
                params=[Param(k, str(v)[:6000]) for k, v in params.items()],
                tags=[RunTag("mlflow.runName", run_name)],
            )
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / "per_query.parquet"
                per_query.write_parquet(path)
                client.log_artifact(run_id, str(path))
                for name, text in (extra_artifacts or {}).items():
                    (Path(tmp) / name).write_text(text)
                    client.log_artifact(run_id, str(Path(tmp) / name))
            if per_question is not None:
                client.log_table(run_id, data=per_question().to_pandas(), artifact_file="per_question.json")
            client.set_terminated(run_id, "FINISHED")
        except BaseException:
            client.set_terminated(run_id, "FAILED")
            raise
        return run_id

    def log_ranking(self, experiment: str, board: pl.DataFrame, evaluated_at: float | None = None) -> int:
        """Put each config's place in the leaderboard on its own run, so the experiment's runs sort by
        overall score: metrics `overall_score`, `overall_ci_low`/`_high`, `rank`, `tier`; tags `tier`,
        `vs_leader`, `recommended`, `in_leaderboard`. A run is found by its evaluation fingerprint; returns
        the runs updated. `evaluated_at` (when the board was computed): the metrics' step is its night (days
        since 1970-01-01), so a config re-evaluated every night has its score's history, one point per
        night; their timestamp is now, so the latest value is this board's, also when an older board is
        ranked again. A config run the board does not hold (a config removed from the sweep, an evaluation
        of data since replaced) is tagged `in_leaderboard=false` and loses its rank, tier and
        recommendation: the experiment never shows two recommended runs."""
        if not self.enabled:
            return 0
        from mlflow.entities import Metric, RunTag

        client = self._client()
        records = self._search(experiment, "attributes.status = 'FINISHED'")
        runs = {r.data.tags.get("eval_fingerprint"): r.info.run_id for r in records}
        night = int(evaluated_at // 86400) if evaluated_at else 0
        stamp = int(time.time() * 1000)
        updated = 0
        for row in board.iter_rows(named=True):
            run_id = runs.get(row.get("fingerprint"))
            if run_id is None:
                continue
            values = {
                k: row.get(k) for k in ("overall_score", "overall_ci_low", "overall_ci_high", "rank", "tier")
            }
            # each LLM-backed stage's share of failed or fallen-back calls, and whether one is over the
            # threshold that keeps the config out of the tiers (rag_core/decision/qualification.py)
            values |= {k: v for k, v in row.items() if k.startswith("failed_share_")}
            withheld = row.get("overall_ci_withheld")
            if (
                withheld
            ):  # no interval (too few questions, no spread): NaN ends an earlier night's, a tag says why
                values |= {"overall_ci_low": float("nan"), "overall_ci_high": float("nan")}
            client.log_batch(
                run_id,
                metrics=[Metric(k, float(v), stamp, night) for k, v in values.items() if v is not None],
                tags=[
                    RunTag("tier", str(row.get("tier"))),
                    RunTag("vs_leader", str(row.get("vs_leader"))),
                    RunTag("recommended", str(bool(row.get("recommended"))).lower()),
                    RunTag("in_leaderboard", "true"),
                    RunTag("too_many_errors", str(bool(row.get("too_many_errors"))).lower()),
                    RunTag("failed_stages", row.get("failed_stages") or "none"),
                    RunTag("overall_ci_withheld", withheld or ""),
                ],
            )
            updated += 1
        ranked = set(board["fingerprint"]) if "fingerprint" in board.columns else set()
        for r in records:
            tags = r.data.tags
            if tags.get("kind") == "leaderboard" or "eval_fingerprint" not in tags:
                continue
            if tags["eval_fingerprint"] in ranked or tags.get("in_leaderboard") == "false":
                continue
            client.log_batch(  # NaN: MLflow's way to say a run has no current value (its history stays)
                r.info.run_id,
                metrics=[
                    Metric(k, float("nan"), stamp, night) for k in ("rank", "tier") if k in r.data.metrics
                ],
                tags=[
                    RunTag("in_leaderboard", "false"),
                    RunTag("recommended", "false"),
                    RunTag("tier", "none"),
                    RunTag("vs_leader", "not in the current leaderboard"),
                ],
            )
            updated += 1
        return updated

    def log_leaderboard(
        self,
        experiment: str,
        board: pl.DataFrame,
        markdown: str,
        png: bytes,
        report: dict[str, str] | None = None,
        decision: dict | None = None,
        fingerprint: str | None = None,
        images: dict[str, bytes] | None = None,
    ) -> str | None:
        """A `leaderboard` run beside the config runs: the ranked table, its plot, the ship report and the
        recommendation (tag `recommended_config`, metric `min_detectable_difference`)."""
        if not self.enabled:
            return None
        client = self._client()
        decision = decision or {}
        experiment_id = self._experiment_id(client, experiment)
        # the view the printed link opens: MLflow's shared view state, an experiment tag it reads by name
        client.set_experiment_tag(experiment_id, f"mlflow.sharedViewState.{RANKED_VIEW}", json.dumps(RANKED))
        run = client.create_run(
            experiment_id,
            run_name="leaderboard",
            tags={
                "sweep": experiment,
                "kind": "leaderboard",
                **({"board_fingerprint": fingerprint} if fingerprint else {}),
                "recommended_config": str(decision.get("recommended") or "none"),
                "mlflow.note.content": f"**Recommended: {decision.get('recommended') or 'none'}**\n\n{decision.get('why', '')}",
            },
        )
        with tempfile.TemporaryDirectory() as tmp:
            board.write_parquet(Path(tmp) / "leaderboard.parquet")
            (Path(tmp) / "leaderboard.md").write_text(markdown)
            (Path(tmp) / "leaderboard.png").write_bytes(png)
            for name, text in (report or {}).items():
                (Path(tmp) / name).write_text(text)
            for name, data in (images or {}).items():  # e.g. the score trend over nights
                (Path(tmp) / name).write_bytes(data)
            for path in sorted(Path(tmp).iterdir()):
                client.log_artifact(run.info.run_id, str(path))
        ranked = qualified(board)  # a config over the error threshold or without a score is no "best"
        if ranked.height:
            client.log_metric(run.info.run_id, "best_overall_score", float(ranked["overall_score"][0]))
        if decision.get("min_detectable_difference") is not None:
            client.log_metric(
                run.info.run_id, "min_detectable_difference", float(decision["min_detectable_difference"])
            )
        client.set_terminated(run.info.run_id, "FINISHED")
        if fingerprint:
            self._replace(experiment, "board_fingerprint", fingerprint, keep=run.info.run_id)
        return run.info.run_id

    def mark_current_board(self, experiment: str, fingerprint: str) -> None:
        """Tag the leaderboard run of `fingerprint` `current=true` and every other leaderboard run of the
        experiment `current=false`, named `leaderboard (superseded)`: an earlier board (another config set,
        inputs since changed, a prompt optimization's config added since) keeps its history but states no
        current recommendation. Called on every publish, so a board reinstated by a rerun is current again."""
        if not self.enabled:
            return
        client = self._client()
        for run in self._search(experiment, "tags.kind = 'leaderboard'"):
            current = run.data.tags.get("board_fingerprint") == fingerprint
            if run.data.tags.get("current") == str(current).lower():
                continue
            client.set_tag(run.info.run_id, "current", str(current).lower())
            client.set_tag(
                run.info.run_id, "mlflow.runName", "leaderboard" if current else "leaderboard (superseded)"
            )

    def log_gate(
        self, experiment: str, result, files: dict[str, str], champion: dict | None = None
    ) -> str | None:
        """A gate (rag_core/decision/gate.py) as a run of the sweep's experiment (kind `gate`): its verdict,
        settings, each candidate's figures and verdict, the reports as artifacts; `champion`: the registered
        version it compared with (`baseline_model_name`, `baseline_model_version`), tagged on the run and
        named in its description, a link to the version's page."""
        if not self.enabled:
            return None
        client = self._client()
        tags = {"kind": "gate", "verdict": result.verdict, "baseline": result.baseline}
        link = ""
        if champion:
            name, version = champion["baseline_model_name"], str(champion["baseline_model_version"])
            tags |= {"baseline_model_uri": f"models:/{name}/{version}", **champion}
            link = f"\n\nBaseline: [models:/{name}/{version}]({self.ui_url()}/#/models/{name}/versions/{version})"
        tags = {k: str(v) for k, v in tags.items()}
        tags["mlflow.note.content"] = files.get("gate.md", "") + link
        run = client.create_run(
            self.experiment_id(experiment), run_name=f"gate: {result.verdict} vs {result.baseline}", tags=tags
        )
        rid = run.info.run_id
        s = result.settings
        from mlflow.entities import Metric, Param, RunTag

        params = [
            Param("margin", str(s.margin)),
            Param("alpha", str(s.alpha)),
            Param("equivalence", str(s.equivalence)),
        ]
        params += [Param(f"margin.{m}", str(x)) for m, x in s.metric_margins.items()]
        metrics, run_tags = [], []
        for c in result.candidates:
            run_tags.append(RunTag(f"verdict.{c.key}", c.verdict))
            for t in c.tests:
                for what in ("difference", "ci_low", "ci_high", "holm_ci_low", "holm_ci_high"):
                    if (value := getattr(t, what)) is not None:
                        metrics.append(Metric(f"{c.key}.{t.metric}.{what}", float(value), 0, 0))
        client.log_batch(rid, metrics=metrics, params=params, tags=run_tags)
        with tempfile.TemporaryDirectory(prefix="rag-gate-") as tmp:
            for name, text in files.items():
                (Path(tmp) / name).write_text(text)
            client.log_artifacts(rid, tmp, "gate")
        client.set_terminated(rid)
        return rid

    def log_confirmation(
        self,
        experiment: str,
        board: pl.DataFrame,
        summary: dict,
        board_fingerprint: str,
        report: dict[str, str],
    ) -> int:
        """The holdout confirmation (rag_core/decision/holdout.py): each finalist's run gets its holdout score
        (metrics `holdout_overall_score`, `holdout_ci_low`/`_high`, `winners_curse_drop`; tag
        `holdout_tied_with_best`), and the leaderboard run of `board_fingerprint` the verdict (tags
        `holdout_confirmed`, `holdout_instead`, its note) and the ship report with the holdout beside the
        selection. Returns the config runs updated."""
        if not self.enabled:
            return 0
        from mlflow.entities import Metric, RunTag

        client = self._client()
        runs = self._config_runs(experiment)
        updated = 0
        # a failed holdout's scores measure the outage, not the config: only its failed calls are stated
        failed = summary.get("status") == "failed"
        names = (
            ()
            if failed
            else ("holdout_overall_score", "holdout_ci_low", "holdout_ci_high", "winners_curse_drop")
        )
        for row in board.filter(pl.col("holdout_overall_score").is_not_null()).iter_rows(named=True):
            run_id = runs.get(row.get("fingerprint"))
            if run_id is None:
                continue
            client.log_batch(
                run_id,
                metrics=[Metric(k, float(row[k]), 0, 0) for k in names if row.get(k) is not None]
                + [Metric("holdout_errors", float(row.get("n_holdout_errors") or 0), 0, 0)],
                tags=[
                    RunTag(
                        "holdout_tied_with_best",
                        "unknown" if failed else str(bool(row["holdout_tied_with_best"])).lower(),
                    )
                ]
                # no interval from too few questions or no spread: why, where the interval would be
                + [RunTag("holdout_ci_withheld", row["holdout_ci_withheld"])]
                * bool(row.get("holdout_ci_withheld")),
            )
            updated += 1
        boards = self._search(experiment, f"tags.board_fingerprint = '{board_fingerprint}'", max_results=1)
        if boards:
            run_id = boards[0].info.run_id
            note = boards[0].data.tags.get("mlflow.note.content", "").split("\n\n**Holdout")[0]
            client.log_batch(
                run_id,
                metrics=[
                    Metric(k, float(summary[v]), 0, 0)
                    for k, v in (("holdout_score", "holdout_score"), ("winners_curse_drop", "drop"))
                    if summary.get(v) is not None and not failed
                ],
                tags=[
                    RunTag("holdout_confirmed", str(summary["confirmed"]).lower()),
                    RunTag("holdout_status", summary.get("status", "decided")),
                    RunTag("holdout_instead", str(summary.get("instead") or "")),
                    RunTag("mlflow.note.content", f"{note}\n\n**Holdout**: {summary['verdict']}"),
                ],
            )
            with tempfile.TemporaryDirectory() as tmp:
                for name, text in report.items():
                    (Path(tmp) / name).write_text(text)
                    client.log_artifact(run_id, str(Path(tmp) / name))
        return updated
