"""Move the generic top-level packages (runner, orchestration, fleet, shipping) under the project package
`rag_sweep`, and rewrite every reference to them, so that nothing generic is installed into site-packages.

    python3 scripts/dev/move_layout.py           # move and rewrite (idempotent: a second run changes nothing)
    python3 scripts/dev/move_layout.py --check   # list what is still to move or rewrite, exit 1 if anything

Replayable: run it again on a merged tree to move the files and rewrite the imports that other branches added
under the old names. What it does, on every file git knows (tracked or new, not ignored):
- `git mv` each file of `<pkg>/` to `rag_sweep/<pkg>/` (a file already there with the same content: the old
  copy is removed; with other content: reported, left for a person);
- rewrites dotted module paths (`runner.sweep`, `fleet.celery_app`: a name of a module of the package after
  the dot), `from <pkg> import`, `import <pkg>`, and paths of the package's files (`runner/instance.py`,
  `orchestration/`) in .py .md .yaml .yml .toml .cfg .ini .txt .sh files, the Dockerfile and .ci/run;
- drops the packages from pyproject.toml's wheel package list and their `COPY` lines from the Dockerfile;
- in a file it moves, `Path(__file__).parents[N]` becomes `parents[N+1]` (the file is a folder deeper).
A file that holds the marker `move_layout: keep` (one that names the old paths on purpose: the legacy
module aliases and their tests) is left as it is. Standard library only.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

HOME = "rag_sweep"
MOVED = ("runner", "orchestration", "fleet", "shipping")
SUFFIXES = {".py", ".md", ".yaml", ".yml", ".toml", ".cfg", ".ini", ".txt", ".sh"}
NAMES = {"Dockerfile", ".ci/run"}
KEEP = "move_layout: " + "keep"  # split so that this file does not mark itself
SELF = "scripts/dev/move_layout.py"


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True).stdout


def known_files(root: Path) -> list[str]:
    listed = git(root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").split("\0")
    return sorted({f for f in listed if f and (root / f).is_file()})


def move_files(root: Path, check: bool) -> list[str]:
    """`git mv` every file of the old packages; returns what was (or, with check, would be) done."""
    done, conflicts = [], []
    for f in known_files(root):
        if f.split("/")[0] not in MOVED:
            continue
        src, dst = root / f, root / HOME / f
        if dst.exists():
            if dst.read_bytes() != src.read_bytes():
                conflicts.append(f"{f}: {HOME}/{f} exists with other content; merge them by hand")
                continue
            done.append(f"remove {f} (same as {HOME}/{f})")
            if not check:
                if git(root, "ls-files", f).strip():
                    git(root, "rm", "-q", "-f", f)
                else:
                    src.unlink()
            continue
        done.append(f"move {f} -> {HOME}/{f}")
        if not check:
            dst.parent.mkdir(parents=True, exist_ok=True)
            if git(root, "ls-files", f).strip():
                git(root, "mv", f, f"{HOME}/{f}")
            else:  # a new file git does not track yet
                src.rename(dst)
            deepen_file_paths(dst)
    if not check:
        for pkg in MOVED:  # what is left: caches and empty folders
            left = root / pkg
            for cache in sorted(left.rglob("__pycache__")) if left.is_dir() else []:
                shutil.rmtree(cache, ignore_errors=True)
            for d in sorted([left, *left.rglob("*")], reverse=True) if left.is_dir() else []:
                if d.is_dir() and not any(d.iterdir()):
                    d.rmdir()
    for c in conflicts:
        print(f"move_layout: {c}", file=sys.stderr)
    return done + conflicts


def deepen_file_paths(path: Path) -> None:
    """A moved module is a folder deeper: `Path(__file__).parents[1]` (the repo root before) becomes
    `parents[2]`. Done once, as the file moves; other ways to climb from __file__ are reported."""
    if path.suffix != ".py":
        return
    text = path.read_text()
    new = re.sub(
        r"(Path\(__file__\)(?:\.resolve\(\))?\.parents\[)(\d+)\]", lambda m: f"{m[1]}{int(m[2]) + 1}]", text
    )
    if new != text:
        path.write_text(new)
    if re.search(r"__file__\)(?:\.resolve\(\))?\.parent\b|os\.path\.dirname\(", new):
        print(f"move_layout: {path}: a path climbs from __file__: check it by hand", file=sys.stderr)


def package_entries(root: Path, pkg: str) -> tuple[list[str], list[str]]:
    """(module names, file and folder names) of a package, wherever it is now."""
    base = root / HOME / pkg if (root / HOME / pkg).is_dir() else root / pkg
    if not base.is_dir():
        return [], []
    modules = [p.stem for p in base.glob("*.py") if p.stem != "__init__"]
    modules += [p.name for p in base.iterdir() if p.is_dir() and (p / "__init__.py").exists()]
    entries = [p.name for p in base.iterdir() if p.name != "__pycache__"]
    return sorted(modules, key=len, reverse=True), sorted(entries, key=len, reverse=True)


def rules(root: Path) -> list[tuple[re.Pattern, str]]:
    out = []
    for pkg in MOVED:
        modules, entries = package_entries(root, pkg)
        if modules:  # runner.sweep, "orchestration.search", celery -A fleet.celery_app
            alt = "|".join(map(re.escape, modules))
            out.append((re.compile(rf"(?<![\w./-]){pkg}(?=\.(?:{alt})\b)"), f"{HOME}.{pkg}"))
        # from runner import X; import runner (as a statement at the start of a line)
        out.append((re.compile(rf"(?<![\w.])from\s+{pkg}(?=\s+import\b)"), f"from {HOME}.{pkg}"))
        out.append((re.compile(rf"(?m)^(\s*)import\s+{pkg}(?![\w.])"), rf"\1from {HOME} import {pkg}"))
        # runner/instance.py, orchestration/ -- not data paths such as "fleet/plans" (no such file)
        files = "|".join(map(re.escape, entries)) or "(?!)"
        path = rf"(?<![\w./-]){pkg}/(?=(?:{files})(?![\w-])|(?![\w-]|\.\w))"
        out.append((re.compile(path), f"{HOME}/{pkg}/"))
    return out


def rewrite_text(text: str, name: str, patterns: list[tuple[re.Pattern, str]]) -> str:
    for pattern, repl in patterns:
        text = pattern.sub(repl, text)
    if name == "Dockerfile":  # `COPY rag_sweep rag_sweep` copies them now
        text = "".join(
            line
            for line in text.splitlines(keepends=True)
            if not re.fullmatch(rf"COPY ({'|'.join(MOVED)}) \1\s*", line)
        )
    if name == "pyproject.toml":  # the wheel's package list
        for pkg in MOVED:
            text = re.sub(rf'(packages\s*=\s*\[[^\]]*?)"{pkg}",\s*', r"\1", text)
            text = re.sub(rf'(packages\s*=\s*\[[^\]]*?),\s*"{pkg}"', r"\1", text)
    return text


def rewrite_files(root: Path, check: bool) -> list[str]:
    patterns, changed = rules(root), []
    for f in known_files(root):
        p = Path(f)
        if f == SELF or not (p.suffix in SUFFIXES or f in NAMES or p.name in NAMES):
            continue
        try:
            text = (root / f).read_text()
        except UnicodeDecodeError:
            continue
        if KEEP in text:
            continue
        new = rewrite_text(text, p.name, patterns)
        if new != text:
            changed.append(f"rewrite {f}")
            if not check:
                (root / f).write_text(new)
    if not check:
        tidy(root, [c.split(" ", 1)[1] for c in changed if c.endswith(".py")])
    return changed


def tidy(root: Path, files: list[str]) -> None:
    """The imports sorted again (rag_sweep.runner sorts elsewhere than runner) and long lines wrapped, with
    the project's ruff when there is one."""
    ruff = next((r for r in (root / ".venv/bin/ruff", Path(shutil.which("ruff") or "")) if r.is_file()), None)
    if not files:
        return
    if ruff is None:
        print("move_layout: no ruff found: the rewritten imports are not sorted again", file=sys.stderr)
        return
    subprocess.run([str(ruff), "check", "-q", "--select", "I", "--fix", *files], cwd=root, check=False)
    subprocess.run([str(ruff), "format", "-q", *files], cwd=root, check=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="change nothing; exit 1 if anything is left to do"
    )
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[2])
    args = parser.parse_args(argv)
    root = args.root.resolve()
    todo = move_files(root, args.check) + rewrite_files(root, args.check)
    for line in todo:
        print(line)
    if args.check:
        return 1 if todo else 0
    print(f"move_layout: {len(todo)} change(s)" if todo else "move_layout: nothing to do", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
