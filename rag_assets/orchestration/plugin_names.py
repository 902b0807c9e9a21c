"""The plug-in components each sweep ran with, recorded in its data dir (`sweep_plugins/<prefix>.json`:
field -> {name: package==version}). A name a plug-in gave when the sweep ran is refused, with the package to
install, once no installed plug-in gives it: otherwise it would be read as something else (a
`generation.model` that is no installed answer generator is a litellm model, and every answer an error)."""

from __future__ import annotations

import json
from pathlib import Path

from rag_core.planning.extension_points import config_plugin_names, not_installed, used_names
from rag_core.planning.plan import Plan
from rag_core.planning.spec import SpecError

FOLDER = "sweep_plugins"


def _path(data: Path, plan: Plan) -> Path:
    return data / FOLDER / f"{plan.prefix}.json"


def recorded(data: Path, plan: Plan) -> dict[str, dict[str, str]]:
    """What the sweep's runs on `data` recorded ({} when none did)."""
    path = _path(data, plan)
    if not path.exists():
        return {}
    try:
        found = json.loads(path.read_text())
    except ValueError as e:
        raise SpecError(f"{path}: not the plug-in record a run writes ({e}): remove it") from None
    return found if isinstance(found, dict) else {}


def check_installed(data: Path, plan: Plan) -> None:
    """SpecError naming the first component the sweep's configs name that a plug-in gave when the sweep
    ran on `data` and that none installed gives now."""
    if lines := not_installed(recorded(data, plan), used_names(plan.sweep.configs)):
        raise SpecError(f"sweep {plan.sweep.name}: {lines[0]} (it was when the sweep ran on {data})")


def record(data: Path, plan: Plan) -> None:
    """Add the plug-in components the plan's configs name to the sweep's record (kept: every name any run
    of it took from a plug-in)."""
    from resources.storage import atomic_write_bytes

    names = recorded(data, plan)
    before = json.dumps(names, sort_keys=True)
    for c in plan.sweep.configs:
        for field, named in config_plugin_names(c).items():
            names.setdefault(field, {}).update(named)
    if json.dumps(names, sort_keys=True) != before:
        atomic_write_bytes(_path(data, plan), json.dumps(names, indent=1, sort_keys=True).encode())
