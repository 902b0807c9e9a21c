"""Where a sweep's data lives: a local folder or an object-storage prefix (`s3://bucket/prefix`).

Both are handled as paths (`pathlib.Path` locally, `upath.UPath` over fsspec's s3fs remotely), so the
code that lays out artifacts, caches and reports is the same on both. The endpoint and credentials come
from the standard AWS environment variables (`AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`,
`AWS_SECRET_ACCESS_KEY`, `AWS_REGION`) and are never written into the data: an artifact names only its
URI.

Publishing is atomic in each store's terms: locally a temp file renamed onto the name; on object storage
one PUT of the whole object (an object appears whole or not at all). A reader never sees a half-written
file either way.
"""

from __future__ import annotations

import errno
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq

from resources.environment import normalized, s3_settings
from resources.no_links import refuse_links_below, remember_root

REMOTE_SCHEMES = ("s3://",)


def is_remote(location: str | os.PathLike) -> bool:
    return str(location)[:5].lower() in REMOTE_SCHEMES or getattr(location, "protocol", "") == "s3"


def check_data_dir(location: str | os.PathLike) -> None:
    """A data dir is a local folder or `s3://bucket[/prefix]`: anything else that looks like a URI (no
    bucket, another scheme, `hdfs:/x`, `s3:bucket`, credentials or a query in it) or that begins or ends
    with white space is refused in one line, before a folder named after it is made."""
    from urllib.parse import urlsplit

    from rag_core.planning.spec import SpecError

    if not isinstance(location, str):
        return
    where = "set --data-dir or $RAG_DATA_DIR to a local folder or s3://BUCKET/prefix"
    if "\x00" in location:  # no file system takes it: Python's own error would be a traceback
        raise SpecError(f"data dir {location!r}: holds a NUL byte; {where}")
    if location != location.strip():  # ` s3://b` would be a local folder named so, `b ` another folder
        raise SpecError(f"data dir {location!r}: begins or ends with white space; {where}")
    scheme = re.match(r"([A-Za-z][A-Za-z0-9+.-]*):(/*)", location)
    if scheme is None or len(scheme.group(1)) == 1:  # a path; C: on Windows
        return
    name, slashes = scheme.group(1).lower(), scheme.group(2)
    if name != "s3":
        if not slashes and name not in _OTHER_SCHEMES:
            return  # a local name with a colon in it, e.g. `run:1`
        raise SpecError(f"data dir {location}: {name}: is not supported; {where}")
    url = urlsplit(location)
    if slashes != "//" or not url.netloc:
        raise SpecError(f"data dir {location}: not an object-storage URI with a bucket; {where}")
    if ".." in url.path.split("/") or "." in url.path.split("/")[1:]:  # a key, not a path: no way up
        raise SpecError(
            f"data dir s3://{url.hostname}{url.path}: `.` and `..` are not folders in object storage; {where}"
        )
    if "@" in url.netloc or url.query or url.fragment:  # the S3 clients read neither: a secret in plain view
        shown = (
            f"s3://***@{url.hostname or ''}{url.path}"
            if "@" in url.netloc
            else f"s3://{url.netloc}{url.path}"
        )
        raise SpecError(
            f"data dir {shown}: an s3:// data dir holds no credentials, query or fragment; the "
            "credentials are read from $AWS_ACCESS_KEY_ID and $AWS_SECRET_ACCESS_KEY; " + where
        )


# schemes a data dir may be mistaken for (fsspec's and the usual URIs'): refused even without a slash
_OTHER_SCHEMES = {
    "file", "http", "https", "hdfs", "webhdfs", "gs", "gcs", "az", "abfs", "abfss", "adl", "wasb", "wasbs",
    "oss", "r2", "ftp", "sftp", "ssh", "smb", "hf", "memory", "s3a", "s3n", "gdrive", "dbfs", "lakefs",
}  # fmt: skip


def data_root(location: str | os.PathLike) -> Path:
    """The data dir as a path: a local folder (absolute) or an `s3://bucket/prefix` path."""
    location = normalized(location)
    check_data_dir(location)
    if is_remote(location):
        from upath import UPath

        endpoint, _ = s3_settings()
        # no listings cache: other processes and machines write here, and a cached listing would hide
        # their files from exists() for the life of this process
        options = {"use_listings_cache": False, **({"endpoint_url": endpoint} if endpoint else {})}
        return UPath(str(location).rstrip("/"), **options)
    root = Path(location).expanduser().resolve()
    remember_root(root)  # what is written below it goes through no link (resources/no_links.py)
    return root


def atomic_write(path: Path, write: Callable[[str], object]) -> Path:
    """`write(a local temp path)`, then publish it as `path`: a reader sees the old file or the whole new one."""
    if not is_remote(path):
        refuse_links_below(path.parent)  # a folder on the way planted as a link to one outside
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.close(fd)
        try:
            write(tmp)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return path
    with tempfile.TemporaryDirectory(prefix="rag-sweep-upload-") as folder:
        tmp = str(Path(folder) / path.name)
        write(tmp)
        path.fs.put_file(tmp, path.path)  # one object, visible once whole
    return path


def atomic_write_parquet(df: pl.DataFrame, path: Path) -> Path:
    return atomic_write(path, df.write_parquet)


def atomic_write_bytes(path: Path, data: bytes) -> Path:
    return atomic_write(path, lambda tmp: Path(tmp).write_bytes(data))


def read_parquet(path: Path, columns: list[str] | None = None) -> pl.DataFrame:
    if not is_remote(path):
        return pl.read_parquet(path, columns=columns)
    with path.open("rb") as f:
        return pl.read_parquet(f, columns=columns)


def parquet_columns(path: Path) -> list[str]:
    if not is_remote(path):
        return pq.read_schema(path).names
    with path.open("rb") as f:
        return pq.read_schema(f).names


def readable_parquet(path: Path) -> bool:
    try:
        if not is_remote(path):
            pq.read_metadata(path)
        else:
            with path.open("rb") as f:
                pq.read_metadata(f)
        return True
    except Exception:  # truncated, empty or not Parquet at all
        return False


def modified(path: Path) -> float:
    """When the file was last written (seconds since the epoch)."""
    if not is_remote(path):
        return path.stat().st_mtime
    return path.fs.modified(path.path).timestamp()


def set_aside(path: Path, suffix: str) -> None:
    """Rename a damaged file out of the way (kept for a look, never read again); gone already: nothing.
    On object storage a copy through this process, then a delete: not every S3-compatible server copies
    an object it holds (CopyObject) reliably."""
    try:
        if is_remote(path):
            path.with_suffix(suffix).write_bytes(path.read_bytes())
            path.unlink()
        else:
            path.replace(path.with_suffix(suffix))
    except FileNotFoundError:  # another run set it aside first
        pass


def sqlite_damage(path: Path) -> Exception | None:
    """Why a local SQLite file is not a whole store (not SQLite, truncated, malformed), or None when it is
    (or does not exist). A locked or busy store is not damage: that error is raised."""
    import sqlite3
    from contextlib import closing

    if not path.exists():
        return None
    try:
        with closing(sqlite3.connect(path, timeout=60)) as conn:
            if (check := conn.execute("PRAGMA quick_check").fetchone()[0]) != "ok":
                return sqlite3.DatabaseError(f"quick_check: {check}")
    except sqlite3.OperationalError:  # locked, full disk ...
        raise
    except sqlite3.DatabaseError as e:
        return e
    return None


def set_aside_damaged_store(path: Path, what: str, error: Exception, after: str, log) -> None:
    """A damaged SQLite store is moved aside beside itself (`<name>.damaged`, kept for a look), with its
    -wal and -shm (a damaged store's log must not be replayed into the new one), and said in a warning on
    `log` naming both files and what follows (`after`): the caller then begins a new store."""
    aside = path.with_name(path.name + ".damaged")
    log.warning(f"{what} {path} is damaged ({error}): set aside as {aside}; {after}")
    for suffix in ("-wal", "-shm"):
        side = path.with_name(path.name + suffix)
        if side.exists():
            set_aside(side, side.suffix + ".damaged")
    set_aside(path, path.suffix + ".damaged")


def lance_storage_options(location: str | os.PathLike) -> dict[str, str] | None:
    """LanceDB's object-store options for a remote data dir (its own S3 client reads them, not fsspec)."""
    if not is_remote(location):
        return None
    endpoint, region = s3_settings()
    options = {"region": region}
    if endpoint:
        options |= {"endpoint": endpoint, "allow_http": str(endpoint.startswith("http://")).lower()}
    return options


def check_new_file(path: str | Path, flag: str) -> None:
    """A local file a command will write at its end: refused now, in one line naming `flag`, if it is a
    directory or would be under a file or an unwritable folder (said before any work is paid for)."""
    from rag_core.planning.spec import SpecError

    path = Path(path)
    if path.exists() and not path.is_dir() and not path.is_file():  # a device, a pipe, a socket
        if _no_reader(path):
            raise SpecError(
                f"{flag} {path}: a pipe no process reads (writing to it would wait forever); start its reader "
                "first, or name a file"
            )
        if _a_stream(path):
            return
        raise SpecError(f"{flag} {path}: not a regular file, a pipe or a terminal; name a file to write")
    if path.is_dir():
        raise SpecError(
            f"{flag} {path}: is a directory; name the file to write, e.g. {path / ('out' + path.suffix)}"
        )
    existing = next((p for p in path.parents if p.exists()), None)
    if existing is not None and not existing.is_dir():
        raise SpecError(f"{flag} {path}: {existing} is a file, so nothing can be written under it")
    if existing is not None and not os.access(existing, os.W_OK):
        raise SpecError(f"{flag} {path}: {existing} is not writable")
    try:  # the write tried now: root passes access(), and /proc or a read-only mount refuse only the write
        if path.is_file():  # opened for writing, left as it is
            os.close(os.open(path, os.O_WRONLY))
        elif existing is not None:  # a probe in the nearest folder there is: nothing made or left behind
            fd, probe = tempfile.mkstemp(dir=existing, prefix=".rag-sweep-probe-")
            os.close(fd)
            os.unlink(probe)
    except OSError as e:
        where = path if path.is_file() else f"a file in {existing}"
        raise SpecError(f"{flag} {path}: cannot write {where} ({e.strerror}); name another path") from None


def _no_reader(path: Path) -> bool:
    """A named pipe no process reads: writing to it would wait forever (opening it without waiting fails)."""
    import stat

    if not stat.S_ISFIFO(path.stat().st_mode):
        return False
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
    except OSError as e:
        return e.errno == errno.ENXIO
    return False


def _a_stream(path: Path) -> bool:
    """A place a report may be streamed to rather than stored: /dev/null, a terminal, a pipe (/dev/stdout
    of a command piped on)."""
    import stat

    mode = path.stat().st_mode
    if stat.S_ISFIFO(mode):
        return True
    if os.path.samefile(path, os.devnull):
        return True
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NOCTTY | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        return os.isatty(fd)
    finally:
        os.close(fd)
