"""The `rag-sweep` command: forked from this environment's warm process where one runs (`rag-sweep warm`,
rag_sweep/warm_process.py), else run in this process. Only the standard library is imported before that is
known: the warm process is there to spare a command the imports."""

from __future__ import annotations

import os
import sys


def main() -> None:
    argv = sys.argv[1:]
    if argv[:1] != ["warm"]:
        from rag_sweep.warm_process import forward

        code = forward(argv)
        if code is not None:
            os._exit(code)
    from rag_sweep.cli import console

    console(start_warm=argv[:1] == ["run"])
