"""A BERT-family encoder's ONNX graph, built from its safetensors weights with numpy and onnx.helper alone.

The default embedder runs in ONNX Runtime; building its graph here (not exporting it from torch) is what lets
the default install go without torch. The graph is BERT's encoder as transformers computes it: word,
position and token-type embeddings and their LayerNorm; per layer, self-attention (Q, K, V projections,
heads, scaled dot products plus the additive attention mask, Softmax, the output projection, residual and
LayerNorm) and the feed-forward block (exact GELU, through Erf, residual and LayerNorm). Inputs: input_ids,
attention_mask, token_type_ids (int64, [batch, tokens]); output: `hidden`, the last hidden state. Pooling is
the caller's (numpy).

The graph is written in the form torch's export gives BERT (the mask unsqueezed before it is cast, the
scores and GELU's argument divided, not multiplied), so ONNX Runtime's transformer optimizer recognizes it:
`fuse` turns each layer's attention into one Attention op and each GELU with its bias into BiasGelu
(FUSION says which fusions; benchmarks/fused_encoder.py measured them).

Covered: config.json with model_type "bert", absolute positions and hidden_act "gelu"; anything else is
Unsupported (the caller falls back to torch or says which extra it needs). Whether the graph computes the
model's numbers is not assumed: resources/local_encoders.py checks it against torch's vectors.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from pathlib import Path

import numpy as np

INPUTS = ("input_ids", "attention_mask", "token_type_ids")
OPSET = 17  # LayerNormalization is an ONNX op from 17 on
# onnxruntime.transformers' fusions applied to the built graph; part of the export's cache key, so another
# choice builds the graph again. SkipLayerNormalization (the residual Add in the LayerNorm) is left out: on
# 2 AVX2 cores it was slower than the Add and ONNX Runtime's LayerNormalization (x1.09 of the unfused graph
# with it, x1.14 without; benchmarks/fused_encoder.py); EmbedLayerNormalization does not match this graph.
FUSION = {
    "attention": True,  # Q, K, V projections, heads, mask, Softmax and context in one Attention op
    "gelu": True,
    "bias_gelu": True,
    "skip_layer_norm": False,
    "embed_layer_norm": False,
}


class Unsupported(ValueError):
    """A model this builder does not cover (another architecture, activation or position scheme)."""


def _config(folder: Path) -> dict:
    config = json.loads((folder / "config.json").read_text())
    for key, wanted in (
        ("model_type", "bert"),
        ("position_embedding_type", "absolute"),
        ("hidden_act", "gelu"),
    ):
        if config.get(key, wanted) != wanted:
            raise Unsupported(f"{key}={config.get(key)!r} (the graph builder covers {key}={wanted!r})")
    if config["hidden_size"] % config["num_attention_heads"]:
        raise Unsupported("hidden_size is not a multiple of num_attention_heads")
    return config


def _weights(folder: Path) -> dict[str, np.ndarray]:
    """The model's tensors by their BertModel names (a "bert." prefix, as a task model saves it, dropped)."""
    from safetensors.numpy import load_file

    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise Unsupported(f"no .safetensors weights in {folder}")
    weights: dict[str, np.ndarray] = {}
    for f in files:
        weights.update(load_file(str(f)))
    return {k.removeprefix("bert."): v for k, v in weights.items()}


def build(folder: str | Path, fused: bool = True):
    """The onnx.ModelProto of the BERT encoder in `folder` (config.json + *.safetensors), with the fusions
    in FUSION unless not `fused`."""
    from onnx import TensorProto, helper, numpy_helper

    folder = Path(folder)
    config = _config(folder)
    w = _weights(folder)
    hidden, heads = int(config["hidden_size"]), int(config["num_attention_heads"])
    head_size, eps = hidden // heads, float(config.get("layer_norm_eps", 1e-12))
    nodes, initializers = [], []
    count = iter(range(1_000_000))

    def const(name: str, value) -> str:
        initializers.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def weight(name: str, transpose: bool = False) -> str:
        try:
            value = w[name]
        except KeyError:
            raise Unsupported(f"no tensor {name!r} in the weights") from None
        return const(name, np.ascontiguousarray(value.T if transpose else value).astype(np.float32))

    def op(kind: str, *inputs: str, **attrs) -> str:
        out = f"{kind.lower()}_{next(count)}"
        nodes.append(helper.make_node(kind, list(inputs), [out], **attrs))
        return out

    def dense(x: str, prefix: str) -> str:  # torch's Linear: x @ W.T + b
        return op("Add", op("MatMul", x, weight(f"{prefix}.weight", True)), weight(f"{prefix}.bias"))

    def layer_norm(x: str, prefix: str) -> str:
        return op(
            "LayerNormalization",
            x,
            weight(f"{prefix}.weight"),
            weight(f"{prefix}.bias"),
            axis=-1,
            epsilon=eps,
        )

    # embeddings: word + position (0..tokens-1) + token type, then LayerNorm
    tokens = op("Gather", op("Shape", "input_ids"), const("one_index", np.array(1, np.int64)), axis=0)
    positions = op("Range", const("zero", np.array(0, np.int64)), tokens, const("one", np.array(1, np.int64)))
    x = op("Gather", weight("embeddings.word_embeddings.weight"), "input_ids", axis=0)
    x = op("Add", x, op("Gather", weight("embeddings.position_embeddings.weight"), positions, axis=0))
    x = op(
        "Add", x, op("Gather", weight("embeddings.token_type_embeddings.weight"), "token_type_ids", axis=0)
    )
    x = layer_norm(x, "embeddings.LayerNorm")

    # the additive mask, [batch, 1, 1, tokens]: 0 where attended, float32's lowest where padded (as
    # transformers); unsqueezed, then cast: the order the attention fusion matches
    keep = op("Unsqueeze", "attention_mask", const("axis_1", np.array([1], np.int64)))
    keep = op("Cast", op("Unsqueeze", keep, const("axis_2", np.array([2], np.int64))), to=TensorProto.FLOAT)
    lowest = const("lowest", np.array(np.finfo(np.float32).min, np.float32))
    mask = op("Mul", op("Sub", const("one_float", np.array(1.0, np.float32)), keep), lowest)

    split_heads = const("split_heads", np.array([0, 0, heads, head_size], np.int64))
    merge_heads = const("merge_heads", np.array([0, 0, hidden], np.int64))
    # divisors, not their inverses: the fusions match a Div (the scores' sqrt(head size), GELU's sqrt 2)
    root_head = const("root_head", np.array(np.sqrt(head_size), np.float32))
    root_two = const("root_two", np.array(np.sqrt(2.0), np.float32))
    half = const("half", np.array(0.5, np.float32))
    one = const("one_float_gelu", np.array(1.0, np.float32))

    for i in range(int(config["num_hidden_layers"])):
        p = f"encoder.layer.{i}"

        def per_head(name: str, perm: list[int], x: str = x, p: str = p) -> str:
            return op(
                "Transpose", op("Reshape", dense(x, f"{p}.attention.self.{name}"), split_heads), perm=perm
            )

        q, k, v = (
            per_head("query", [0, 2, 1, 3]),
            per_head("key", [0, 2, 3, 1]),
            per_head("value", [0, 2, 1, 3]),
        )
        scores = op("Add", op("Div", op("MatMul", q, k), root_head), mask)
        context = op("MatMul", op("Softmax", scores, axis=-1), v)
        context = op("Reshape", op("Transpose", context, perm=[0, 2, 1, 3]), merge_heads)
        x = layer_norm(
            op("Add", dense(context, f"{p}.attention.output.dense"), x), f"{p}.attention.output.LayerNorm"
        )
        # the feed-forward block, GELU exact as BERT's: 0.5 x (1 + erf(x / sqrt 2))
        inner = dense(x, f"{p}.intermediate.dense")
        inner = op("Mul", op("Mul", inner, half), op("Add", op("Erf", op("Div", inner, root_two)), one))
        x = layer_norm(op("Add", dense(inner, f"{p}.output.dense"), x), f"{p}.output.LayerNorm")

    nodes.append(helper.make_node("Identity", [x], ["hidden"]))
    graph = helper.make_graph(
        nodes,
        "bert_encoder",
        [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "tokens"]) for n in INPUTS],
        [helper.make_tensor_value_info("hidden", TensorProto.FLOAT, ["batch", "tokens", hidden])],
        initializers,
    )
    # IR version 8 (ONNX 1.12, the first with opset 17): ONNX Runtime refuses an IR newer than it knows
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="rag-sweep", ir_version=8
    )
    return fuse(model, heads, hidden) if fused else model


def fuse(model, heads: int, hidden: int, fusion: dict[str, bool] | None = None):
    """`model` (as build() makes it) with ONNX Runtime's transformer fusions in `fusion` (default FUSION):
    fewer, larger operators computing the same numbers up to float rounding."""
    from onnxruntime.transformers.fusion_options import FusionOptions
    from onnxruntime.transformers.optimizer import optimize_model

    options = FusionOptions("bert")
    options.use_raw_attention_mask(True)  # the mask as fed: no assumption that padding is on the right
    for name, on in (FUSION if fusion is None else fusion).items():
        setattr(options, f"enable_{name}", on)
    options.enable_rotary_embeddings = False  # not a BERT part: skips its search
    # it warns that the producer is not "pytorch": this graph is built in torch's form on purpose
    logger = logging.getLogger("onnxruntime.transformers.optimizer")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        optimized = optimize_model(
            model,
            model_type="bert",
            num_heads=heads,
            hidden_size=hidden,
            optimization_options=options,
            opt_level=0,  # the Python fusions alone: the session applies ONNX Runtime's own when it loads
        )
    finally:
        logger.setLevel(level)
    return optimized.model


def fused_ops(model) -> dict[str, int]:
    """How many of each fused operator (ONNX Runtime's com.microsoft domain) the graph holds."""
    return dict(sorted(Counter(n.op_type for n in model.graph.node if n.domain == "com.microsoft").items()))
