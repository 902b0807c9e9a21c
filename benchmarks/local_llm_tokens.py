"""Benchmark: the LLM client's tokens a second against the local server, as a share of llama.cpp's own
benchmark (`llama-batched-bench`) at the same parallel slots, threads, prompt and reply lengths.

    .venv/bin/python benchmarks/local_llm_tokens.py [--parallel 2] [--prompt-tokens 128] [--reply-tokens 32]
                                                    [--requests 16] [--repeats 2]

The client side is what every LLM stage calls: `LLMClient.complete`, from as many threads as the server has
slots, with `max_concurrency` set to them, against `LocalLLM` (the local-llm extra's llama-server and Gemma 3
270M) started with `--ignore-eos` and no grammar, so that every reply is exactly `--reply-tokens` long. Each
prompt is different (random words, no prefix shared beyond the BOS token, so the server's prompt cache saves
nothing) and `--prompt-tokens` long by the server's own tokenizer. Its figure: the prompt and reply tokens
the server reported for every call, over the wall time from the first call to the last reply.

llama.cpp's side: `llama-batched-bench` on the same model file, with the server's threads, `--parallel`
sequences of the prompt length the calls had (their mean) and the same reply length: its `S t/s`, all
tokens over its total time. The goal is >= x0.8. Server and bench never run together; they alternate,
`--repeats` times each, and the medians' ratio is printed, with each run's figure.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from resources.llm import LLMClient  # noqa: E402
from resources.local_llm import MODEL, LocalLLM, default_threads, model_file, server_binary  # noqa: E402

WORDS = (
    "river stone garden letter window silver market winter captain forest harbor engine mirror village "
    "thunder copper lantern meadow signal orchard bridge candle planet shadow violin marble glacier falcon "
    "compass ribbon harvest quarry tunnel anchor beacon cedar dune ember fjord grove heron ivory jasmine "
    "kettle lagoon mosaic nectar oasis pebble quill raven saddle timber umber valley walnut yarrow zenith"
).split()


def _post(server: LocalLLM, path: str, body: dict) -> dict:
    request = urllib.request.Request(
        f"{server.url}{path}",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {server.api_key}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as r:
        return json.loads(r.read())


def prompts(server: LocalLLM, n: int, tokens: int, seed: int) -> list[str]:
    """`n` prompts of random words, each cut to `tokens` - 1 tokens by the server's tokenizer (the chat
    template adds the BOS token)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        text = " ".join(rng.choice(WORDS) for _ in range(tokens * 2))
        ids = _post(server, "/tokenize", {"content": text})["tokens"][: tokens - 1]
        out.append(_post(server, "/detokenize", {"tokens": ids})["content"])
    return out


def client_run(args, seed: int) -> tuple[float, float]:
    """The client's tokens a second through a fresh server, and the calls' mean prompt length."""
    server = LocalLLM(
        ctx_size=args.prompt_tokens + args.reply_tokens + 64,
        parallel=args.parallel,
        threads=args.threads,
        grammar=None,
        server_args=("--ignore-eos",),
    )
    with server:
        llm = LLMClient(
            api_base=server.api_base,
            api_key=server.api_key,
            max_concurrency=args.parallel,
            max_retries=0,
            timeout_s=600.0,
        )
        asked = prompts(server, args.requests + 1, args.prompt_tokens, seed)
        first = llm.complete(MODEL, asked[0], max_tokens=args.reply_tokens)  # the client's start-up, untimed
        if first.error:
            raise RuntimeError(f"the warm-up call failed: {first.error}")
        t0 = time.perf_counter()
        with ThreadPoolExecutor(max_workers=args.parallel) as pool:
            done = list(pool.map(lambda p: llm.complete(MODEL, p, max_tokens=args.reply_tokens), asked[1:]))
        wall = time.perf_counter() - t0
    failed = [c.error for c in done if c.error]
    if failed:
        raise RuntimeError(f"{len(failed)} calls failed, e.g. {failed[0]}")
    short = [c.completion_tokens for c in done if c.completion_tokens != args.reply_tokens]
    if short:
        raise RuntimeError(f"replies of other lengths than {args.reply_tokens}: {short[:5]}")
    tokens = sum(c.prompt_tokens + c.completion_tokens for c in done)
    return tokens / wall, statistics.mean(c.prompt_tokens for c in done)


def bench_run(args, prompt_tokens: int) -> float:
    """llama-batched-bench's S t/s for `--parallel` sequences of that prompt and the reply length."""
    bench = server_binary().with_name("llama-batched-bench")
    command = [
        str(bench),
        "-m",
        str(model_file()),
        "-c",
        str(args.parallel * (prompt_tokens + args.reply_tokens + 64)),
        "-npp",
        str(prompt_tokens),
        "-ntg",
        str(args.reply_tokens),
        "-npl",
        str(args.parallel),
        "-t",
        str(args.threads),
    ]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 10 and cells[2] == str(args.parallel) and cells[0] == str(prompt_tokens):
            return float(cells[9])
    raise RuntimeError(f"no row for {args.parallel} sequences in llama-batched-bench's output:\n{out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parallel", type=int, default=2, help="the server's slots; the bench's sequences")
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--reply-tokens", type=int, default=32)
    parser.add_argument("--requests", type=int, default=16, help="timed calls per client run")
    parser.add_argument("--threads", type=int, default=default_threads(), help="the server's and the bench's")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()

    ours, theirs = [], []
    for repeat in range(args.repeats):
        rate, prompt_mean = client_run(args, seed=repeat)
        ours.append(rate)
        theirs.append(bench_run(args, round(prompt_mean)))
        print(
            f"run {repeat + 1}: client {rate:.1f} tokens/s (prompts of {prompt_mean:.1f} tokens), "
            f"llama-batched-bench {theirs[-1]:.1f} tokens/s",
            flush=True,
        )
    ratio = statistics.median(ours) / statistics.median(theirs)
    print(
        f"{args.parallel} slots, {args.threads} thread(s), {args.prompt_tokens}+{args.reply_tokens} tokens a "
        f"call, {args.requests} calls: the client's tokens/s x{ratio:.2f} of llama-batched-bench's "
        f"(median {statistics.median(ours):.1f} against {statistics.median(theirs):.1f}; goal >= x0.8)"
    )


if __name__ == "__main__":
    main()
