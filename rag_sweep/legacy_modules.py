"""The module paths from before runner/, orchestration/, fleet/ and shipping/ moved under rag_sweep/, and from
before shipping/ and orchestration/ moved down the stack (resources/shipping/, rag_assets/orchestration/,
with the Dagster shim resources/dagster_private.py), still import, as the same module objects as the new
paths.

What names the old paths and cannot be rewritten: a model registered earlier runs its own copy of
model_code.py (`from shipping.pipeline import RagPipeline`, later `from rag_sweep.shipping.pipeline import`),
whose hash its signed registry tags hold; an instance's dagster.yaml written earlier names
`module: runner.instance_storage`, read by any Dagster process (`dagster dev`, the daemon) before it imports
the project; a plug-in may import `orchestration.plans` or `rag_sweep.orchestration.plans`.

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

# The removal: with the first release after 2027-06-30, when models registered before 2026-12 have been
# registered again (`rag-sweep run` re-registers a sweep's champion; `verify-model` says which code it holds).
LEGACY = {
    "runner": "rag_sweep.runner",
    "fleet": "rag_sweep.fleet",
    "orchestration": "rag_assets.orchestration",
    "shipping": "resources.shipping",
    "rag_sweep.orchestration": "rag_assets.orchestration",
    "rag_sweep.shipping": "resources.shipping",
    "rag_sweep.dagster_private": "resources.dagster_private",
}


def _old(module: str) -> str | None:
    """The legacy path `module` is or lies under (the longest), or None."""
    found = [old for old in LEGACY if module == old or module.startswith(old + ".")]
    return max(found, key=len) if found else None


def new_name(module: str) -> str:
    """The module path a legacy one moved to (any other unchanged)."""
    old = _old(module)
    return LEGACY[old] + module[len(old) :] if old else module


class LegacyModules:
    """A finder and loader of the legacy names (sys.meta_path's protocol)."""

    def find_spec(self, name, path=None, target=None):
        old = _old(name)
        if old is None:
            return None
        import importlib.util

        if name == old:
            if "." not in old and importlib.machinery.PathFinder.find_spec(name) is not None:
                return None  # a real package of that name on sys.path
        elif sys.modules.get(old) is not sys.modules.get(LEGACY[old], self):
            return None  # `old` is someone else's package
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
