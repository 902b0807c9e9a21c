"""One registry per extension point, and plug-ins from other packages.

A built-in component is registered where it is defined (`REGISTRY.register(component)`). A plug-in package
declares its components under the extension point's entry-point group (for example `rag_sweep.chunkers`,
see examples/plugins/) and, once installed, is listed, validated and run like a built-in. A plug-in's
package and version join the fingerprints of what it makes, so upgrading it recomputes that and nothing
else; a built-in adds nothing (its stage's code version covers it).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from importlib.metadata import EntryPoint, EntryPoints, entry_points
from typing import Generic, TypeVar

T = TypeVar("T")


class UnknownComponent(ValueError):
    """A name no installed component of an extension point has; the message names the installed ones."""


class PluginError(ValueError):
    """A plug-in that cannot be used (fails to import, is not a component, shadows a built-in); the message
    names the plug-in, its entry point and its package. A ValueError, so a sweep file naming it reports the
    field, as for any bad value."""


@dataclass(frozen=True)
class Origin:
    """Where a component comes from: built in (no package), or a plug-in package at a version."""

    package: str | None = None
    version: str | None = None

    @property
    def builtin(self) -> bool:
        return self.package is None

    @property
    def pin(self) -> str | None:
        """What the component adds to the fingerprints of what it makes: None for a built-in."""
        return None if self.package is None else f"{self.package}=={self.version}"

    def __str__(self) -> str:
        return "built-in" if self.package is None else f"{self.package} {self.version}"


BUILTIN = Origin()
_ALL: list[Registry] = []


def refresh_all() -> None:
    """Every registry looks for installed plug-ins again (a package installed, or removed, meanwhile)."""
    for registry in _ALL:
        registry.refresh()


# One scan of the installed packages' entry points for every registry: a scan reads each distribution's
# metadata (~0.08 s here), and every process (a run worker, a code server, the CLI) asks for eight groups.
# Scanned again when sys.path changes (a plug-in folder put on the path) or a registry is refreshed.
_SCANNED: tuple[tuple[str, ...], EntryPoints] | None = None


def _installed() -> EntryPoints:
    global _SCANNED
    if _SCANNED is None or _SCANNED[0] != tuple(sys.path):
        _SCANNED = (tuple(sys.path), entry_points())
    return _SCANNED[1]


class Registry(Generic[T]):
    """The components of one extension point by name: the built-ins (registered when `modules` are
    imported, on first use) and the plug-ins of entry-point group `group`, loaded when first asked for.
    `adapt(name, obj)` turns a plug-in's loaded object into a component (or raises TypeError); `order`, when
    given, sorts the built-ins (stably) whatever order their modules were imported in."""

    def __init__(
        self,
        kind: str,
        group: str,
        modules: tuple[str, ...],
        adapt: Callable[[str, object], T],
        order: Callable[[T], int] | None = None,
    ):
        self.kind, self.group, self.modules, self.adapt, self.order = kind, group, modules, adapt, order
        self._builtins: dict[str, T] = {}
        self._plugins: dict[str, tuple[T, Origin]] = {}
        self._points: dict[str, EntryPoint] | None = None
        _ALL.append(self)

    def register(self, name: str, component: T) -> T:
        if name in self._builtins:
            raise ValueError(f"{self.kind} {name!r} is registered twice")
        self._builtins[name] = component
        return component

    def refresh(self) -> None:
        """Look for installed plug-ins again (a package installed into a running process)."""
        global _SCANNED
        self._points, self._plugins, _SCANNED = None, {}, None

    def _load_builtins(self) -> None:
        for module in self.modules:
            importlib.import_module(module)

    def entry_points(self) -> dict[str, EntryPoint]:
        if self._points is None:
            self._points = {ep.name: ep for ep in _installed().select(group=self.group)}
        return self._points

    def names(self) -> list[str]:
        """Every installed name: the built-ins in registration order, then the plug-ins by name."""
        self._load_builtins()
        builtins = list(self._builtins)
        if self.order is not None:
            builtins.sort(key=lambda n: self.order(self._builtins[n]))
        return [*builtins, *sorted(n for n in self.entry_points() if n not in self._builtins)]

    def builtins(self) -> dict[str, T]:
        """The built-in components by name (no plug-in loaded)."""
        self._load_builtins()
        return dict(self._builtins)

    def loaded_names(self) -> list[str]:
        """The built-ins and the plug-ins loaded so far (a plug-in nobody asked for stays unloaded)."""
        self._load_builtins()
        return [*self._builtins, *self._plugins]

    def plugin_names(self) -> list[str]:
        return [n for n in self.names() if n not in self._builtins]

    def get(self, name: str) -> T:
        self._load_builtins()
        if name in self._builtins:
            self._check_shadow(name)
            return self._builtins[name]
        if name not in self._plugins:
            ep = self.entry_points().get(name)
            if ep is None:
                raise UnknownComponent(f"unknown {self.kind} {name!r}; installed: {self.listing()}")
            self._plugins[name] = (self._load(name, ep), _origin(ep))
        return self._plugins[name][0]

    def origin(self, name: str) -> Origin:
        self.get(name)
        return self._plugins[name][1] if name in self._plugins else BUILTIN

    def listing(self) -> str:
        """'fixed, sentence (built-in); lines (example-plugins 0.1.0)' without loading a plug-in."""
        builtins = [n for n in self.names() if n in self._builtins]
        parts = [", ".join(builtins) + " (built-in)"] if builtins else []
        by_package: dict[str, list[str]] = {}
        for name, ep in sorted(self.entry_points().items()):
            if name not in self._builtins:
                by_package.setdefault(str(_origin(ep)), []).append(name)
        parts += [f"{', '.join(names)} ({package})" for package, names in by_package.items()]
        return "; ".join(parts) or "none"

    def _check_shadow(self, name: str) -> None:
        ep = self.entry_points().get(name)
        if ep is not None:
            raise PluginError(
                f"plug-in {self.kind} {name!r} ({ep.value}, from {_origin(ep)}) has a built-in's name; "
                f"rename it in its package's entry points (group {self.group})"
            )

    def _load(self, name: str, ep: EntryPoint) -> T:
        where = f"plug-in {self.kind} {name!r} ({ep.value}, from {_origin(ep)})"
        try:
            obj = ep.load()
        except Exception as e:  # any import-time failure of foreign code: one line naming the plug-in
            raise PluginError(f"{where} failed to load: {type(e).__name__}: {e}") from e
        try:
            return self.adapt(name, obj)
        except TypeError as e:
            raise PluginError(f"{where} is not a {self.kind}: {e}") from e


def _origin(ep: EntryPoint) -> Origin:
    dist = ep.dist
    return Origin(dist.name, dist.version) if dist is not None else Origin(ep.module, "unversioned")


def first_line(doc: str | None) -> str:
    return (doc or "").strip().splitlines()[0] if (doc or "").strip() else ""


def function_or(component: type, field: str, signature: str) -> Callable[[str, object], object]:
    """The `adapt` of an extension point whose plug-in is a function (its docstring's first line describes
    it) or a `component` dataclass (name, description, then `field`, the function): an entry point whose name
    differs from the component's renames it, keeping every other field."""

    def adapt(name: str, obj: object):
        if isinstance(obj, component):
            if getattr(obj, field) is None:
                raise TypeError(f"a plug-in {component.__name__} needs its {field} function")
            return obj if obj.name == name else replace(obj, name=name)
        if callable(obj):
            return component(name, first_line(obj.__doc__) or f"{name} (no description)", **{field: obj})
        raise TypeError(f"{obj!r} is neither a {signature} function nor a {component.__name__}")

    return adapt
