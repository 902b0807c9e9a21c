"""`rag-sweep components`: every installed component of each extension point (chunking methods, embedding
models, vector stores, rerankers, answer generators, metrics, search strategies), built-in or plug-in
(rag_core/planning/extension_points.py), the extra a built-in needs, and what each extra adds
(rag_core/common/extras.py)."""

from __future__ import annotations


def add_parser(sub) -> None:
    cmd = sub.add_parser(
        "components",
        help="list every installed component (chunkers, embedders, stores, rerankers, generators, metrics, "
        "search strategies), plug-ins included",
    )
    cmd.add_argument(
        "--markdown", action="store_true", help="as a Markdown table (the one docs/guides/plugins.md shows)"
    )
    cmd.set_defaults(handler=run)


def run(args) -> int:
    from rag_core.common.extras import EXTRAS, component_extra, install_hint, installed
    from rag_core.planning.extension_points import EXTENSION_POINTS, components

    rows = components()
    broken = any(r.description.startswith("FAILS TO LOAD") for r in rows)
    if args.markdown:
        print("| extension point | name | from | what it does |\n|---|---|---|---|")
        print("\n".join(f"| {r.point} | `{r.name}` | {r.origin} | {_cell(r.description)} |" for r in rows))
        return 1 if broken else 0
    for point in EXTENSION_POINTS:
        mine = [r for r in rows if r.point == point.name]
        print(f"{point.name} ({point.field}; plug-ins: entry-point group {point.registry.group})")
        if not mine:  # (embedding models: the built-in kinds are not names)
            print("  no plug-in installed")
        width = max((len(r.name) for r in mine), default=0)
        for r in mine:
            extra = component_extra(point.name, r.name) if r.origin == "built-in" else None
            needs = f" [extra {extra}{'' if installed(extra) else ': not installed'}]" if extra else ""
            print(f"  {r.name.ljust(width)}  {r.origin:<10}  {r.description}{needs}")
    print(f"extras ({install_hint('NAME').replace('NAME', '<name>')}; `all`: every component's)")
    width = max(len(e) for e in EXTRAS)
    for e in EXTRAS.values():
        state = "installed" if installed(e.name) else "missing"
        print(f"  {e.name.ljust(width)}  {state:<10}  {e.adds}")
    return 1 if broken else 0


def _cell(text: str) -> str:
    return text.replace("|", "\\|")
