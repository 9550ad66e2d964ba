"""Which form each convolution runs fastest in on this machine, measured in a few seconds.

Which form of a convolution wins (oneDNN's own, packed channels, the col2im input-gradient, the
frequency domain) depends on the CPU family, the thread count and the batch: a table measured on
one machine chose wrongly on another. The probe times every form of every layer, forward and both
gradients at the step's shapes, in interleaved rounds (a change of load hits all forms alike), and
keeps the form with the lowest median time; the layer's first form (`gan3d.model.LAYER_FORMS`)
stays unless another is faster by more than `MARGIN`, so that noise does not flip a tie.

The timing (`time_forms`) and the choice (`choose`) take plain callables and a clock, so that
they are tested without TensorFlow or real timings; `tf_candidates` builds the real callables.
"""

from __future__ import annotations

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
    tf_log.setLevel(
        logging.ERROR
    )  # not "N calls triggered tf.function retracing": 20 first calls do
    try:
        times, rounds = time_forms(
            candidates, min_rounds=min_rounds, max_rounds=max_rounds, budget=budget, clock=clock
        )
    finally:
        tf_log.setLevel(level)
    return Probe(choose(times, first), times, rounds, clock() - t0)


def tf_candidates(preset: str, precision: str, batch: int) -> dict[str, dict[str, Callable]]:
    """Per layer and form one forward + both gradients of that convolution at the step's shapes
    (random input, the layer's initial kernel), as the model runs it: the form's class's own
    convolution op, traced once as a tf.function."""
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
        layer = layers[name]
        x = tf.cast(tf.random.stateless_normal((batch, *layer.input_shape[1:]), [seed, 1]), dtype)
        out[name] = {}
        for form in forms:
            op = getattr(model.FORM_CLASSES[form], "convolution_op")  # noqa: B009 (a Keras class)
            # the frequency domain computes in float32 in a bf16 model too (its layer casts)
            compute = tf.float32 if form == "fft" else dtype
            w = tf.cast(tf.convert_to_tensor(layer.kernel), compute)

            def fwd_bwd(a, k, *, op=op, layer=layer, compute=compute):
                with tf.GradientTape() as tape:
                    tape.watch([a, k])
                    y = op(layer, tf.cast(a, compute), k)
                return tape.gradient(y, [a, k], output_gradients=tf.ones_like(y))

            fn = tf.function(fwd_bwd, autograph=False)  # plain ops: nothing to convert
            out[name][form] = lambda fn=fn, x=x, w=w: fn(x, w)[1].numpy()
    return out
