"""A warm `rag-sweep`: a background process that has imported the libraries once, from which each command
of the same environment is forked.

A `rag-sweep` command spends ~6 s on two cores importing before it does anything (MLflow 2 s, LanceDB 1.2 s,
Dagster and the project's definitions 1.8 s, SciPy 1 s), more than the work of a small sweep. `rag-sweep warm`
starts a process that imports them and waits on a Unix socket; a later `rag-sweep` in the same environment
sends it its arguments, working directory and terminal (its stdin, stdout and stderr, passed as file
descriptors), and the warm process forks a child that runs the command as a new process would: the same
output on the same terminal, the same exit status, Ctrl-C forwarded. It is the CLI's counterpart of the
deployment's warm run workers (`rag_sweep/run_launcher.py`).

A command is forked only where a new process would import the same thing:
- the same interpreter, `sys.path` and environment (the variables a shell sets per command aside: those are
  the caller's in the child), which name the warm process's socket;
- no file it imported changed since, and no package was installed or removed: a warm process that finds
  one did answers "stale" and exits, and the command runs on its own (checked for each command: ~30 ms).

Two things start one, and each says so: `rag-sweep warm`, and a `rag-sweep run` that found none to use and
imports Dagster and the libraries itself: it forks the warm process from itself once those are imported
(`start_from_here`: what they cost is paid once, by a command that needs them anyway); the warm process
imports the rest (litellm) only when that run has ended, not beside it. Not where `$CI` is set, nor with
`RAG_SWEEP_WARM=0`, which also makes a command ignore a running one. It exits after `--idle-minutes`
without a command (30), and `rag-sweep warm --stop` stops it. Its socket lies in a folder only its user can
open, and it serves only its own user (the peer's credentials).
"""

from __future__ import annotations

import fcntl
import gc
import hashlib
import json
import os
import selectors
import signal
import socket
import stat
import struct
import sys
import time
import warnings
from pathlib import Path

from rag_sweep import STARTING_ENVIRONMENT, STARTING_FDS

# set by a shell for each command, or by the terminal: the caller's values go to the child, not into the key
PER_COMMAND = ("PWD", "OLDPWD", "_", "SHLVL", "COLUMNS", "LINES")
LIBRARIES = ("rag_sweep.run_worker_preload", "scipy.stats", "sacrebleu", "rag_sweep.cli", "runner.sweep")
# of those, what every run imports (a warm process forked from a run imports them first: the run would import
# them anyway; the rest, litellm for one, ~3.5 s, it imports once the run has ended)
RUN_LIBRARIES = (
    "runner.sweep",
    "dagster",
    "mlflow.store.tracking.sqlalchemy_store",
    "lancedb",
    "onnxruntime",
    "tokenizers",
    "matplotlib.pyplot",
    "scipy.stats",
    "sacrebleu",
)
# what a command computes once per process on first use, from the interpreter and the installed packages
# (which a warm process watches): done before the fork. The combining marks (the reader's and the metrics'
# word pattern, 0.2 s) and MLflow's map of installed packages (~1 s, read when it saves the champion's model)
WARM_UP = ("rag_core.common.text:marks", "mlflow.utils.requirements_utils:_init_modules_to_packages_map")
DEFAULT_IDLE_MINUTES = 30.0
READY_TIMEOUT_S = 300.0
MAX_MESSAGE = 1 << 20


def _search_path() -> list[str]:
    return [os.path.abspath(p) if p else os.getcwd() for p in sys.path]


def key(env: dict[str, str] | None = None, path: list[str] | None = None) -> str:
    """What a forked command must share with the warm process: interpreter, import path, environment."""
    env = STARTING_ENVIRONMENT if env is None else env
    kept = sorted((k, v) for k, v in env.items() if k not in PER_COMMAND)
    text = json.dumps([sys.executable, _search_path() if path is None else path, kept])
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def folder(create: bool = True) -> Path:
    """The sockets' folder: `$RAG_SWEEP_WARM_DIR`, else `$XDG_RUNTIME_DIR/rag-sweep` or a per-user one in
    the temporary folder; created 0700 (by `rag-sweep warm` only: FileNotFoundError otherwise), and refused
    (no warm process) where it is a link, another user owns it or others can open it."""
    named = os.environ.get("RAG_SWEEP_WARM_DIR")
    if named:
        base = Path(named)
    elif os.environ.get("XDG_RUNTIME_DIR"):
        base = Path(os.environ["XDG_RUNTIME_DIR"]) / "rag-sweep"
    else:
        import tempfile

        base = Path(tempfile.gettempdir()) / f"rag-sweep-{os.getuid()}"
    if create:
        base.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = os.lstat(base)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise PermissionError(
            f"{base}: a link, owned by another user or open to others; no warm process uses it"
        )
    return base


def _paths(k: str, create: bool = True) -> tuple[Path, Path, Path]:
    base = folder(create)
    return base / f"{k}.sock", base / f"{k}.lock", base / f"{k}.log"


def _send(conn: socket.socket, **message) -> None:
    conn.sendall(json.dumps(message).encode() + b"\n")


def _lines(conn: socket.socket):
    buffer = b""
    while True:
        chunk = conn.recv(65536)
        if not chunk:
            return
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            yield json.loads(line)


# ---- the command's side -------------------------------------------------------------------------------------


def forward(argv: list[str]) -> int | None:
    """Run `rag-sweep ARGV` in the warm process of this environment: its exit status, or None where there is
    none to use (then the command runs in this process)."""
    if os.environ.get("RAG_SWEEP_WARM", "1") == "0":
        return None
    try:
        sock_path, _, _ = _paths(key(), create=False)
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(str(sock_path))
    except OSError:  # none started, one that ended, or no folder to use
        return None
    request = {
        "argv": argv,
        "argv0": sys.argv[0],
        "cwd": os.getcwd(),
        "umask": _umask(),
        "env": {k: os.environ[k] for k in PER_COMMAND if k in os.environ},
    }
    with conn:
        try:
            socket.send_fds(conn, [json.dumps(request).encode() + b"\n"], [0, 1, 2])
        except OSError:  # a stdin, stdout or stderr this process was started without: nothing to pass
            return None
        child = None
        pending = []

        def relay(signum, frame):  # Ctrl-C, a terminal closed, a kill: the command's process gets it
            if child:
                os.kill(child, signum)
            else:
                pending.append(signum)

        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, relay)
        for message in _lines(conn):
            if "stale" in message:
                print(
                    f"rag-sweep: the warm process is older than {message['stale']}: it stopped; this command "
                    "runs on its own (the next run or `rag-sweep warm` starts a new one)",
                    file=sys.stderr,
                )
                return None
            if "declined" in message:  # it cannot fork safely: it stops
                return None
            if "pid" in message:
                child = message["pid"]
                for signum in pending:
                    os.kill(child, signum)
            if "exit" in message:
                return message["exit"]
    if child is None:  # it stopped before taking the command: nothing ran
        return None
    print(
        "rag-sweep: the warm process ended before the command did; its exit status is unknown",
        file=sys.stderr,
    )
    return 1


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# ---- `rag-sweep warm` ---------------------------------------------------------------------------------------


def add_parser(sub) -> None:
    warm = sub.add_parser(
        "warm",
        help="start a background process that has imported the libraries: later commands fork from it",
    )
    warm.add_argument(
        "--idle-minutes",
        type=float,
        default=None,  # one already running keeps its own unless this is given
        help=f"exit after this long without a command (default {DEFAULT_IDLE_MINUTES:g})",
    )
    warm.add_argument("--preload", action="append", default=[], help="also import this module (repeatable)")
    warm.add_argument("--stop", action="store_true", help="stop this user's warm processes")


def command(args) -> int:
    if args.stop:
        stopped = stop_all()
        print(
            f"stopped {len(stopped)} warm process{'es' if len(stopped) != 1 else ''}"
            + (f": {', '.join(map(str, stopped))}" if stopped else "")
        )
        return 0
    if args.idle_minutes is not None and args.idle_minutes <= 0:
        print("error: --idle-minutes must be positive", file=sys.stderr)
        return 2
    try:
        pid, started, idle_minutes = start(args.idle_minutes, args.preload)
    except PermissionError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if pid is None:
        return 1
    preloaded = f"; it has imported {', '.join(args.preload)} too" if args.preload else ""
    print(
        f"warm process {pid} {'started' if started else 'already running'}: rag-sweep commands from this "
        f"environment fork from it; it exits after {idle_minutes:g} idle minutes{preloaded} "
        "(rag-sweep warm --stop)"
    )
    return 0


def _ask(k: str, timeout_s: float, **message) -> dict:
    """This environment's warm process's first answer to `message`, or {} where none answers."""
    try:
        sock_path, _, _ = _paths(k)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(timeout_s)
            conn.connect(str(sock_path))
            _send(conn, **message)
            return next(iter(_lines(conn)), {})
    except OSError:
        return {}


def running(k: str | None = None) -> int | None:
    """The pid of this environment's warm process, if one answers."""
    return _ask(k or key(), 10, ping=True).get("server")


def start(idle_minutes: float | None = None, preload: list[str] = ()) -> tuple[int | None, bool, float]:
    """Start this environment's warm process and wait until it answers: (its pid, whether it is new, the
    idle minutes it exits after). One that already runs takes these settings: `idle_minutes` (when given)
    from now on, and `preload` imported too; the pid is None, the error printed, where it cannot."""
    import subprocess

    k = key()
    reply = _settle(k, idle_minutes, preload)
    if reply is not None:  # one runs, and answered
        if (error := reply.get("settled")) is None:  # too old to take settings (a stale one says stale)
            error = "it cannot take settings; rag-sweep warm --stop, then again"
        if error:
            print(f"error: the warm process {reply['server']}: {error}", file=sys.stderr)
            return None, False, 0.0
        return reply["server"], False, reply["idle_minutes"]
    idle_minutes = DEFAULT_IDLE_MINUTES if idle_minutes is None else idle_minutes
    sock_path, _, log_path = _paths(k)
    code = (
        "import json, sys; sys.path[:] = json.loads(sys.argv[1]); "
        "from rag_sweep.warm_process import serve; serve(sys.argv[2], float(sys.argv[3]), json.loads(sys.argv[4]))"
    )
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                code,
                json.dumps(_search_path()),
                k,
                str(idle_minutes),
                json.dumps(list(preload)),
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=STARTING_ENVIRONMENT,  # what names it, as the commands that fork from it started
            start_new_session=True,  # not in the terminal's process group: Ctrl-C there is a command's
            cwd="/",
        )
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if (pid := running(k)) is not None:
            if pid != proc.pid:  # another `rag-sweep warm` won the race: this one would wait on its lock
                proc.kill()
            return pid, pid == proc.pid, idle_minutes
        if proc.poll() is not None:
            tail = log_path.read_text(errors="replace").splitlines()[-15:]
            print(f"error: the warm process exited ({proc.returncode}); {log_path}:", file=sys.stderr)
            print("\n".join(tail), file=sys.stderr)
            return None, False, idle_minutes
        time.sleep(0.2)
    proc.kill()
    print(f"error: the warm process did not answer in {READY_TIMEOUT_S:g} s; see {log_path}", file=sys.stderr)
    return None, False, idle_minutes


def _settle(k: str, idle_minutes: float | None, preload: list[str]) -> dict | None:
    """The running warm process's answer to these settings ({"server": pid, "settled": the error or "",
    "idle_minutes": what it has now}), or None where none runs (or one is stale, or stopping)."""
    settings = {"preload": list(preload), **({"idle_minutes": idle_minutes} if idle_minutes else {})}
    reply = _ask(k, READY_TIMEOUT_S, ping=True, settings=settings)  # it may import the modules first
    return reply if reply.get("server") else None


def starts_one() -> bool:
    """Whether a command that found no warm process to use starts one: `RAG_SWEEP_WARM=1` yes, `0` no;
    unset, yes except where `$CI` is set (a machine that runs a command once and goes away)."""
    named = os.environ.get("RAG_SWEEP_WARM")
    if named is not None:
        return named != "0"
    return not os.environ.get("CI")


def import_for_run() -> None:
    """What every run imports (RUN_LIBRARIES), imported now, then frozen (`gc.freeze`): the cyclic garbage
    collector no longer walks the libraries' millions of objects at each full collection, and a process
    forked from this one copies fewer pages on write (measured: within the noise of a cold run)."""
    import importlib

    for name in RUN_LIBRARIES:
        importlib.import_module(name)
    gc.freeze()


def start_from_here(idle_minutes: float = DEFAULT_IDLE_MINUTES) -> int | None:
    """From a command running on its own, about to run, after `import_for_run` (what every run imports,
    frozen): fork this environment's warm process from this process, so that the imports are paid once, by a
    command that needs them anyway, and the next command forks from them. Its pid, or None where none was
    started: one already starts or serves, the folder is refused, or a thread runs that a fork would not
    copy."""
    try:
        k = key()
        _, lock_path, log_path = _paths(k)
    except OSError:  # a folder refused or not writable: the command runs as before
        return None
    if _other_threads():
        return None
    # LanceDB warns in a forked child; the warm process's own children are quiet too (run_worker_preload)
    warnings.filterwarnings("ignore", message="lancedb fork support is experimental", category=RuntimeWarning)
    lock = open(lock_path, "a+")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:  # another command starts one, or one still ends its commands
        lock.close()
        return None
    caller = os.getpid()
    sys.stdout.flush()  # what this command printed so far is not printed again by the warm process
    sys.stderr.flush()
    told_r, told_w = os.pipe()
    first = os.fork()
    if first == 0:  # not a child of the command: a process of its own session, reparented when this exits
        code = 1
        try:
            os.close(told_r)
            os.setsid()
            if os.fork():
                os._exit(0)
            os.write(told_w, str(os.getpid()).encode())
            os.close(told_w)
            _detach(log_path, lock.fileno())
            _write_pid(lock)
            files = _imported_files()
            print(
                f"{time.strftime('%H:%M:%S')} pid {os.getpid()}: forked from the command {caller}",
                flush=True,
            )
            _serve(k, lock, files, idle_minutes, caller=caller)
            code = 0
        except BaseException:
            import traceback

            traceback.print_exc()
            sys.stderr.flush()
        finally:
            os._exit(code)
    os.close(told_w)
    os.waitpid(first, 0)
    with os.fdopen(told_r, "rb") as told:
        pid = told.read().decode()
    lock.close()  # the warm process holds it now
    return int(pid) if pid else None


def _detach(log_path: Path, lock_fd: int) -> None:
    """In a warm process forked from a command: no terminal, the log for its output, its own folder, none
    of the caller's other open files (a caller that reads the command's output waits for all of them)."""
    null = os.open(os.devnull, os.O_RDWR)
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(null)
    os.close(log)
    for fd in STARTING_FDS - {lock_fd}:
        try:
            os.close(fd)
        except OSError:
            pass
    try:  # its name in `top` and `ps -e` (its command line stays the command's)
        import ctypes

        ctypes.CDLL(None).prctl(15, b"rag-sweep-warm", 0, 0, 0)  # PR_SET_NAME
    except (OSError, AttributeError):
        pass
    sys.path[:] = _search_path()  # absolute: the folder changes next
    os.chdir("/")
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
        signal.signal(signum, signal.SIG_DFL)


def stop_all() -> list[int]:
    """SIGTERM to every warm process of this user (each ends once its running commands have)."""
    stopped = []
    try:
        locks = list(folder(create=False).glob("*.lock"))
    except OSError:
        return []
    for lock in locks:
        try:
            pid = int(lock.read_text() or 0)
        except (OSError, ValueError):
            continue
        if pid and _holds_lock(lock):
            try:
                os.kill(pid, signal.SIGTERM)
                stopped.append(pid)
            except ProcessLookupError:
                pass
    return stopped


def _holds_lock(lock: Path) -> bool:
    """Whether a live warm process holds this lock file (its pid in it is then its own)."""
    with open(lock, "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
        return False


# ---- the warm process ---------------------------------------------------------------------------------------


def _imported_files() -> dict[str, tuple[int, int]]:
    """Every file a loaded module came from, and the folders packages are installed in (installing or
    removing one changes its mtime; not the project's own folder, which a run's default data dir changes):
    (mtime, size) now."""
    installed = {p for p in sys.path if os.path.basename(p) in ("site-packages", "dist-packages")}
    paths = {getattr(m, "__file__", None) for m in list(sys.modules.values())} | installed
    state = {}
    for p in paths:
        if p and isinstance(p, str):
            try:
                st = os.stat(p)
            except OSError:
                continue
            state[p] = (st.st_mtime_ns, st.st_size)
    return state


def _changed(before: dict[str, tuple[int, int]]) -> str | None:
    for p, seen in before.items():
        try:
            st = os.stat(p)
        except OSError:
            return p
        if (st.st_mtime_ns, st.st_size) != seen:
            return p
    return None


def serve(k: str, idle_minutes: float, preload: list[str]) -> None:
    """The warm process `rag-sweep warm` starts: import, then fork a child per command until idle for
    `idle_minutes`."""
    import importlib

    _, lock_path, _ = _paths(k)
    lock = open(lock_path, "a+")
    fcntl.flock(lock, fcntl.LOCK_EX)  # a stale one still ending its commands: this one waits for it
    _write_pid(lock)

    t0 = time.monotonic()
    for name in (*LIBRARIES, *preload):
        importlib.import_module(name)
    _warm_up()
    files = _imported_files()
    if others := _other_threads():
        raise SystemExit(f"a library started a thread while imported: {others}; no warm process")
    print(
        f"{time.strftime('%H:%M:%S')} pid {os.getpid()}: imported in {time.monotonic() - t0:.1f} s",
        flush=True,
    )
    _serve(k, lock, files, idle_minutes)


def _write_pid(lock) -> None:
    lock.seek(0)
    lock.truncate()
    lock.write(str(os.getpid()))
    lock.flush()


def _warm_up(imports: tuple[str, ...] = ()) -> None:
    import importlib

    for name in imports:
        importlib.import_module(name)
    for name in WARM_UP:
        module, function = name.split(":")
        try:
            getattr(importlib.import_module(module), function)()
        except (ImportError, AttributeError) as e:  # another version of the library: computed in the command
            print(f"not warmed up: {name} ({e})", flush=True)


def _other_threads() -> list[str]:
    """Threads a fork would not copy while they may hold a lock the child needs; LanceDB's event loop is the
    exception: LanceDB starts a new one in a forked child."""
    import threading

    others = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
    return others if set(others) - {"LanceDBBackgroundEventLoop"} else []


def _serve(k: str, lock, files: dict, idle_minutes: float, caller: int | None = None) -> None:
    """Listen on the socket and fork a child per command until idle for `idle_minutes` (or SIGTERM). With
    `caller` (a warm process forked from that command), the rest of the imports and the warm-up wait until
    the caller has ended or a command arrives: they are not paid for beside the caller's own work."""
    sock_path, _, _ = _paths(k)
    sock_path.unlink(missing_ok=True)  # left by a warm process that was killed: the lock is ours now
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(sock_path))
    listener.listen(16)
    listener.setblocking(False)

    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    stopping = []
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "accept")
    selector.register(wake_r, selectors.EVENT_READ, "signal")
    warmed = caller is None
    children: dict[int, tuple[socket.socket, list[str], float]] = {}
    idle_s = idle_minutes * 60
    last = time.monotonic()

    def warm_up() -> bool:
        """The imports and the warm-up left for after the caller (once); False where a library started a
        thread: then this warm process forks nothing and stops."""
        nonlocal warmed, files
        if not warmed:
            warmed = True
            t0 = time.monotonic()
            _warm_up(LIBRARIES)
            files = {**_imported_files(), **files}  # what the warm-up imported, as it is now
            if others := _other_threads():
                print(f"a library started a thread while imported: {others}; stopping", flush=True)
                stopping.append(True)
            else:
                print(
                    f"{time.strftime('%H:%M:%S')} imported the rest in {time.monotonic() - t0:.1f} s",
                    flush=True,
                )
        return not stopping

    watched = []  # the caller's pidfd while it runs
    if caller is not None:
        try:
            watched.append(os.pidfd_open(caller))
            selector.register(watched[0], selectors.EVENT_READ, "caller")
        except (OSError, AttributeError):  # no pidfd (Linux < 5.3): now
            warm_up()

    def settle(asked: dict) -> str:
        """A later `rag-sweep warm`'s settings: its modules imported too, then its idle minutes from now on
        (where given). The error, or ""."""
        nonlocal idle_s, files
        import importlib

        if new := [name for name in asked.get("preload", []) if name not in sys.modules]:
            if not warm_up():
                return "a library started a thread while imported; it stops"
            error = ""
            for name in new:
                try:
                    importlib.import_module(name)
                except Exception as e:  # the command's mistake: this process serves on
                    error = f"--preload {name}: {type(e).__name__}: {e}"
                    break
            files = {**_imported_files(), **files}  # what was imported, a failed module's own imports too
            if others := _other_threads():
                stopping.append(True)
                return f"--preload {', '.join(new)} started a thread ({others}); it stops"
            if error:
                return error
            print(f"{time.strftime('%H:%M:%S')} imported {', '.join(new)} too", flush=True)
        if asked.get("idle_minutes"):
            idle_s = float(asked["idle_minutes"]) * 60
        return ""

    def fork(conn: socket.socket, request: dict, fds: list[int]) -> None:
        if not warm_up():
            for fd in fds:
                os.close(fd)
            _send(conn, declined=True)
            conn.close()
            return
        gc.freeze()  # the child's collector leaves the warm process's objects' pages alone (not copied)
        pid = os.fork()
        if pid == 0:
            kept = [
                listener.fileno(),
                selector.fileno(),
                wake_r,
                wake_w,
                lock.fileno(),
                conn.fileno(),
                *watched,
            ]
            _child(request, fds, kept + [c.fileno() for c, _, _ in children.values()])
        for fd in fds:
            os.close(fd)
        children[pid] = (conn, request["argv"], time.monotonic())
        selector.register(conn, selectors.EVENT_READ, ("client", pid))
        try:
            _send(conn, pid=pid)
        except OSError:  # the command's side is gone: its child gets SIGINT once the selector sees it
            pass

    try:
        while True:
            if stopping and listener.fileno() != -1:  # no new command; the running ones end first
                selector.unregister(listener)
                listener.close()
                sock_path.unlink(missing_ok=True)
            if stopping and not children:
                break
            timeout = None if children else max(0.0, idle_s - (time.monotonic() - last))
            if timeout == 0.0:
                break
            for item, _ in selector.select(timeout):
                if item.data == "accept":
                    try:
                        conn, _ = listener.accept()
                    except BlockingIOError:
                        continue
                    conn.setblocking(True)
                    last = time.monotonic()
                    request, fds = _receive(conn)
                    changed = None if request is None else _changed(files)
                    if request is None:
                        conn.close()
                    elif changed is not None:
                        for fd in fds:
                            os.close(fd)
                        _send(conn, stale=changed)
                        conn.close()
                        stopping.append(True)
                        print(f"{time.strftime('%H:%M:%S')} stale: {changed} changed", flush=True)
                    elif request.get("ping"):
                        settled = {"settled": settle(request["settings"])} if "settings" in request else {}
                        try:  # the asking command may have gone meanwhile (an import can take seconds)
                            _send(conn, server=os.getpid(), idle_minutes=idle_s / 60, **settled)
                        except OSError:
                            pass
                        conn.close()
                    else:
                        fork(conn, request, fds)
                elif item.data == "caller":  # the command it was forked from ended
                    selector.unregister(item.fileobj)
                    os.close(watched.pop())
                    warm_up()
                elif item.data == "signal":
                    os.read(wake_r, 4096)
                    _reap(children, selector)
                    last = time.monotonic()
                else:  # the command's side closed before its child ended (killed): the child gets SIGINT
                    _, pid = item.data
                    selector.unregister(item.fileobj)
                    if pid in children:
                        try:
                            os.kill(pid, signal.SIGINT)
                        except ProcessLookupError:
                            pass
            _reap(children, selector)
    finally:
        listener.close()
        sock_path.unlink(missing_ok=True)
        print(f"{time.strftime('%H:%M:%S')} exit", flush=True)


def _receive(conn: socket.socket) -> tuple[dict | None, list[int]]:
    """One request: a JSON line, with the caller's stdin, stdout and stderr on the first message."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _, uid, _ = struct.unpack("3i", creds)
    conn.settimeout(10)
    try:
        data, fds, _, _ = socket.recv_fds(conn, 65536, 3)
        while not data.endswith(b"\n") and data and len(data) < MAX_MESSAGE:
            more = conn.recv(65536)
            if not more:
                break
            data += more
    except OSError:
        return None, []
    conn.settimeout(None)
    if uid != os.getuid():  # the folder is the user's own; this is the second lock
        for fd in fds:
            os.close(fd)
        return None, []
    try:
        return json.loads(data), fds
    except ValueError:
        for fd in fds:
            os.close(fd)
        return None, []


def _reap(children: dict, selector: selectors.BaseSelector) -> None:
    from resources.environment import redact  # a URL's password in an argument stays out of the log

    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if pid not in children:
            continue
        conn, argv, started = children.pop(pid)
        code = os.waitstatus_to_exitcode(status)
        code = 128 - code if code < 0 else code  # killed by a signal: the shell's 128 + N
        try:
            selector.unregister(conn)
        except (KeyError, ValueError):
            pass
        print(  # before the exit status: a caller that reads the log finds it
            f"{time.strftime('%H:%M:%S')} pid {pid}: rag-sweep {redact(' '.join(argv))} -> {code} "
            f"({time.monotonic() - started:.1f} s)",
            flush=True,
        )
        try:
            _send(conn, exit=code)
        except OSError:
            pass
        conn.close()


def _child(request: dict, fds: list[int], server_fds: list[int]) -> None:
    """In the forked child: become the command's process (its terminal, folder, variables), then run it."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        for signum in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for fd in server_fds:
            try:
                os.close(fd)
            except OSError:
                pass
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        sys.stdout.reconfigure(line_buffering=os.isatty(1))
        sys.stderr.reconfigure(line_buffering=True)
        os.chdir(request["cwd"])
        os.umask(request["umask"])
        for name in PER_COMMAND:
            if name in request["env"]:
                os.environ[name] = request["env"][name]
            else:
                os.environ.pop(name, None)
        sys.argv = [request["argv0"], *request["argv"]]
        from rag_sweep.cli import exit_now, main

        try:
            code = main(request["argv"])
        except SystemExit as e:  # argparse's --help and its usage errors
            if e.code is None or isinstance(e.code, int):
                code = e.code or 0
            else:
                print(e.code, file=sys.stderr)
                code = 1
        exit_now(code)
    except KeyboardInterrupt:  # before the command's own handler: the shell's status for SIGINT
        os._exit(130)
    except BaseException:
        import traceback

        try:
            traceback.print_exc()
            sys.stderr.flush()
        except BaseException:
            pass
    os._exit(code if isinstance(code, int) and code else 1)
