"""Benchmark: the fused encoder graph and batches by tokens, against today's graph and batches by characters.

    .venv/bin/python benchmarks/fused_encoder.py [--docs 1000] [--repeats 2] [--sample 96]
        [--sample-repeats 5] [--unfused-graph model.onnx] [--json F]

On the CPU, all-MiniLM-L6-v2, in one process, each comparison alternating (its order reversed every
repeat), ratios the median of the repeats' ratios:
1. The example's documents (hotpotqa_distractor_100, the first `--docs`) and its 100 questions embedded as a
   cold run embeds them, `--repeats` times: *before*, the unfused graph with ONNX Runtime's threads as they
   were (intra-op threads its default, spinning inside a call) in batches of 16 sorted by characters; *now*,
   the fused graph with the encoder's THREADS (no spinning) in batches of 16 sorted by token counts; and
   *graph only*, now's encoder in before's batches. Texts/s and CPU texts/s, padding shares, the worst
   cosine of now's vectors to before's, and the questions' top-5 and top-2 over the documents, each way.
2. What each part gives, on `--sample` documents and the 100 questions in batches by tokens,
   `--sample-repeats` times: the fused graph, the fused graph with SkipLayerNormalization too, and thread
   settings (the encoder's THREADS; 1 thread; the parallel executor), as ratios to the unfused graph with
   the threads as they were.
3. Batches on the questions: by characters, by tokens, and by token budgets (a batch closes when its texts
   times its longest would pass the budget): padding share and texts/s.
4. Each graph's check against the carried reference (resources/encoder_check.py: cosine >= 0.9999).

`--unfused-graph` takes the model.onnx of an earlier build (a cache folder of EXPORT_FORMAT 2) as *before*'s
graph; by default it is this tree's graph built unfused (`bert_onnx.build(fused=False)`, which ONNX
Runtime's session fuses a little by itself: a baseline no slower than the earlier build's).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from rag_core.common.local_models import weights_path  # noqa: E402
from resources import bert_onnx  # noqa: E402
from resources import local_encoders as le  # noqa: E402
from resources.encoder_check import check  # noqa: E402
from resources.encoder_reference import CarriedReference  # noqa: E402

MODEL = "all-MiniLM-L6-v2"
DATA = ROOT / "examples" / "data" / "hotpotqa_distractor_100"
BATCH = 16  # EmbeddingService.batch_size on the CPU


def session(folder: Path, intra: int = 0, spinning: bool = True, parallel: bool = False) -> le.OnnxEncoder:
    """The encoder on `folder`'s graph with these thread settings (intra 0: ONNX Runtime's default)."""
    import onnxruntime as ort

    encoder = le.OnnxEncoder(folder)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    options.intra_op_num_threads = intra
    options.add_session_config_entry("session.force_spinning_stop", "1")
    if not spinning:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if parallel:
        options.execution_mode = ort.ExecutionMode.ORT_PARALLEL
        options.inter_op_num_threads = 2
    encoder.session = ort.InferenceSession(
        str(folder / "model.onnx"), options, providers=["CPUExecutionProvider"]
    )
    return encoder


def plan(lengths: list[int], size: int = BATCH, budget: int | None = None) -> list[list[int]]:
    """Indices longest first by `lengths`, in batches of `size`, or closed at a token `budget`."""
    order = sorted(range(len(lengths)), key=lengths.__getitem__, reverse=True)
    batches: list[list[int]] = []
    for i in order:
        last = batches[-1] if batches else None
        if not last or (len(last) >= size if budget is None else (len(last) + 1) * lengths[last[0]] > budget):
            batches.append([])
        batches[-1].append(i)
    return batches


def padding(batches: list[list[int]], tokens: list[int]) -> float:
    slots = sum(max(tokens[i] for i in b) * len(b) for b in batches)
    return 1 - sum(tokens[i] for b in batches for i in b) / slots


def encode(encoder, texts: list[str], batches: list[list[int]]) -> np.ndarray:
    out = np.zeros((len(texts), 384), np.float32)
    for b in batches:
        out[b] = encoder.encode([texts[i] for i in b])
    return out


def alternate(runs: dict, repeats: int) -> dict[str, dict]:
    """{name: fn} run `repeats` times, alternating: wall and CPU seconds of each, and its last output."""
    out = {name: {"wall": [], "cpu": [], "result": None} for name in runs}
    for r in range(repeats):
        for name in list(runs) if r % 2 == 0 else list(runs)[::-1]:
            c, t = time.process_time(), time.perf_counter()
            out[name]["result"] = runs[name]()
            out[name]["wall"].append(time.perf_counter() - t)
            out[name]["cpu"].append(time.process_time() - c)
    return out


def ratio(times: dict, name: str, base: str, key: str = "wall") -> float:
    return statistics.median(b / t for b, t in zip(times[base][key], times[name][key], strict=True))


def top(questions: np.ndarray, docs: np.ndarray, k: int) -> list[list[int]]:
    scores = questions @ docs.T
    return [list(row) for row in np.argsort(-scores, axis=1, kind="stable")[:, :k]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--sample", type=int, default=96)
    ap.add_argument("--sample-repeats", type=int, default=5)
    ap.add_argument("--unfused-graph", help="an earlier build's model.onnx as the unfused graph")
    ap.add_argument("--json")
    args = ap.parse_args()
    import onnx
    import onnxruntime as ort
    import polars as pl

    docs = pl.read_parquet(DATA / "corpus.parquet")["text"].to_list()[: args.docs]
    questions = pl.read_parquet(DATA / "queries.parquet")["question"].to_list()
    load = os.getloadavg()[0]
    print(
        f"{len(docs)} documents, {len(questions)} questions, {MODEL}, onnxruntime {ort.__version__}, "
        f"{os.cpu_count()} cores, load {load:.1f}; the encoder's threads: {le.THREADS}, no spinning"
    )
    figures: dict = {"docs": len(docs), "questions": len(questions), "load_before": load}
    with tempfile.TemporaryDirectory() as tmp:
        unfused, fused, skip = Path(tmp, "unfused"), Path(tmp, "fused"), Path(tmp, "skip")
        t0 = time.perf_counter()
        le.graph_encoder(MODEL, fused, fused=True)
        print(
            f"fused graph built in {time.perf_counter() - t0:.1f}s: "
            f"{json.loads((fused / 'meta.json').read_text())['fused']}"
        )
        le.graph_encoder(MODEL, unfused, fused=False)
        config = json.loads((Path(weights_path(MODEL)) / "config.json").read_text())
        skip.mkdir()
        for name in ("meta.json", "tokenizer.json"):
            shutil.copyfile(fused / name, skip / name)
        onnx.save(
            bert_onnx.fuse(
                onnx.load(str(unfused / "model.onnx")),
                config["num_attention_heads"],
                config["hidden_size"],
                {**bert_onnx.FUSION, "skip_layer_norm": True},
            ),
            str(skip / "model.onnx"),
        )
        if args.unfused_graph:
            shutil.copyfile(args.unfused_graph, unfused / "model.onnx")
            print(f"unfused graph: {args.unfused_graph}")

        reference = CarriedReference()
        for name, folder in (("unfused", unfused), ("fused", fused)):
            got = check(le.OnnxEncoder(folder), reference, reference.texts)
            print(
                f"check against the carried reference, {name}: min cosine {got['min_cosine']:.7f}, "
                f"passed {got['passed']}"
            )
            figures[f"check_{name}"] = got

        before, now = session(unfused), le.OnnxEncoder(fused)
        limit = now.max_tokens
        doc_tokens = [min(n, limit) for n in now.token_counts(docs)]
        q_tokens = [min(n, limit) for n in now.token_counts(questions)]
        by_chars = (plan([len(t) for t in docs]), plan([len(t) for t in questions]))
        by_tokens = (plan(doc_tokens), plan(q_tokens))

        # 1. before and now, as a cold run embeds the documents and the questions
        def run(encoder, batches):
            return lambda: (encode(encoder, docs, batches[0]), encode(encoder, questions, batches[1]))

        print(f"1. the documents and questions, {args.repeats} alternating repeats:")
        runs = {"before": run(before, by_chars), "graph only": run(now, by_chars), "now": run(now, by_tokens)}
        times = alternate(runs, args.repeats)
        n = len(docs) + len(questions)
        for name, batches in (("before", by_chars), ("graph only", by_chars), ("now", by_tokens)):
            wall = statistics.median(times[name]["wall"])
            print(
                f"  {name:10s} {n / wall:6.1f} texts/s, "
                f"{n / statistics.median(times[name]['cpu']):6.1f} texts/CPU-s "
                f"(runs: {', '.join(f'{t:.1f}s' for t in times[name]['wall'])}); padding: documents "
                f"{padding(batches[0], doc_tokens):.1%}, questions {padding(batches[1], q_tokens):.1%}"
            )
        speed = ratio(times, "now", "before")
        for name in ("graph only", "now"):
            print(
                f"  {name} / before: x{ratio(times, name, 'before'):.2f} texts/s, "
                f"x{ratio(times, name, 'before', 'cpu'):.2f} texts/CPU-s"
            )
        (d0, q0), (d1, q1) = times["before"]["result"], times["now"]["result"]
        cosine = min(float((d0 * d1).sum(axis=1).min()), float((q0 * q1).sum(axis=1).min()))
        same5 = sum(a == b for a, b in zip(top(q0, d0, 5), top(q1, d1, 5), strict=True))
        same2 = sum(a == b for a, b in zip(top(q0, d0, 2), top(q1, d1, 2), strict=True))
        print(
            f"  now's vectors to before's: min cosine {cosine:.7f}; "
            "the questions' top-5 identical (ids and order) "
            f"on {same5}/{len(questions)}, top-2 on {same2}/{len(questions)}"
        )
        figures["before_now"] = {
            "texts_per_second": {k: round(n / statistics.median(times[k]["wall"]), 1) for k in times},
            "ratio": round(speed, 3),
            "graph_only_ratio": round(ratio(times, "graph only", "before"), 3),
            "cpu_ratio": round(ratio(times, "now", "before", "cpu"), 3),
            "padding_docs": {
                "chars": padding(by_chars[0], doc_tokens),
                "tokens": padding(by_tokens[0], doc_tokens),
            },
            "min_cosine": cosine,
            "top5_same": same5,
            "top2_same": same2,
        }

        # 2. each part alone, on a sample of the documents and the questions, batches by tokens
        pick = sorted(np.random.default_rng(0).choice(len(docs), min(args.sample, len(docs)), replace=False))
        sample = [docs[i] for i in pick] + questions
        sample_batches = plan([min(n, limit) for n in now.token_counts(sample)])
        variants = {
            "unfused, threads as before": session(unfused),
            "fused, threads as before": session(fused),
            "fused + SkipLayerNorm, as before": session(skip),
            "fused, 1 thread": session(fused, 1, spinning=False),
            "fused, parallel executor": session(fused, 0, parallel=True),
            "fused, the encoder's THREADS": now,
        }
        print(
            f"2. each part: {len(pick)} documents and {len(questions)} questions by tokens, "
            f"{args.sample_repeats} alternating repeats (ratios to the first row):"
        )
        times = alternate(
            {k: (lambda e=e: encode(e, sample, sample_batches)) for k, e in variants.items()},
            args.sample_repeats,
        )
        base = next(iter(variants))
        figures["parts"] = {}
        for name in variants:
            wall, cpu = ratio(times, name, base), ratio(times, name, base, "cpu")
            rate = len(sample) / statistics.median(times[name]["wall"])
            print(f"  {name:34s} {rate:6.1f} texts/s x{wall:.2f}, per CPU-s x{cpu:.2f}")
            figures["parts"][name] = {
                "texts_per_second": round(rate, 1),
                "ratio": round(wall, 3),
                "cpu_ratio": round(cpu, 3),
            }

        # 3. batches of the questions: by characters, by tokens, by a token budget
        plans = {
            "characters, 16": plan([len(t) for t in questions]),
            "tokens, 16": plan(q_tokens),
            "token budget 1024": plan(q_tokens, budget=1024),
            "token budget 4096": plan(q_tokens, budget=4096),
        }
        print(
            f"3. the questions' batches, {args.sample_repeats} alternating repeats (ratios to the first row):"
        )
        times = alternate(
            {k: (lambda b=b: encode(now, questions, b)) for k, b in plans.items()}, args.sample_repeats
        )
        base = next(iter(plans))
        for name, batches in plans.items():
            print(
                f"  {name:18s} {len(batches):3d} batches, padding {padding(batches, q_tokens):5.1%}, "
                f"{len(questions) / statistics.median(times[name]['wall']):6.1f} texts/s "
                f"x{ratio(times, name, base):.2f}"
            )
        for name, budget in (("token budget 2048", 2048), ("token budget 4096", 4096)):
            print(f"  documents, {name}: padding {padding(plan(doc_tokens, budget=budget), doc_tokens):.1%}")
    figures["load_after"] = os.getloadavg()[0]
    print(f"load {figures['load_after']:.1f}")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
