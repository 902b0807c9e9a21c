"""The module paths from before runner/, orchestration/, fleet/ and shipping/ moved under rag_sweep/ still
import, as the same module objects as the new paths.

What names the old paths and cannot be rewritten: a model registered earlier runs its own copy of
model_code.py (`from shipping.pipeline import RagPipeline`), whose hash its signed registry tags hold; an
instance's dagster.yaml written earlier names `module: runner.instance_storage`, read by any Dagster process
(`dagster dev`, the daemon) before it imports the project; a plug-in may import `orchestration.plans`.

`install()` puts a finder first on `sys.meta_path`; the wheel's `rag_sweep_legacy_modules.pth` runs it as
Python starts. A top-level name is answered only when nothing else on `sys.path` has it (a package of one's
own named `runner` wins), and its submodules only when it is the alias, so no module is loaded twice.
(move_layout: keep -- this file names the old paths on purpose.)
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys

# run as every Python of the environment starts: nothing here imports importlib.abc or importlib.util
# (~0.2 s of importlib.resources); the finder is a plain class, as sys.meta_path allows

LEGACY = {old: f"rag_sweep.{old}" for old in ("runner", "orchestration", "fleet", "shipping")}


def new_name(module: str) -> str:
    """The module path a legacy one moved to (any other unchanged)."""
    top, dot, rest = module.partition(".")
    return LEGACY[top] + dot + rest if top in LEGACY else module


class LegacyModules:
    """A finder and loader of the legacy names (sys.meta_path's protocol)."""

    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if top not in LEGACY:
            return None
        import importlib.util

        if name == top:
            if importlib.machinery.PathFinder.find_spec(name) is not None:
                return None  # a real package of that name on sys.path
        elif sys.modules.get(top) is not sys.modules.get(LEGACY[top], self):
            return None  # `top` is someone else's package
        try:
            if importlib.util.find_spec(new_name(name)) is None:
                return None
        except ModuleNotFoundError:
            return None
        return importlib.machinery.ModuleSpec(name, self)

    def create_module(self, spec):
        return importlib.import_module(new_name(spec.name))  # the module itself: one copy, one class identity

    def exec_module(self, module):
        pass  # already executed under its new name


def install() -> None:
    if not any(isinstance(f, LegacyModules) for f in sys.meta_path):
        sys.meta_path.insert(0, LegacyModules())
