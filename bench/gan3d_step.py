"""Benchmark of the full-size 3DGAN training step and of its convolution kernels.

    .venv/bin/python bench/gan3d_step.py [--batch-size 16] [--steps 4] [--repeat 3] [--layers] [--fused-ab]
    .venv/bin/python bench/gan3d_step.py --floors [--repeat 5] [--steps 2] [--profile --precision bf16]
    .venv/bin/python bench/gan3d_step.py --forms [--repeat 5] [--steps 3]
    .venv/bin/python bench/gan3d_step.py --elementwise [--repeat 5] [--steps 3]

Prints a markdown table: the measured matmul peak (2048^2 float32), the paper's "single
convolution kernel" (forward + backward of D's 32->8 channel 5^3 convolution, batch 16), and
the whole step at 1 rank x 2 threads and 2 ranks x 1 thread (`mpiexec -n 2`, Horovod), each
as showers/s, GFLOP/s, % of the theoretical FP32 peak and % of the measured matmul peak.
`--layers` adds where the time goes: every convolution's forward, input-gradient and
weight-gradient at the shapes of the step. Each configuration runs in a fresh process
(thread pools are fixed at TF start-up); the best of `--repeat` timings is reported with the
load average at the time, since the machine is shared.

`--floors` checks the throughput floors as ratios measured in ONE process (batch 16,
2 threads, interleaved rounds): the kit's step in fp32 and in bf16 against the reference
Keras layer structure as CERN wrote it (plain Conv3D layers, D's ZeroPadding3D + VALID pairs)
in fp32, with the CPU model and its bf16 flags printed above the table (ratios of the best
wall times, the median of per-round wall ratios, and the median of per-round CPU-time ratios,
which a loaded machine disturbs least); and, with 2 ranks under mpiexec, the bf16 step with
gradients all-reduced in fp32 against fp16 compression. `--profile` breaks one step down by
oneDNN primitive (ONEDNN_VERBOSE) and by TensorFlow op type (tf.profiler: casts, elementwise
ops, BatchNorm, dropout's random numbers, optimizer). `--forms` times every convolution of the
model (its passes of one step: forward and gradients as often as the step runs them, D's halved)
in every form it can take (oneDNN's own, packed, col2im, depth-folded, the frequency domain in
fp32) in one process, interleaved: what `gan3d train --forms auto` probes at
start, and what the fixed table gan3d.model.FFT_LAYERS (`--forms fft`) was chosen from.
`--elementwise` times every BatchNorm and Dropout layer (forward + gradients) as Keras has it
(the reference structure's) and as gan3d.fast_layers has it (the kit's), interleaved.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gan3d import cpu  # noqa: E402
from gan3d.demo import find_mpiexec  # noqa: E402
from kit.site import load_site  # noqa: E402

# this machine, as the built-in laptop site describes it (the same figure the results JSON uses): None,
# since the laptop VM's clock is unknown; the columns then say so and the measured peak is the yardstick
THEORETICAL = load_site("laptop").node.theoretical_peak_flops()


def _of_theoretical(rate: float) -> str:
    return "unknown" if THEORETICAL is None else f"{100 * rate / THEORETICAL:.1f}%"


CONV_SPECS = {  # name: (input shape incl. padding, kernel, padding) as run in the step
    "d_conv1 1->32": ((25, 25, 25, 1), (5, 5, 5, 1, 32), "SAME"),
    "d_conv2 32->8": (
        (25, 25, 25, 32),
        (5, 5, 5, 32, 8),
        "SAME",
    ),  # ZeroPadding3D fused (gan3d.conv_forms)
    "d_conv3 8->8": ((25, 25, 25, 8), (5, 5, 5, 8, 8), "SAME"),
    "d_conv4 8->8": ((27, 27, 27, 8), (5, 5, 5, 8, 8), "VALID"),
    "g_conv1 8->64": ((7, 7, 8, 8), (6, 6, 8, 8, 64), "SAME"),
    "g_conv2 64->6": ((18, 18, 16, 64), (6, 5, 8, 64, 6), "VALID"),
    "g_conv3 6->6": ((28, 28, 33, 6), (3, 3, 8, 6, 6), "VALID"),
    "g_conv4 6->1": ((26, 26, 26, 6), (2, 2, 2, 6, 1), "VALID"),
}


# -- workers (run in their own process) --------------------------------------------------------
def _tf(threads: int, inter: int):
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(inter)
    return tf


def _best_time(fn, sync, reps: int, repeat: int) -> float:
    sync(fn())
    sync(fn())
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(reps):
            out = fn()
        sync(out)
        best = min(best, (time.perf_counter() - t0) / reps)
    return best


def _conv_ops(tf, x, w, dy, pad: str) -> dict:
    """One convolution's forward pass and both gradients, each a traced function of its own."""
    return {
        "forward": tf.function(lambda: tf.nn.conv3d(x, w, [1] * 5, pad)),
        "input_grad": tf.function(
            lambda: tf.raw_ops.Conv3DBackpropInputV2(
                input_sizes=tf.constant(x.shape.as_list()),
                filter=w,
                out_backprop=dy,
                strides=[1] * 5,
                padding=pad,
            )
        ),
        "weight_grad": tf.function(
            lambda: tf.raw_ops.Conv3DBackpropFilterV2(
                input=x,
                filter_sizes=tf.constant(w.shape.as_list()),
                out_backprop=dy,
                strides=[1] * 5,
                padding=pad,
            )
        ),
    }


def worker_conv(args) -> dict:
    """Per-op times of each convolution of the model at the step's shapes."""
    tf = _tf(args.threads, args.inter_op_threads)
    rows = {}
    names = [n for n in CONV_SPECS if args.only is None or n.split()[0] in args.only.split(",")]
    for name in names:
        ishape, kshape, pad = CONV_SPECS[name]
        x = tf.random.stateless_normal((args.batch_size,) + ishape, [1, 2])
        w = tf.random.stateless_normal(kshape, [3, 4]) * 0.05
        y = tf.nn.conv3d(x, w, [1] * 5, pad)
        dy = tf.random.stateless_normal(y.shape, [5, 6])
        flop = 2 * int(tf.size(y)) * kshape[0] * kshape[1] * kshape[2] * kshape[3]
        ops = _conv_ops(tf, x, w, dy, pad)
        rows[name] = {"flop": flop}
        for op, fn in ops.items():
            t = _best_time(fn, lambda o: o.numpy(), 3, args.repeat)
            rows[name][op] = t
    return {"layers": rows}


def worker_kernel(args) -> dict:
    """The paper's single convolution kernel: D's 32->8 5^3 conv, forward + both gradients."""
    tf = _tf(args.threads, args.inter_op_threads)
    b = args.batch_size
    x25 = tf.random.stateless_normal((b, 25, 25, 25, 32), [1, 2])
    w = tf.Variable(tf.random.stateless_normal((5, 5, 5, 32, 8), [3, 4]) * 0.05)

    from gan3d.conv_forms import packed_conv3d

    def fwd_bwd(x, conv):
        @tf.function
        def run():
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = conv(x, w)
                loss = tf.reduce_sum(y * y) * 0.5  # dL/dy = y: a full-size upstream gradient
            return tape.gradient(loss, [x, w])

        return run

    flop = 3 * 2 * b * 25**3 * 8 * 125 * 32  # forward + input-gradient + weight-gradient
    # as the model runs it (gan3d.conv_forms.packed_conv3d), and as the reference does: VALID on
    # the ZeroPadding3D output (the pad is part of the layer pair), and plain tf.nn.conv3d SAME
    pads = [[0, 0], [2, 2], [2, 2], [2, 2], [0, 0]]
    forms = {
        "seconds": lambda x, k: packed_conv3d(x, k, "SAME"),
        "seconds_reference": lambda x, k: tf.nn.conv3d(tf.pad(x, pads), k, [1] * 5, "VALID"),
        "seconds_same": lambda x, k: tf.nn.conv3d(x, k, [1] * 5, "SAME"),
    }
    return {
        "flop": flop,
        **{
            key: _best_time(fwd_bwd(x25, conv), lambda o: o[1].numpy(), 3, args.repeat)
            for key, conv in forms.items()
        },
    }


def worker_step(args) -> dict:
    """Whole training steps of the full model on random showers, optionally under Horovod."""
    tf = _tf(args.threads, args.inter_op_threads)
    import numpy as np

    from gan3d import flops, model, step

    hvd = None
    if args.hvd:
        import horovod.tensorflow as hvd

        hvd.init()
    rank = hvd.rank() if hvd else 0
    tf.keras.utils.set_random_seed(1 + rank)
    s = step.TrainStep(
        model.generator(args.preset, args.precision),
        model.discriminator(args.preset, args.precision),
        config=step.StepConfig(seed=1),
        hvd=hvd,
    )
    rng = np.random.default_rng(rank)
    b = args.batch_size
    images = (
        rng.gamma(0.3, 0.05, (b, 25, 25, 25, 1)) * (rng.random((b, 25, 25, 25, 1)) < 0.2)
    ).astype("f4")
    ep = rng.uniform(0.1, 5.0, b).astype("f4")
    batch = s._inputs(images, ep, images.sum(axis=(1, 2, 3, 4)))
    t = _best_time(lambda: s(*batch), lambda o: o["g_loss"].numpy(), args.steps, args.repeat)
    local_peak = None
    if not hvd:  # the same process's matmul rate right after: a load-robust yardstick
        from gan3d.peak import measure_peak_flops

        local_peak = measure_peak_flops(seconds=1.0)
    if hvd:  # the job's step time is the slowest rank's
        t = float(hvd.allreduce(tf.constant(t), op=hvd.Max))
        if rank != 0:
            return {}
    ranks = hvd.size() if hvd else 1
    return {
        "seconds": t,
        "flop": flops.step_flops(args.preset, b)["total"] * ranks,
        "showers": b * ranks,
        "local_peak": local_peak,
    }


def worker_fused_ab(args) -> dict:
    """Interleaved A/B in one process: D's pad-2 convs as the reference pair, plain SAME,
    SameConv3D.
    """
    tf = _tf(args.threads, args.inter_op_threads)
    import numpy as np

    from gan3d import flops, model, step

    direct = dict.fromkeys(model.LAYER_FORMS, "direct")

    def reference(x, filters, pad, i, forms):
        x = tf.keras.layers.ZeroPadding3D(pad, name=f"d_pad{i}")(x)
        return model._conv(filters, (5, 5, 5), "valid", f"d_conv{i}", direct)(x)

    def plain_same(x, filters, pad, i, forms):
        return (
            model._conv(filters, (5, 5, 5), "same", f"d_conv{i}", direct)(x)
            if pad == 2
            else reference(x, filters, pad, i, forms)
        )

    fused = model._padded_conv
    b = args.batch_size
    rng = np.random.default_rng(0)
    images = (
        rng.gamma(0.3, 0.05, (b, 25, 25, 25, 1)) * (rng.random((b, 25, 25, 25, 1)) < 0.2)
    ).astype("f4")
    ep = rng.uniform(0.1, 5.0, b).astype("f4")
    runs = {}
    try:
        for name, conv in (
            ("reference ZeroPadding3D + VALID", reference),
            ("Keras Conv3D 'same'", plain_same),
            ("PackedConv3D 'same' (as committed)", fused),
        ):
            model._padded_conv = conv
            tf.keras.utils.set_random_seed(1)
            s = step.TrainStep(
                model.generator(args.preset, fft=False),
                model.discriminator(args.preset, fft=False),
                config=step.StepConfig(seed=1),
            )
            runs[name] = (s, s._inputs(images, ep, images.sum(axis=(1, 2, 3, 4))))
    finally:
        model._padded_conv = fused
    for s, batch in runs.values():
        s(*batch)["g_loss"].numpy()
        s(*batch)["g_loss"].numpy()
    best = dict.fromkeys(runs, float("inf"))
    for _ in range(args.repeat):  # rounds: each variant in turn, so load changes hit all alike
        for name, (s, batch) in runs.items():
            t0 = time.perf_counter()
            for _ in range(args.steps):
                out = s(*batch)
            out["g_loss"].numpy()
            best[name] = min(best[name], (time.perf_counter() - t0) / args.steps)
    return {"flop": flops.step_flops(args.preset, b)["total"], "showers": b, "seconds": best}


@contextlib.contextmanager
def reference_structure():
    """Build the models as CERN's Keras code has them: D's ZeroPadding3D + VALID Conv3D pairs
    (gan3d.model fuses the pad-2 pairs), Keras' own BatchNormalization, Dropout and Conv3D
    (gan3d.model uses gan3d.fast_layers' and, in bf16, adds the bias in float32); build them with
    forms=reference_forms() (plain Conv3D)."""
    import tensorflow as tf

    from gan3d import model

    def padded(x, filters, pad, i, forms):
        x = tf.keras.layers.ZeroPadding3D(pad, name=f"d_pad{i}")(x)
        return model._conv(filters, (5, 5, 5), "valid", f"d_conv{i}", forms)(x)

    saved = model._padded_conv, model.DROPOUT, model.FORM_CLASSES["direct"]
    model._padded_conv, model.DROPOUT = padded, tf.keras.layers.Dropout
    model.FORM_CLASSES["direct"] = tf.keras.layers.Conv3D
    try:
        with model.batch_norm_class(tf.keras.layers.BatchNormalization):
            yield
    finally:
        model._padded_conv, model.DROPOUT, model.FORM_CLASSES["direct"] = saved


def reference_forms() -> dict:
    """Every convolution as Keras' own Conv3D (oneDNN's kernels), as the reference has them."""
    from gan3d import model

    return dict.fromkeys(model.LAYER_FORMS, "direct")


def _interleaved(runs: dict, steps: int, repeat: int) -> tuple[dict, dict]:
    """Wall and CPU seconds per step of each (step, batch) in `runs`, per round, in rounds that
    run every variant in turn (a load change then hits all variants alike). CPU time (all of
    this process's threads) counts only the time the step was on a core: on a shared machine
    it moves far less with the other users' load than the wall clock does."""
    for s, batch in runs.values():
        s(*batch)["g_loss"].numpy()
        s(*batch)["g_loss"].numpy()
    rounds, cpu_rounds = {name: [] for name in runs}, {name: [] for name in runs}
    for _ in range(repeat):
        for name, (s, batch) in runs.items():
            t0, c0 = time.perf_counter(), time.process_time()
            for _ in range(steps):
                out = s(*batch)
            out["g_loss"].numpy()
            rounds[name].append((time.perf_counter() - t0) / steps)
            cpu_rounds[name].append((time.process_time() - c0) / steps)
    return rounds, cpu_rounds


def _random_batch(s, b: int, seed: int):
    import numpy as np

    rng = np.random.default_rng(seed)
    images = (
        rng.gamma(0.3, 0.05, (b, 25, 25, 25, 1)) * (rng.random((b, 25, 25, 25, 1)) < 0.2)
    ).astype("f4")
    return s._inputs(images, rng.uniform(0.1, 5.0, b).astype("f4"), images.sum(axis=(1, 2, 3, 4)))


FLOOR_VARIANTS = {  # name: (reference structure?, precision, FFT_LAYERS in fp32?, or "probe")
    "reference structure fp32": (True, "fp32", False),
    "kit fp32": (False, "fp32", True),
    "kit fp32, forms probed here": (False, "fp32", "probe"),
    "kit fp32, direct convolutions": (False, "fp32", False),
    "kit bf16": (False, "bf16", True),
    "kit bf16, forms probed here": (False, "bf16", "probe"),
    "reference structure bf16": (True, "bf16", False),
}


def worker_floors(args) -> dict:
    """The throughput floors in one process: each variant's step, interleaved rounds."""
    tf = _tf(args.threads, args.inter_op_threads)
    from gan3d import flops, model, step

    runs, probed = {}, {}
    for name, (reference, precision, fft) in FLOOR_VARIANTS.items():
        if precision == "bf16" and _isa_unit() is None:
            continue
        if reference:
            forms = reference_forms()
        elif fft == "probe":
            t0 = time.perf_counter()
            forms = _probe_forms(args, precision)
            probed[precision] = {"forms": forms, "seconds": time.perf_counter() - t0}
        else:
            forms = model.fixed_forms(precision, fft)
        tf.keras.utils.set_random_seed(1)
        with reference_structure() if reference else contextlib.nullcontext():
            s = step.TrainStep(
                model.generator(args.preset, precision, forms=forms),
                model.discriminator(args.preset, precision, forms=forms),
                config=step.StepConfig(seed=1),
            )
        runs[name] = (s, _random_batch(s, args.batch_size, 0))
    rounds, cpu_rounds = _interleaved(runs, args.steps, args.repeat)
    return {
        "flop": flops.step_flops(args.preset, args.batch_size)["total"],
        "showers": args.batch_size,
        "rounds": rounds,
        "cpu_rounds": cpu_rounds,
        "probed_forms": probed,
    }


def _probe_forms(args, precision: str) -> dict:
    """The forms `gan3d train --forms probe` would choose here (gan3d.formprobe), not cached."""
    from gan3d import formprobe, model

    candidates = formprobe.tf_candidates(args.preset, precision, args.batch_size)
    first = {name: forms[0] for name, forms in model.candidate_forms(precision).items()}
    steps = formprobe.tf_steps(args.preset, precision, args.batch_size)
    return formprobe.check_by_steps(formprobe.probe(candidates, first), steps).forms


def worker_forms(args) -> dict:
    """Every convolution of the model in every form it can take (gan3d.model.LAYER_FORMS), its
    passes of one step at the step's shapes (gan3d.formprobe's callables), in interleaved rounds:
    what gan3d.model.FFT_LAYERS was chosen from, and what `gan3d train --forms auto` probes."""
    _tf(args.threads, args.inter_op_threads)
    from gan3d import formprobe

    runs = formprobe.tf_candidates(args.preset, args.precision, args.batch_size)
    for forms in runs.values():
        for fn in forms.values():
            fn()
    rounds: dict[str, dict[str, list]] = {}
    cpu_rounds: dict[str, dict[str, list]] = {}
    for _ in range(args.repeat):
        for name, forms in runs.items():
            for form, fn in forms.items():
                t0, c0 = time.perf_counter(), time.process_time()
                for _ in range(args.steps):
                    fn()
                rounds.setdefault(name, {}).setdefault(form, []).append(
                    (time.perf_counter() - t0) / args.steps
                )
                cpu_rounds.setdefault(name, {}).setdefault(form, []).append(
                    (time.process_time() - c0) / args.steps
                )
    return {"rounds": rounds, "cpu_rounds": cpu_rounds}


def worker_elementwise(args) -> dict:
    """Every BatchNorm and Dropout layer of the model, forward + gradients at its input shape, as
    Keras has it (the reference) and as gan3d.fast_layers has it, in interleaved rounds."""
    tf = _tf(args.threads, args.inter_op_threads)
    from gan3d import model

    def timed(layer, shape):
        x = tf.random.stateless_uniform(shape, seed=(1, 2))
        dy = tf.random.stateless_uniform(shape, seed=(3, 4))

        @tf.function
        def run():
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = layer(x, training=True)
            return tape.gradient(y, [x, *layer.trainable_variables], output_gradients=dy)

        return lambda: run()[0].numpy()

    runs = {}
    for m in (model.generator(args.preset), model.discriminator(args.preset)):
        for layer in m.layers:
            if isinstance(layer, (model.BATCH_NORM, model.DROPOUT)):
                keras_cls = (
                    tf.keras.layers.BatchNormalization
                    if isinstance(layer, model.BATCH_NORM)
                    else tf.keras.layers.Dropout
                )
                config = {k: v for k, v in layer.get_config().items() if k != "name"}
                shape = (args.batch_size, *layer.input.shape[1:])
                runs[f"{layer.name} {'×'.join(map(str, shape[1:]))}"] = {
                    "keras": timed(keras_cls.from_config(config), shape),
                    "kit": timed(type(layer).from_config(config), shape),
                }
    for forms in runs.values():
        for fn in forms.values():
            fn()
    rounds: dict[str, dict[str, list]] = {name: {"keras": [], "kit": []} for name in runs}
    for _ in range(args.repeat):
        for name, forms in runs.items():
            for form, fn in forms.items():
                t0 = time.perf_counter()
                for _ in range(args.steps):
                    fn()
                rounds[name][form].append((time.perf_counter() - t0) / args.steps)
    return {"rounds": rounds}


def worker_allreduce(args) -> dict:
    """2 ranks (mpiexec, Horovod): the step with gradients all-reduced in fp32 vs fp16,
    interleaved.
    """
    tf = _tf(args.threads, args.inter_op_threads)
    import horovod.tensorflow as hvd

    from gan3d import model, step

    hvd.init()
    runs = {}
    for wire in ("fp32", "fp16"):
        tf.keras.utils.set_random_seed(1)
        s = step.TrainStep(
            model.generator(args.preset, args.precision),
            model.discriminator(args.preset, args.precision),
            config=step.StepConfig(seed=1, allreduce_dtype=wire),
            hvd=hvd,
        )
        runs[wire] = (s, _random_batch(s, args.batch_size, hvd.rank()))
    rounds, _ = _interleaved(runs, args.steps, args.repeat)
    slowest = {
        k: [float(hvd.allreduce(tf.constant(t), op=hvd.Max)) for t in v] for k, v in rounds.items()
    }
    return {"rounds": slowest, "showers": args.batch_size * hvd.size()} if hvd.rank() == 0 else {}


def worker_profile(args) -> dict:
    """Warm up, print a marker, run one step: the parent reads ONEDNN_VERBOSE lines after it."""
    _tf(args.threads, args.inter_op_threads)  # thread settings, before any op runs
    import numpy as np

    from gan3d import model, step

    s = step.TrainStep(
        model.generator(args.preset, args.precision),
        model.discriminator(args.preset, args.precision),
        config=step.StepConfig(seed=1),
    )
    rng = np.random.default_rng(0)
    images = rng.gamma(0.3, 0.05, (args.batch_size, 25, 25, 25, 1)).astype("f4")
    batch = s._inputs(
        images, rng.uniform(0.1, 5.0, args.batch_size).astype("f4"), images.sum(axis=(1, 2, 3, 4))
    )
    s(*batch)["g_loss"].numpy()
    s(*batch)["g_loss"].numpy()
    print(PROFILE_MARK, flush=True)
    t0 = time.perf_counter()
    s(*batch)["g_loss"].numpy()
    return {"seconds": time.perf_counter() - t0}


def worker_op_profile(args) -> dict:
    """Milliseconds per TensorFlow op type over one warmed-up step (tf.profiler): what oneDNN's
    log cannot show (casts, Eigen elementwise ops, BatchNorm, dropout's random numbers, optimizer)."""
    tf = _tf(args.threads, args.inter_op_threads)
    import tempfile

    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    from gan3d import model, step

    s = step.TrainStep(
        model.generator(args.preset, args.precision),
        model.discriminator(args.preset, args.precision),
        config=step.StepConfig(seed=1),
    )
    batch = _random_batch(s, args.batch_size, 0)
    s(*batch)["g_loss"].numpy()
    s(*batch)["g_loss"].numpy()
    with tempfile.TemporaryDirectory() as logdir:
        tf.profiler.experimental.start(logdir)
        t0 = time.perf_counter()
        s(*batch)["g_loss"].numpy()
        wall = time.perf_counter() - t0
        tf.profiler.experimental.stop()
        space = xplane_pb2.XSpace()
        space.ParseFromString(next(Path(logdir).rglob("*.xplane.pb")).read_bytes())
    host = next(p for p in space.planes if p.name == "/host:CPU")
    ops: dict[str, list] = {}
    for line in host.lines:
        if not line.name.startswith("tf_Compute"):  # the executor's thread: one event per op run
            continue
        for e in line.events:
            name = host.event_metadata[e.metadata_id].name
            if ":" in name:  # "scope/op_name:OpType"; other events (Process, ParallelFor) nest
                row = ops.setdefault(name.rsplit(":", 1)[1], [0, 0.0])
                row[0] += 1
                row[1] += e.duration_ps / 1e9
    return {"seconds": wall, "ops": ops}


PROFILE_MARK = "=== profiled step ==="
KIND = {
    "forward_training": "forward",
    "backward_data": "input-grad",
    "backward_weights": "weight-grad",
}


def conv_name(desc: str) -> str:
    """Layer name of a oneDNN convolution descriptor like mb16_ic32oc8_id29od25..."""
    import re

    m = re.search(r"ic(\d+)oc(\d+)_id(\d+)", desc)
    if m:
        ic, oc, idepth = map(int, m.groups())
        for name, (ishape, kshape, _pad) in CONV_SPECS.items():
            if (kshape[3], kshape[4], ishape[0]) == (ic, oc, idepth):
                return name
            if (kshape[3], 2 * kshape[4], ishape[0]) == (ic, oc, idepth):
                return name + " (packed)"  # gan3d.conv_forms.packed_forward: 2x the output channels
    return desc


def onednn_profile(args) -> tuple[list[tuple[str, str, int, float]], float]:
    """Time per (layer, op) of one whole step from oneDNN's own verbose log, and the step's wall ms.

    The wall time less the primitives' sum is what runs outside oneDNN: casts, Eigen elementwise
    ops, the optimizer updates, TensorFlow's own overhead."""
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--worker",
        "profile",
        "--threads",
        "2",
        "--inter-op-threads",
        str(args.inter_op_threads),
        "--batch-size",
        str(args.batch_size),
        "--preset",
        args.preset,
        "--precision",
        args.precision,
    ]
    env = dict(
        os.environ,
        TF_CPP_MIN_LOG_LEVEL="2",
        ONEDNN_VERBOSE="1",
        PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    )
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stdout
    agg: dict[tuple[str, str], list] = {}
    wall_ms = 1e3 * json.loads([ln for ln in out.splitlines() if ln.startswith("{")][-1])["seconds"]
    for line in out.split(PROFILE_MARK, 1)[1].splitlines():
        f = line.split(",")
        if len(f) < 6 or f[0] != "onednn_verbose" or f[1] != "exec":
            continue
        prim, kind, desc, ms = f[3], f[5], f[-2], float(f[-1])
        key = (
            (conv_name(desc), KIND.get(kind, kind))
            if prim == "convolution"
            else (prim, _dtype_pair(f[6]))
        )
        agg.setdefault(key, [0, 0.0])
        agg[key][0] += 1
        agg[key][1] += ms
    return sorted(((k[0], k[1], v[0], v[1]) for k, v in agg.items()), key=lambda r: -r[3]), wall_ms


def _dtype_pair(md: str) -> str:
    """ "bf16→f32" from a descriptor like "src_bf16::blocked:... dst_f32::blocked:...": what a
    reorder converts shows whether it is a layout change or a precision cast."""
    types = [
        part.split("_")[1].split(":")[0] for part in md.split() if part.startswith(("src_", "dst_"))
    ]
    return "→".join(types)


def worker_peak(args) -> dict:
    from gan3d.peak import measure_peak_flops

    return {"flop_per_second": measure_peak_flops(args.threads, seconds=2.0)}


TUNING = {  # variant: (threads, inter-op threads, batch size, extra environment)
    "baseline: intra 2, inter 1, oneDNN on (TF default)": (2, 1, 16, {}),
    "inter-op 2": (2, 2, 16, {}),
    "oneDNN off (TF_ENABLE_ONEDNN_OPTS=0, Eigen kernels)": (
        2,
        1,
        16,
        {"TF_ENABLE_ONEDNN_OPTS": "0"},
    ),
    "batch 32": (2, 1, 32, {}),
    "batch 8": (2, 1, 8, {}),
}

WORKERS = {
    "conv": worker_conv,
    "kernel": worker_kernel,
    "step": worker_step,
    "peak": worker_peak,
    "profile": worker_profile,
    "op_profile": worker_op_profile,
    "fused_ab": worker_fused_ab,
    "floors": worker_floors,
    "forms": worker_forms,
    "elementwise": worker_elementwise,
    "allreduce": worker_allreduce,
}


# -- driver -------------------------------------------------------------------------------------
def run_worker(
    kind: str, args, threads: int, ranks: int = 1, extra_env: dict | None = None
) -> dict:
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--worker",
        kind,
        "--threads",
        str(threads),
        "--inter-op-threads",
        str(args.inter_op_threads),
        "--batch-size",
        str(args.batch_size),
        "--steps",
        str(args.steps),
        "--repeat",
        str(args.repeat),
        "--preset",
        args.preset,
        "--precision",
        args.precision,
    ]
    if args.only:
        cmd += ["--only", args.only]
    if ranks > 1:
        cmd = [find_mpiexec(), "-n", str(ranks)] + cmd + ["--hvd"]  # MPICH's: Horovod's MPI
    env = dict(
        os.environ,
        TF_CPP_MIN_LOG_LEVEL="2",
        OMP_NUM_THREADS=str(threads),
        PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    )
    env.update(extra_env or {})
    if args.isa:
        env["ONEDNN_MAX_CPU_ISA"] = args.isa
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"bench worker {kind} failed ({' '.join(cmd)}):\n{proc.stderr[-3000:]}")
    # under mpiexec only rank 0 prints its line (main)
    outs = [json.loads(ln) for ln in proc.stdout.splitlines() if ln.startswith("{")]
    return next((o for o in reversed(outs) if o), {})


def _load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--steps", type=int, default=4, help="steps per timing")
    ap.add_argument(
        "--repeat", type=int, default=3, help="timings per configuration (best is kept)"
    )
    ap.add_argument(
        "--inter-op-threads",
        type=int,
        default=2,
        help="TensorFlow inter-op threads (default: gan3d train's)",
    )
    ap.add_argument("--preset", default="full")
    ap.add_argument("--layers", action="store_true", help="also time every convolution op")
    ap.add_argument(
        "--tune",
        action="store_true",
        help="also time the step (1 rank x 2 threads) under each tuning variant of TUNING",
    )
    ap.add_argument(
        "--profile",
        action="store_true",
        help="also break one step down by oneDNN primitive (ONEDNN_VERBOSE=1)",
    )
    ap.add_argument(
        "--fused-ab",
        action="store_true",
        help="also A/B the step (1x2, one process, interleaved) "
        "with D's pad-2 convs as the reference ZeroPadding3D + VALID pair, Keras 'same' and SameConv3D",
    )
    ap.add_argument(
        "--floors",
        action="store_true",
        help="only the throughput floors: kit fp32 / bf16 vs the reference structure in one process, "
        "and the 2-rank all-reduce in fp32 vs fp16",
    )
    ap.add_argument(
        "--forms",
        action="store_true",
        help="only every convolution (its passes of one step, gan3d.formprobe.step_passes) "
        "in each of its forms (direct, packed, col2im, folded, frequency domain), one process, "
        "interleaved: what gan3d train --forms auto probes",
    )
    ap.add_argument(
        "--elementwise",
        action="store_true",
        help="only every BatchNorm and Dropout layer (fwd + grads) "
        "as Keras has it and as gan3d.fast_layers has it, one process, interleaved",
    )
    ap.add_argument(
        "--precision",
        choices=["fp32", "bf16"],
        default="fp32",
        help="precision of the whole-step rows, --profile and the all-reduce A/B",
    )
    ap.add_argument(
        "--isa",
        choices=ISA_UNITS,
        help="cap oneDNN's instruction set (ONEDNN_MAX_CPU_ISA) in the workers: "
        "a stand-in for a CPU family this machine is not (same cores, caches and clocks; "
        "only the kernels change)",
    )
    ap.add_argument("--only", help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=2, help=argparse.SUPPRESS)
    ap.add_argument("--worker", choices=WORKERS, help=argparse.SUPPRESS)
    ap.add_argument("--hvd", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        out = WORKERS[args.worker](args)
        if out or not args.hvd:  # one line from rank 0 only: mpiexec may join the ranks' lines
            print(json.dumps(out), flush=True)
        return 0
    capped = f"; oneDNN capped at {args.isa} (ONEDNN_MAX_CPU_ISA)" if args.isa else ""
    print(f"CPU: {cpu.describe()}{capped}; load {_load()} at start\n")
    if args.floors:
        return floors(args)
    if args.forms:
        return forms(args)
    if args.elementwise:
        return elementwise(args)

    peak = run_worker("peak", args, 2)["flop_per_second"]
    rows = [("dense matmul 2048² fp32 (measured peak)", "1×2", None, peak, _load())]
    k = run_worker("kernel", args, 2)
    rows.append(
        (
            "D conv 32→8 5³ fwd+bwd (single kernel) as the model runs it (gan3d.conv_forms.packed_conv3d)",
            "1×2",
            None,
            k["flop"] / k["seconds"],
            _load(),
        )
    )
    rows.append(
        (
            "same kernel as the reference: ZeroPadding3D + VALID on 29³",
            "1×2",
            None,
            k["flop"] / k["seconds_reference"],
            _load(),
        )
    )
    rows.append(
        (
            "same kernel as tf.nn.conv3d SAME on 25³",
            "1×2",
            None,
            k["flop"] / k["seconds_same"],
            _load(),
        )
    )
    for ranks, threads in ((1, 2), (2, 1)):
        s = run_worker("step", args, threads, ranks)
        rows.append(
            (
                f"training step, batch {args.batch_size}/rank",
                f"{ranks}×{threads}",
                s["showers"] / s["seconds"],
                s["flop"] / s["seconds"],
                _load(),
            )
        )
    theoretical = "unknown" if THEORETICAL is None else f"{THEORETICAL / 1e9:.0f} GFLOP/s"
    print(
        f"| what | ranks×threads | showers/s | GFLOP/s | % of theoretical fp32 peak ({theoretical}) "
        f"| % of measured matmul peak | load |"
    )
    print("|---|---|---|---|---|---|---|")
    for what, layout, showers, rate, load in rows:
        sh = f"{showers:.2f}" if showers else "–"
        print(
            f"| {what} | {layout} | {sh} | {rate / 1e9:.1f} | {_of_theoretical(rate)} "
            f"| {100 * rate / peak:.1f}% | {load} |"
        )
    if args.tune:
        print(
            "\n| step variant (1 rank) | showers/s | GFLOP/s | % of theoretical | "
            "% of matmul peak measured in the same process | load |"
        )
        print("|---|---|---|---|---|---|")
        for name, (threads, inter, batch, env) in TUNING.items():
            variant = argparse.Namespace(
                **{**vars(args), "inter_op_threads": inter, "batch_size": batch}
            )
            s = run_worker("step", variant, threads, 1, env)
            rate = s["flop"] / s["seconds"]
            print(
                f"| {name} | {s['showers'] / s['seconds']:.2f} | {rate / 1e9:.1f} | "
                f"{_of_theoretical(rate)} | {100 * rate / s['local_peak']:.1f}% | {_load()} |",
                flush=True,
            )
    if args.fused_ab:
        ab = run_worker("fused_ab", args, 2)
        print(
            f"\n| step, D's pad-2 convs as (interleaved, best of {args.repeat} rounds) | showers/s | GFLOP/s "
            "| % of theoretical | load |"
        )
        print("|---|---|---|---|---|")
        for name, t in ab["seconds"].items():
            rate = ab["flop"] / t
            print(
                f"| {name} | {ab['showers'] / t:.2f} | {rate / 1e9:.1f} | {_of_theoretical(rate)} "
                f"| {_load()} |"
            )
    if args.profile:
        print_profile(args)
    if args.layers:
        conv = run_worker("conv", args, 2)["layers"]
        print(
            f"\n| convolution (batch {args.batch_size}, 1×2) | forward GFLOP/s | input-grad GFLOP/s "
            "| weight-grad GFLOP/s | ms fwd / in / w |"
        )
        print("|---|---|---|---|---|")
        for name, r in conv.items():
            f = r["flop"]
            print(
                f"| {name} | {f / r['forward'] / 1e9:.1f} | {f / r['input_grad'] / 1e9:.1f} | "
                f"{f / r['weight_grad'] / 1e9:.1f} | "
                f"{1e3 * r['forward']:.1f} / {1e3 * r['input_grad']:.1f} / {1e3 * r['weight_grad']:.1f} |"
            )
    return 0


FLOORS = {"amx": 3.0, "avx512_bf16": 1.6}  # bf16 step / reference fp32 step, per bf16 unit
# oneDNN's ISA caps (--isa) -> the bf16 unit the kernels may use under the cap
ISA_UNITS = {
    "AVX2": None,
    "AVX512_CORE": None,
    "AVX512_CORE_VNNI": None,
    "AVX512_CORE_BF16": "avx512_bf16",
    "AVX512_CORE_AMX": "amx",
}


def _isa_unit(isa: str | None = None) -> str | None:
    """The bf16 unit the kernels may use: this CPU's, below the ISA cap (the workers see it in
    ONEDNN_MAX_CPU_ISA)."""
    isa = isa or os.environ.get("ONEDNN_MAX_CPU_ISA")
    here = cpu.bf16_support()
    if not isa or here is None:
        return here
    capped = ISA_UNITS.get(isa.upper())
    return "avx512_bf16" if (capped, here) == ("amx", "avx512_bf16") else capped


FP32_FLOOR = 2.0  # fp32 step / reference fp32 step, on every CPU family


def _verdict(ratio: float, floor: float, unit: str) -> str:
    """The floor and whether the median of rounds meets it."""
    return f"≥ {floor}{unit}: {'met' if ratio >= floor else 'NOT met'}"


def floors(args) -> int:
    """Print the floor table (ratios within one process) and the all-reduce A/B."""
    f = run_worker("floors", args, 2)
    best = {k: min(v) for k, v in f["rounds"].items()}
    ref = "reference structure fp32"
    unit = _isa_unit(args.isa)
    print(
        f"| step, batch {args.batch_size}, 1×2 (one process, "
        f"{args.repeat} interleaved rounds × {args.steps} steps) | best s/step | showers/s | "
        "GFLOP/s | × reference fp32 (best) | × reference fp32 (median of rounds) | "
        "× reference fp32 (CPU s/step, median of rounds) | floor |"
    )
    print("|---|---|---|---|---|---|---|---|")
    cpu_rounds = f["cpu_rounds"]
    for name, t in best.items():
        per_round = statistics.median(r / v for r, v in zip(f["rounds"][ref], f["rounds"][name]))
        per_cpu = statistics.median(r / v for r, v in zip(cpu_rounds[ref], cpu_rounds[name]))
        floor = {
            "kit fp32": _verdict(per_round, FP32_FLOOR, ""),
            "kit bf16": _verdict(per_round, FLOORS[unit], f" ({unit})")
            if unit
            else "n/a (no bf16 unit)",
        }
        floor["kit bf16, forms probed here"] = floor["kit bf16"]  # gan3d train's default: auto
        print(
            f"| {name} | {t:.3f} | {f['showers'] / t:.2f} | {f['flop'] / t / 1e9:.1f} | {best[ref] / t:.2f} "
            f"| {per_round:.2f} | {per_cpu:.2f} | {floor.get(name, '')} |"
        )
    for precision, probed in f.get("probed_forms", {}).items():
        print(f"\nforms probed here ({precision}, {probed['seconds']:.1f} s): {probed['forms']}")
    print(f"\nload {_load()} at the end of the one-process run")
    a = run_worker("allreduce", args, 1, ranks=2)
    print(
        f"\n| 2 ranks × 1 thread, {args.precision} step, batch {args.batch_size}/rank, interleaved "
        "| best s/step (slowest rank) | median s/step | showers/s |"
    )
    print("|---|---|---|---|")
    for wire, times in a["rounds"].items():
        print(
            f"| gradients all-reduced in {wire} | {min(times):.3f} | {statistics.median(times):.3f} "
            f"| {a['showers'] / min(times):.2f} |"
        )
    print(f"\nload {_load()} at the end")
    if args.profile:
        print_profile(args)
    return 0


def forms(args) -> int:
    """Print each convolution's best time in every form, the fastest form by the median of rounds
    (wall and CPU time), and the form of the fixed table (gan3d.model.fixed_forms: --forms fft)."""
    from gan3d.model import fixed_forms

    f = run_worker("forms", args, 2)
    fixed = fixed_forms(args.precision)
    names = ("direct", "packed", "col2im", "folded", "fft")
    print(
        f"| convolution, one step's passes (D's halved), {args.precision}, "
        f"batch {args.batch_size}, 1×2 ({args.repeat} interleaved rounds × {args.steps}) | "
        + " | ".join(f"{n}, best ms" for n in names)
        + " | fastest (median wall) | fastest (median CPU s) | --forms fft |"
    )
    print("|---" * (len(names) + 4) + "|")
    for name, r in f["rounds"].items():
        c = f["cpu_rounds"][name]
        cells = [f"{1e3 * min(r[n]):.1f}" if n in r else "–" for n in names]
        wall = min(r, key=lambda n: statistics.median(r[n]))
        cpu_s = min(c, key=lambda n: statistics.median(c[n]))
        print(f"| {name} | {' | '.join(cells)} | {wall} | {cpu_s} | {fixed[name]} |")
    print(f"\nload {_load()} at the end")
    return 0


def elementwise(args) -> int:
    """Print each BatchNorm and Dropout layer's best time as Keras has it and as the kit has it,
    and the median of the rounds' ratios."""
    e = run_worker("elementwise", args, 2)
    print(
        f"| layer, fwd + grads, batch {args.batch_size}, "
        f"1×2 ({args.repeat} interleaved rounds × {args.steps}) | Keras, best ms | "
        "kit (gan3d.fast_layers), best ms | × (median of rounds) |"
    )
    print("|---|---|---|---|")
    for name, r in e["rounds"].items():
        ratio = statistics.median(k / f for k, f in zip(r["keras"], r["kit"]))
        print(f"| {name} | {1e3 * min(r['keras']):.1f} | {1e3 * min(r['kit']):.1f} | {ratio:.2f} |")
    print(f"\nload {_load()} at the end")
    return 0


def print_profile(args) -> None:
    rows, wall_ms = onednn_profile(args)
    total = sum(r[3] for r in rows)
    print(
        f"\n| oneDNN primitive in one step (1×2, batch {args.batch_size}, {args.precision}) "
        "| op | calls | ms | share of oneDNN |"
    )
    print("|---|---|---|---|---|")
    for name, op, calls, ms in rows:
        if ms >= 0.005 * total:
            print(f"| {name} | {op} | {calls} | {ms:.0f} | {100 * ms / total:.1f}% |")
    print(
        f"| all oneDNN primitives | | {sum(r[2] for r in rows)} | {total:.0f} "
        f"| {100 * total / wall_ms:.0f}% of the step |"
    )
    print(
        f"| outside oneDNN (casts, Eigen elementwise, optimizer, TF) | | | {wall_ms - total:.0f} "
        f"| {100 * (wall_ms - total) / wall_ms:.0f}% of the step |"
    )
    print(f"| the step (wall) | | | {wall_ms:.0f} | load {_load()} |")
    p = run_worker("op_profile", args, 2)
    wall_ms, ops = 1e3 * p["seconds"], sorted(p["ops"].items(), key=lambda kv: -kv[1][1])
    print(
        f"\n| TensorFlow op type in one step (1×2, batch {args.batch_size}, {args.precision}, tf.profiler) "
        "| calls | ms | share of the step |"
    )
    print("|---|---|---|---|")
    for op, (calls, ms) in ops:
        if ms >= 0.005 * wall_ms:
            print(f"| {op} | {calls} | {ms:.0f} | {100 * ms / wall_ms:.1f}% |")
    print(f"| the step (wall, under the profiler) | | {wall_ms:.0f} | load {_load()} |")


if __name__ == "__main__":
    sys.exit(main())
