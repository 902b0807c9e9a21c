"""Nothing the product writes in a local data dir goes through a link.

A data dir may be shared (a team's folder, a co-user's checkout): whoever can write there can plant a
symlink where the product will write (its lock, a cache part, a leaderboard) pointing at a file of the user's
(their signing key, a dotfile). Every file is therefore written as a new file that replaces its name
(`resources/storage.atomic_write`: a rename replaces a link, it never writes through one), and the few
files opened in place (locks) are opened with `O_NOFOLLOW` and refused unless they are a plain file with
one name. A folder on the way that is a link (to a folder outside) is refused too.

The data dir itself may be a link (the user's choice): `data_root` resolves it, and only what lies below a
resolved data dir is checked.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

_ROOTS: set[str] = set()  # the local data dirs this process resolved (resources/storage.data_root)


class PlantedLink(RuntimeError):
    """A link (or another file than a plain one) where the product writes in its data dir: refused in one
    line naming it, before anything is written through it."""


def remember_root(root: Path) -> None:
    """`root` is a resolved local data dir: paths below it are checked for links."""
    _ROOTS.add(str(root))


def _root_of(path: Path) -> Path | None:
    text = os.path.abspath(path)
    best = None
    for root in _ROOTS:
        if (text == root or text.startswith(root.rstrip("/") + "/")) and (
            best is None or len(root) > len(best)
        ):
            best = root
    return Path(best) if best is not None else None


def refuse_links_below(path: Path, root: Path | None = None) -> None:
    """Refuse `path` if it, or a folder between the data dir (`root`, else the data dir it lies in) and it,
    is a symlink. A path in no data dir this process resolved is not checked (an `--output` of the user's)."""
    root = root or _root_of(path)
    if root is None:
        return
    here = Path(os.path.abspath(path))
    try:
        below = here.relative_to(root).parts
    except ValueError:
        return
    step = Path(root)
    for part in below:
        step = step / part
        try:
            mode = os.lstat(step).st_mode
        except FileNotFoundError:
            return  # nothing planted from here on: what is missing is made by the product
        if stat.S_ISLNK(mode):
            raise PlantedLink(
                f"{step} is a symbolic link inside the data dir {root}: rag-sweep writes nothing through a "
                "link there; remove it (someone who can write to the data dir may have put it there)"
            )


def open_lock_file(path: Path) -> int:
    """A lock file in a data dir, opened for `flock` without following a link: created if missing, refused
    if it is a link, not a plain file, or has another name too (a hard link to a file elsewhere). The
    product never writes into it, so the file's content is never at stake."""
    refuse_links_below(path.parent)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o644)
    except OSError:
        if os.path.islink(path):
            raise PlantedLink(
                f"{path} is a symbolic link: rag-sweep opens no lock through a link; remove it (someone who "
                "can write to the data dir may have put it there)"
            ) from None
        raise
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
        os.close(fd)
        what = "not a plain file" if not stat.S_ISREG(info.st_mode) else f"a file with {info.st_nlink} names"
        raise PlantedLink(
            f"{path} is {what}: rag-sweep locks only a plain file of its own there; remove it (someone who "
            "can write to the data dir may have put it there)"
        )
    os.set_blocking(fd, True)
    return fd


def refuse_links_in(folder: Path) -> None:
    """Refuse the first symlink anywhere under `folder` (a data dir, a Dagster home): what a run will write
    there (SQLite stores, compute logs, a vector store's files) is written by libraries that follow links,
    so a link planted beforehand is refused before any of them starts. Links are not followed."""
    refuse_links_below(folder)
    if not os.path.isdir(folder):
        return
    for top, dirs, files in os.walk(folder, followlinks=False):
        for name in dirs + files:
            path = os.path.join(top, name)
            if os.path.islink(path):
                raise PlantedLink(
                    f"{path} is a symbolic link inside the data dir: rag-sweep writes nothing through a link "
                    "there; remove it (someone who can write to the data dir may have put it there)"
                )
