"""Which form each convolution runs fastest in on this machine, measured at the start of a run.

Which form of a convolution wins (oneDNN's own, packed channels, the col2im input-gradient, the
depth-folded first layer, the frequency domain) depends on the CPU family, the thread count and
the batch: a table measured on one machine chose wrongly on another. The probe times every form of
every layer, its passes of one training step (forward and gradients, as often as the step runs
them) at the step's shapes, in interleaved rounds (a change of load hits all forms alike), and
keeps the form with the lowest median time; the layer's first form (`gan3d.model.LAYER_FORMS`)
stays unless another is faster by more than `MARGIN`, so that noise does not flip a tie.

The timing (`time_forms`) and the choice (`choose`) take plain callables and a clock, so that
they are tested without TensorFlow or real timings; `tf_candidates` builds the real callables.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

MARGIN = 0.05  # another form must be this much faster (median) to replace a layer's first form
BUDGET_SECONDS = 4.0  # timed rounds stop when they have taken this long (MIN_ROUNDS at least)
MIN_ROUNDS, MAX_ROUNDS = 2, 3
DROP_ABOVE = 2.0  # after a round, a form this many times slower than its layer's best drops out

Candidates = Mapping[str, Mapping[str, Callable[[], object]]]  # layer -> form -> one timed call


@dataclass(frozen=True)
class Probe:
    """What a probe measured and chose: per layer and form the seconds of each round."""

    forms: dict[str, str]
    seconds: dict[str, dict[str, list[float]]]
    rounds: int
    wall_seconds: float  # the whole probe, warm-up (tracing) included
    # `check_by_steps`: seconds per step of each set of forms timed, and the set kept
    steps: dict | None = None

    def median_ms(self) -> dict[str, dict[str, float]]:
        return {
            layer: {form: round(1e3 * statistics.median(t), 3) for form, t in forms.items()}
            for layer, forms in self.seconds.items()
        }

    def record(self) -> dict:
        """The probe as a results record states it."""
        return {
            "rounds": self.rounds,
            "seconds": round(self.wall_seconds, 3),
            "median_ms": self.median_ms(),
            "steps": self.steps,
        }


def time_forms(
    candidates: Candidates,
    *,
    min_rounds: int = MIN_ROUNDS,
    max_rounds: int = MAX_ROUNDS,
    budget: float = BUDGET_SECONDS,
    drop_above: float = DROP_ABOVE,
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[dict[str, dict[str, list[float]]], int]:
    """Each callable once untimed (tracing, oneDNN's primitive creation), then rounds of every
    layer's forms in turn: `min_rounds`, then more until `max_rounds` or until the rounds have
    taken `budget` seconds; a form much slower than
    its layer's best after a round drops out (its times so far kept). Returns (seconds per call per
    round, rounds run)."""
    for forms in candidates.values():
        for fn in forms.values():
            fn()
    times: dict[str, dict[str, list[float]]] = {
        layer: {form: [] for form in forms} for layer, forms in candidates.items()
    }
    live: dict[str, list[str]] = {layer: list(forms) for layer, forms in candidates.items()}
    start, rounds = clock(), 0
    while rounds < max_rounds and (rounds < max(1, min_rounds) or clock() - start < budget):
        for layer, names in live.items():
            for form in names:
                t0 = clock()
                candidates[layer][form]()
                times[layer][form].append(clock() - t0)
        rounds += 1
        for layer, names in live.items():
            fastest = min(times[layer][f][-1] for f in names)
            names[:] = [f for f in names if times[layer][f][-1] <= drop_above * fastest]
    return times, rounds


def choose(
    times: Mapping[str, Mapping[str, list[float]]],
    first: Mapping[str, str],
    margin: float = MARGIN,
) -> dict[str, str]:
    """Per layer the form with the lowest median time; `first[layer]` unless the winner is faster
    than it by more than `margin`."""
    chosen = {}
    for layer, forms in times.items():
        medians = {form: statistics.median(t) for form, t in forms.items() if t}
        best = min(medians, key=medians.__getitem__)
        keep = first[layer]
        if keep in medians and medians[best] >= (1 - margin) * medians[keep]:
            best = keep
        chosen[layer] = best
    return chosen


def probe(
    candidates: Candidates,
    first: Mapping[str, str],
    *,
    min_rounds: int = MIN_ROUNDS,
    max_rounds: int = MAX_ROUNDS,
    budget: float = BUDGET_SECONDS,
    clock: Callable[[], float] = time.perf_counter,
) -> Probe:
    """Time `candidates` (`time_forms`) and choose each layer's form (`choose`)."""
    t0 = clock()
    tf_log = logging.getLogger("tensorflow")
    level = tf_log.level
    # not "N calls triggered tf.function retracing": 20 first calls do
    tf_log.setLevel(logging.ERROR)
    try:
        times, rounds = time_forms(
            candidates, min_rounds=min_rounds, max_rounds=max_rounds, budget=budget, clock=clock
        )
    finally:
        tf_log.setLevel(level)
    return Probe(choose(times, first), times, rounds, clock() - t0)


# The sets of forms `check_by_steps` times as whole steps: the probe's choice, and the same without
# the frequency domain (each such layer in its fastest other form).
CHOSEN, WITHOUT_FFT = "probe's choice", "without the frequency domain"
STEP_ROUNDS = 3
# Whole steps are timed only where the layer probe finds the frequency domain saves less than this
# share of the convolutions' time: a larger saving (2-3x per layer in float32) no step misjudges.
CHECK_BELOW = 0.15


def predicted_saving(probe: Probe, other: Mapping[str, str]) -> float:
    """The share of one step's convolution time the probe's choice saves against `other`, from the
    probe's medians, each layer's as often as one step runs its passes (`step_share_times`)."""

    def total(forms: Mapping[str, str]) -> float:
        return sum(
            step_share_times(layer) * statistics.median(probe.seconds[layer][form])
            for layer, form in forms.items()
        )

    return 1 - total(probe.forms) / total(other)


def without_frequency_domain(probe: Probe) -> dict[str, str]:
    """The probe's choice with each frequency-domain layer in its fastest other form."""
    out = {}
    for layer, form in probe.forms.items():
        others = {
            f: statistics.median(t) for f, t in probe.seconds[layer].items() if t and f != "fft"
        }
        out[layer] = min(others, key=others.__getitem__) if form == "fft" and others else form
    return out


def check_by_steps(
    probe: Probe,
    steps: Callable[[Mapping[str, Mapping[str, str]]], Mapping[str, Callable[[], object]]],
    *,
    rounds: int = STEP_ROUNDS,
    clock: Callable[[], float] = time.perf_counter,
) -> Probe:
    """Settle the frequency domain by whole training steps: `steps(sets)` gives one step's callable
    per set of forms, timed in interleaved rounds; the probe's choice stays unless the set without
    the frequency domain is faster by more than MARGIN. The layer probe times each layer alone with
    its data in cache, which favours the memory-bound transforms: on a Xeon with AMX in bf16 it
    chose them for layers where whole steps ran 6-8% slower with them (docs/benchmarks.md). Where
    the probe finds them saving CHECK_BELOW or more, no step is timed."""
    alternative = without_frequency_domain(probe)
    if alternative == probe.forms or predicted_saving(probe, alternative) >= CHECK_BELOW:
        return probe
    t0 = clock()
    sets = {CHOSEN: probe.forms, WITHOUT_FFT: alternative}
    times, _ = time_forms(
        {"step": steps(sets)},
        min_rounds=rounds,
        max_rounds=rounds,
        budget=0.0,
        drop_above=float("inf"),
        clock=clock,
    )
    kept = choose(times, {"step": CHOSEN})["step"]
    record = {name: [round(t, 4) for t in times["step"][name]] for name in sets} | {"kept": kept}
    return dataclasses.replace(
        probe,
        forms=dict(sets[kept]),
        wall_seconds=probe.wall_seconds + clock() - t0,
        steps=record,
    )


def _one_step(s, inputs) -> object:
    return s(*inputs)["g_loss"].numpy()


def tf_steps(
    preset: str, precision: str, batch: int
) -> Callable[[Mapping[str, Mapping[str, str]]], dict[str, Callable[[], object]]]:
    """`check_by_steps`'s `steps`: per set of forms a training step (gan3d.step, no Horovod) of
    the run's shape on a random batch."""

    def build(sets: Mapping[str, Mapping[str, str]]) -> dict[str, Callable[[], object]]:
        import numpy as np

        from gan3d import model, step

        rng = np.random.default_rng(0)
        images = rng.gamma(0.3, 0.05, (batch, *model.IMAGE_SHAPE)).astype("f4")
        out: dict[str, Callable[[], object]] = {}
        for name, forms in sets.items():
            s = step.TrainStep(
                model.generator(preset, precision, forms=forms),
                model.discriminator(preset, precision, forms=forms),
            )
            inputs = (
                images,
                rng.uniform(0.1, 5.0, batch).astype("f4"),
                images.sum(axis=(1, 2, 3, 4)),
            )
            out[name] = functools.partial(_one_step, s, inputs)
        return out

    return build


# What one training step (gan3d.step) asks of each convolution, as passes of (the gradients each
# needs): D runs forward and both gradients for its two updates and forward and the input-gradient
# for the two G updates (the first layer's input is data: no input-gradient in D's updates), halved
# here; G runs forward once for the fakes and forward and both gradients for its two updates. A
# form's time for this mix is its share of the step, so a form with a fast backward but a slow
# forward is weighed as the step weighs it. Each ends with a kernel gradient (what a call returns).
D_PASSES = (("input",), ("input", "kernel"))
D_FIRST_PASSES = (("input",), ("kernel",))
G_PASSES = ((), ("input", "kernel"), ("input", "kernel"))


def step_passes(layer: str) -> tuple[tuple[str, ...], ...]:
    """The passes of `layer` in one step (halved for D): see D_PASSES, D_FIRST_PASSES, G_PASSES."""
    if layer == "d_conv1":
        return D_FIRST_PASSES
    return D_PASSES if layer.startswith("d_") else G_PASSES


def step_share_times(layer: str) -> int:
    """How many times `step_passes(layer)` one step runs (D's are the step's halved)."""
    return 2 if layer.startswith("d_") else 1


def tf_candidates(preset: str, precision: str, batch: int) -> dict[str, dict[str, Callable]]:
    """Per layer and form the layer's passes of one step (`step_passes`) at the step's shapes and
    dtypes (random inputs, the layer's initial kernel), as the model runs them: the form's class's
    own convolution op, traced once as a tf.function. Each pass has its own input, so that no pass
    is another's common subexpression."""
    import tensorflow as tf

    from gan3d import model

    precision = model.check_precision(precision)
    direct = dict.fromkeys(model.LAYER_FORMS, "direct")
    dtype = tf.float32 if precision == "fp32" else tf.bfloat16
    nets = (
        model.generator(preset, precision, forms=direct),
        model.discriminator(preset, precision, forms=direct),
    )
    layers = {layer.name: layer for net in nets for layer in net.layers}
    out: dict[str, dict[str, Callable]] = {}
    for seed, (name, forms) in enumerate(model.candidate_forms(precision).items()):
        layer, passes = layers[name], step_passes(name)
        # in the dtype the model hands the layer (float32 after the float32 elementwise layers,
        # bfloat16 after a bf16 padding or upsampling), so a form pays the cast the step pays
        xs = [
            tf.cast(
                tf.random.stateless_normal((batch, *layer.input_shape[1:]), [seed, i]),
                layer.input.dtype,
            )
            for i in range(len(passes))
        ]
        out[name] = {}
        for form in forms:
            op = getattr(model.FORM_CLASSES[form], "convolution_op")  # noqa: B009 (a Keras class)
            # the frequency domain computes in float32 in a bf16 model too (its layer casts)
            compute = tf.float32 if form == "fft" else dtype
            w = tf.cast(tf.convert_to_tensor(layer.kernel), compute)

            def step_share(inputs, k, *, op=op, layer=layer, compute=compute, passes=passes):
                results = []
                for a, wrt in zip(inputs, passes):
                    with tf.GradientTape() as tape:
                        tape.watch([a, k])
                        y = op(layer, tf.cast(a, compute), k)
                    sources = [{"input": a, "kernel": k}[g] for g in wrt]
                    results += (
                        tape.gradient(y, sources, output_gradients=tf.ones_like(y))
                        if sources
                        else [y]
                    )
                return results

            fn = tf.function(step_share, autograph=False)  # plain ops: nothing to convert
            out[name][form] = lambda fn=fn, xs=xs, w=w: fn(xs, w)[-1].numpy()
    return out
