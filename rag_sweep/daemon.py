"""`rag-sweep-daemon`: Dagster's daemon (`dagster-daemon run ...`, the same arguments) with short loop intervals.

A sweep from the UI is a chain of runs, one per stage, each submitted by a daemon loop once the one before
it is done: the backfill daemon, then the sensors (holdout driver, search driver, automation). Dagster
sleeps a fixed 30 s between backfill iterations and 5 s between sensor and automation loops, with no
instance setting for either: a 12-run chain spent most of its wall time waiting on them. Here every loop
waits `$RAG_DAEMON_TICK_S` (default 2) instead. An iteration with nothing to do reads a few rows of the
instance's storage, so a short interval costs little; 30 s remains right for a deployment with thousands of
backfills, which can set a larger tick.

These intervals are module constants of Dagster's daemon (read at each loop), not public settings: a
Dagster upgrade that renames them is caught by `shorten_loops` below and by the deployment tests.

It also starts the warm run launcher's fork server (rag_sweep/run_launcher.py) while the daemon starts.
"""

from __future__ import annotations

import sys

from resources.environment import daemon_tick_s


def _require(module, name: str) -> None:
    """What this wrapper replaces in Dagster's daemon is not public API: a Dagster that moved it is refused,
    in one line, rather than run slow unnoticed."""
    if not hasattr(module, name):
        raise SystemExit(f"rag-sweep-daemon: {module.__name__}.{name} is gone; this Dagster is not supported")


def shorten_loops(tick: float) -> None:
    """Every daemon loop of this process waits `tick` seconds between iterations (less the iteration's time)."""
    from dagster._daemon import asset_daemon, controller, sensor

    for module, name in (
        (controller, "DEFAULT_DAEMON_INTERVAL_SECONDS"),  # the backfill daemon's sleep (read per loop)
        (sensor, "MIN_INTERVAL_LOOP_TIME"),  # the sensor daemon's
        (asset_daemon, "MIN_INTERVAL_LOOP_SECONDS"),  # the automation (asset) daemon's
    ):
        _require(module, name)
        setattr(module, name, tick)


def pool_connections() -> None:
    """The daemon's loops share one instance, and on PostgreSQL Dagster opens a new connection for each of
    their queries (a NullPool, except in the webserver): with 1-2 s loops, 30-60 connections a second, each a
    new PostgreSQL backend process, ~0.3 of two cores taken from the runs' steps on an idle deployment. Here
    the instance keeps its connections open, as Dagster's webserver does (`optimize_for_webserver`, with no
    statement timeout: a daemon's query is never cut short); a storage that is not PostgreSQL is unchanged."""
    from contextlib import contextmanager

    from dagster._daemon import cli as daemon_cli

    _require(daemon_cli, "get_instance_for_cli")
    opened = daemon_cli.get_instance_for_cli

    @contextmanager
    def pooled(*args, **kwargs):
        with opened(*args, **kwargs) as instance:
            instance.optimize_for_webserver(statement_timeout=0, pool_recycle=3600, max_overflow=20)
            yield instance

    daemon_cli.get_instance_for_cli = pooled


def warm_run_workers() -> None:
    """With the instance's launcher the warm one (rag_sweep/run_launcher.py), its fork server imports the
    libraries while the daemon starts, so the first run waits no longer than the rest."""
    import dagster as dg

    from rag_sweep.run_launcher import WarmRunLauncher

    try:
        with dg.DagsterInstance.get() as instance:
            if isinstance(instance.run_launcher, WarmRunLauncher):
                instance.run_launcher.start_fork_server()
    except Exception:  # no instance here: the daemon itself says what is wrong
        return


def main() -> int:
    try:
        tick = daemon_tick_s()
    except ValueError as e:  # a bad setting: one line, before the daemon starts
        raise SystemExit(f"rag-sweep-daemon: {e}") from None
    shorten_loops(tick)
    pool_connections()
    warm_run_workers()
    from dagster._daemon.cli import main as dagster_daemon

    sys.argv[0] = "dagster-daemon"
    return dagster_daemon()


if __name__ == "__main__":
    sys.exit(main())
