"""A BERT-family encoder's ONNX graph, built from its safetensors weights with numpy and onnx.helper alone.

The default embedder runs in ONNX Runtime; building its graph here (not exporting it from torch) is what lets
the default install go without torch. The graph is BERT's encoder as transformers computes it: word,
position and token-type embeddings and their LayerNorm; per layer, self-attention (Q, K, V projections,
heads, scaled dot products plus the additive attention mask, Softmax, the output projection, residual and
LayerNorm) and the feed-forward block (exact GELU, through Erf, residual and LayerNorm). Inputs: input_ids,
attention_mask, token_type_ids (int64, [batch, tokens]); output: `hidden`, the last hidden state. Pooling is
the caller's (numpy).

Covered: config.json with model_type "bert", absolute positions and hidden_act "gelu"; anything else is
Unsupported (the caller falls back to torch or says which extra it needs). Whether the graph computes the
model's numbers is not assumed: resources/local_encoders.py checks it against torch's vectors.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

INPUTS = ("input_ids", "attention_mask", "token_type_ids")
OPSET = 17  # LayerNormalization is an ONNX op from 17 on


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


def build(folder: str | Path):
    """The onnx.ModelProto of the BERT encoder in `folder` (config.json + *.safetensors)."""
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

    # the additive mask, [batch, 1, 1, tokens]: 0 where attended, float32's lowest where padded (as transformers)
    keep = op("Cast", "attention_mask", to=TensorProto.FLOAT)
    lowest = const("lowest", np.array(np.finfo(np.float32).min, np.float32))
    mask = op("Mul", op("Sub", const("one_float", np.array(1.0, np.float32)), keep), lowest)
    mask = op("Unsqueeze", mask, const("mask_axes", np.array([1, 2], np.int64)))

    split_heads = const("split_heads", np.array([0, 0, heads, head_size], np.int64))
    merge_heads = const("merge_heads", np.array([0, 0, hidden], np.int64))
    scale = const("scale", np.array(1.0 / np.sqrt(head_size), np.float32))
    root_half = const("root_half", np.array(1.0 / np.sqrt(2.0), np.float32))
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
        scores = op("Add", op("Mul", op("MatMul", q, k), scale), mask)
        context = op("MatMul", op("Softmax", scores, axis=-1), v)
        context = op("Reshape", op("Transpose", context, perm=[0, 2, 1, 3]), merge_heads)
        x = layer_norm(
            op("Add", dense(context, f"{p}.attention.output.dense"), x), f"{p}.attention.output.LayerNorm"
        )
        # the feed-forward block, GELU exact as BERT's: 0.5 x (1 + erf(x / sqrt 2))
        inner = dense(x, f"{p}.intermediate.dense")
        inner = op("Mul", op("Mul", inner, half), op("Add", op("Erf", op("Mul", inner, root_half)), one))
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
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="rag-sweep", ir_version=8
    )
