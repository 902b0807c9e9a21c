"""A job that says where it ran: its process, its parent's command line and whether a module was
imported before it started (a forked warm worker has what its fork server preloaded; this job imports
nothing)."""

import json
import os
import sys
from pathlib import Path

import dagster as dg


@dg.op(config_schema={"out": str, "module": str})
def where(context):
    parent = Path(f"/proc/{os.getppid()}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    Path(context.op_config["out"]).write_text(
        json.dumps(
            {"pid": os.getpid(), "parent": parent, "preloaded": context.op_config["module"] in sys.modules}
        )
    )


@dg.job(executor_def=dg.in_process_executor)  # the step in the run worker itself, as the sweep jobs run
def forked():
    where()


defs = dg.Definitions(jobs=[forked])
