"""FLOP of one 3DGAN training step, counted from the layers as run, by phase.

What is counted: the multiply-adds of Conv3D and Dense layers, 2 FLOP each, forward and
backward. A convolution's MACs are output elements x kernel volume x input channels (zeros
of 'same' padding included, as TensorFlow counts them). Backward of a layer = gradient with
respect to its weights (same MACs as forward) + gradient with respect to its input (same
MACs again), the latter only when something upstream needs it: not for the first layer of
the model being trained (its input is data or noise), but for every discriminator layer in
the generator steps, where the gradient flows through D into G. D's weight gradients are not
computed in the G steps (TensorFlow prunes them). Elementwise work (bias, activations,
BatchNorm, dropout, losses, optimizer updates) is not counted; TensorFlow's profiler does
count part of it and it stays below 2% of the total (tests/gan3d_model/test_flops.py).
These are the model's FLOP, the ones rates and "% of peak" divide: the packed forward of
gan3d.conv_forms.PackedConv3D also multiplies the zero half of its paired kernel, which
`executed_step_flops` adds for the comparison with what the graph's ops do. A float32 model
computes some convolutions in the frequency domain (gan3d.fft_conv), which do several times less
arithmetic than these counts: its FLOP/s are then model FLOP per second (the direct
convolution's count, the paper's convention), more than the arithmetic the CPU executed.

The step's phases (see gan3d.step): generate_fakes (G forward, inference), d_real and d_fake
(D forward + backward), g_step_1 and g_step_2 (G forward, D forward, D input-gradients, G
backward).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass

import numpy as np

PHASES = ("generate_fakes", "d_real", "d_fake", "g_step_1", "g_step_2")
MATMUL_CONV_OPS = ("Conv3D", "Conv3DBackpropInputV2", "Conv3DBackpropFilterV2", "MatMul")


@dataclass(frozen=True)
class LayerFlops:
    """Forward FLOP per sample of one weighted layer."""

    name: str
    kind: str
    output_shape: tuple[int, ...]
    forward: int
    takes_model_input: bool  # no input-gradient needed when training this model alone
    executed: (
        int  # forward FLOP the ops run: more than `forward` for a packed conv (zeros multiplied)
    )


def model_forward_flops(model) -> list[LayerFlops]:
    """Per-layer forward FLOP per sample of the Conv3D and Dense layers of a Keras model."""
    import tensorflow as tf

    from gan3d.conv_forms import PackedConv3D

    inputs = {id(t) for t in model.inputs}
    rows = []
    for layer in model.layers:
        if not isinstance(layer, (tf.keras.layers.Conv3D, tf.keras.layers.Dense)):
            continue
        out_shape = tuple(int(d) for d in layer.output_shape[1:])
        cin = int(layer.input_shape[-1])
        if isinstance(layer, tf.keras.layers.Conv3D):
            macs = int(np.prod(out_shape)) * int(np.prod(layer.kernel_size)) * cin
        elif isinstance(layer, tf.keras.layers.Dense):
            macs = cin * int(layer.units)
        executed = macs
        # ceil(w/2) positions x 2 co channels, kernel one wider in w
        if isinstance(layer, PackedConv3D):
            (d, h, w, co), (kd, kh, kw) = out_shape, layer.kernel_size
            executed = d * h * -(-w // 2) * 2 * co * kd * kh * (kw + 1) * cin
        first = any(id(t) in inputs for t in _as_list(layer.input))
        rows.append(
            LayerFlops(
                name=layer.name,
                kind=type(layer).__name__,
                output_shape=out_shape,
                forward=2 * macs,
                takes_model_input=first,
                executed=2 * executed,
            )
        )
    return rows


def _as_list(x) -> list:
    return list(x) if isinstance(x, (list, tuple)) else [x]


def _weight_grads(layers: list[LayerFlops]) -> int:
    return sum(layer.forward for layer in layers)


def _input_grads(layers: list[LayerFlops], include_first: bool) -> int:
    return sum(layer.forward for layer in layers if include_first or not layer.takes_model_input)


def step_flops_detail(preset: str, batch_size: int) -> dict[str, dict[str, int]]:
    """{phase: {"forward": F, "backward": B}} for one step at `batch_size` showers per rank."""
    from gan3d.model import discriminator, generator

    g = model_forward_flops(generator(preset))
    d = model_forward_flops(discriminator(preset))
    g_fwd, d_fwd = _weight_grads(g), _weight_grads(d)
    d_train_bwd = _weight_grads(d) + _input_grads(d, include_first=False)
    g_train_bwd = (
        _input_grads(d, include_first=True)
        + _weight_grads(g)
        + _input_grads(g, include_first=False)
    )
    per_sample = {
        "generate_fakes": (g_fwd, 0),
        "d_real": (d_fwd, d_train_bwd),
        "d_fake": (d_fwd, d_train_bwd),
        "g_step_1": (g_fwd + d_fwd, g_train_bwd),
        "g_step_2": (g_fwd + d_fwd, g_train_bwd),
    }
    return {
        k: {"forward": f * batch_size, "backward": b * batch_size}
        for k, (f, b) in per_sample.items()
    }


def step_flops(preset: str, batch_size: int) -> dict[str, int]:
    """FLOP of one training step: each phase, `forward`, `backward` and `total`.

    The phase values sum to `total`, and so do `forward` and `backward`.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size}: must be at least 1")
    detail = step_flops_detail(preset, batch_size)
    out = {phase: v["forward"] + v["backward"] for phase, v in detail.items()}
    out["forward"] = sum(v["forward"] for v in detail.values())
    out["backward"] = sum(v["backward"] for v in detail.values())
    out["total"] = out["forward"] + out["backward"]
    return out


def executed_step_flops(preset: str, batch_size: int) -> int:
    """FLOP the step's convolution and matmul ops run with direct convolutions (models built with
    fft=False): `step_flops` total plus the zeros that packed forwards multiply (G runs forward 3
    times a step, D 4 times; gradients are not packed)."""
    from gan3d.model import discriminator, generator

    extra = {
        m: sum(r.executed - r.forward for r in model_forward_flops(m))
        for m in (generator(preset, fft=False), discriminator(preset, fft=False))
    }
    g_extra, d_extra = extra.values()
    return step_flops(preset, batch_size)["total"] + batch_size * (3 * g_extra + 4 * d_extra)


# -- TensorFlow's own count ----------------------------------------------------------------
def register_conv3d_backprop_statistics() -> None:
    """Teach TensorFlow's profiler the FLOP of the 3-D convolution gradients.

    TF 2.15 registers FLOP statistics for Conv3D but none for its two gradient ops, so the
    profiler would silently count them as zero. Each gradient does exactly the forward
    convolution's MACs: out_backprop elements x kernel volume x input channels, 2 FLOP each.
    """
    from tensorflow.python.framework import ops

    def stats(graph, node, filter_from):
        from tensorflow.python.framework import graph_util

        out_backprop = graph_util.tensor_shape_from_node_def_name(graph, node.input[2])
        kernel = graph_util.tensor_shape_from_node_def_name(graph, filter_from(node))
        out_backprop.assert_is_fully_defined()
        kernel.assert_is_fully_defined()
        k = kernel.as_list()
        return ops.OpStats(
            "flops",
            int(np.prod(out_backprop.as_list(), dtype=np.int64)) * k[0] * k[1] * k[2] * k[3] * 2,
        )

    for op_type, filter_from in (
        ("Conv3DBackpropInputV2", lambda n: n.input[1]),
        ("Conv3DBackpropFilterV2", lambda n: n.name),
    ):
        try:
            ops.RegisterStatistics(op_type, "flops")(lambda g, n, f=filter_from: stats(g, n, f))
        except KeyError:  # already registered in this process
            pass


def executed_op_names(graph) -> set[str]:
    """Ops of a tf.function graph that run: ancestors of its outputs and control outputs.

    Gradient functions build ops nobody uses (e.g. the input-gradient of a layer fed by data);
    TensorFlow prunes them before running the function, so the count must skip them too.
    """
    stack = [t.op for t in graph.outputs] + list(graph.control_outputs)
    seen: set[str] = set()
    while stack:
        op = stack.pop()
        if op.name in seen:
            continue
        seen.add(op.name)
        stack.extend(t.op for t in op.inputs)
        stack.extend(op.control_inputs)
    return seen


def profiler_flops(graph, executed_only: bool = True) -> dict[str, int]:
    """FLOP by op type according to TensorFlow's graph profiler, of the ops that run.

    `executed_only=False` counts every op of the graph, also those TensorFlow prunes.
    """
    import tensorflow as tf

    register_conv3d_backprop_statistics()
    opts = tf.compat.v1.profiler.ProfileOptionBuilder.float_operation()
    opts["output"] = "none"
    prof = tf.compat.v1.profiler.profile(graph, cmd="scope", options=opts)
    run = executed_op_names(graph) if executed_only else {op.name for op in graph.get_operations()}
    by_type: dict[str, int] = {}
    stack = list(prof.children)
    while stack:
        node = stack.pop()
        stack.extend(node.children)
        if node.name in run and node.float_ops:
            op_type = graph.get_operation_by_name(node.name).type
            by_type[op_type] = by_type.get(op_type, 0) + int(node.float_ops)
    return by_type


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gan3d flops", description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="full", help="model preset (full, tiny)")
    ap.add_argument("--batch-size", type=int, default=16, help="showers per rank per step")
    ap.add_argument(
        "--layers", action="store_true", help="also print per-layer forward FLOP per shower"
    )
    args = ap.parse_args(argv)
    from gan3d.model import PRESETS, discriminator, generator

    if args.preset not in PRESETS:
        ap.error(f"--preset {args.preset!r}: choose one of {sorted(PRESETS)}")
    if args.batch_size < 1:
        ap.error(f"--batch-size {args.batch_size}: must be at least 1")
    out: dict = step_flops(args.preset, args.batch_size)
    if args.layers:
        out = {
            "step": out,
            "layers": {
                m.name: [asdict(r) for r in model_forward_flops(m)]
                for m in (generator(args.preset), discriminator(args.preset))
            },
        }
    json.dump(out, sys.stdout, indent=2)
    print()
    return 0
