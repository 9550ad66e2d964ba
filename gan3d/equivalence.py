"""Is a bf16-trained generator physically the same as an fp32 one? Compared against seed noise.

Trainings on the same showers, same batches, same number of steps: fp32 once per seed (two or
more), and bf16 from the first of those seeds (one or more) in each set of layer forms asked for
(`BF16_FORMS`: bfloat16 convolutions, the float32 frequency domain). Each generator then makes
showers from the same latent noise and energies; their cell-sum/Ep (mean and spread) and mean
longitudinal and transverse profiles are compared. The yardstick is how far fp32 runs land from
each other: a bf16 run passes a statistic when it lands no farther from the fp32 run of its seed
than the farthest other fp32 seed does. Early in training a bf16 run stays near the fp32 run of
its seed and passes by far; once runs have forgotten their seed, an equivalent bf16 run is just
another sample and misses with probability 1/(fp32 seeds) per statistic, so more seeds make a
sharper check. Used by the test (tiny preset) and by bench/gan3d_bf16_physics.py (full preset).

Another stack (Intel Extension for TensorFlow, in a venv of its own) is compared the same way: its
Python runs `python -m gan3d.equivalence --showers NPZ`, one training on the same showers, and
prints its statistics as one JSON line with whether ITEX's kernels were mapped.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from gan3d import itex, model, step
from gan3d.validate import shower_features

STATISTICS = ("cellsum_over_ep", "profile_z", "profile_x", "profile_y")


# The bf16 runs a comparison can make: the built-in forms (bfloat16 convolutions), and the fixed
# table's layers in the float32 frequency domain (what a probe chooses on a CPU with a bf16 unit and
# no AMX, docs/benchmarks.md).
BF16_FORMS: dict[str, dict[str, str]] = {
    "fixed": model.fixed_forms("bf16"),
    "fft": {**model.fixed_forms("bf16"), **dict.fromkeys(sorted(model.FFT_LAYERS), "fft")},
}


def new_step(preset: str, precision: str, forms: Mapping[str, str] | None = None) -> step.TrainStep:
    return step.TrainStep(
        model.generator(preset, precision, forms=forms),
        model.discriminator(preset, precision, forms=forms),
        config=step.StepConfig(seed=0),
    )


def train_from_seed(
    s: step.TrainStep,
    preset: str,
    precision: str,
    *,
    seed: int,
    showers,
    steps: int,
    batch: int,
    seconds: float | None = None,
) -> int:
    """Train `s` for `steps` steps (fewer if `seconds` run out first; returns how many it took)
    from the initial state of `seed`: the weights Keras draws for that seed (the same in any layer
    forms, so `s` may be built in any), zeroed optimizer slots, noise and dropout streams keyed by
    the seed; batches in order from `showers` = (images, ep, cellsum). Reusing one step for several
    seeds spares a trace of the step function, most of the cost of a short run."""
    images, ep, cellsum = showers
    tf.keras.utils.set_random_seed(seed)
    for mine, fresh in (
        (s.generator, model.generator(preset, precision)),
        (s.discriminator, model.discriminator(preset, precision)),
    ):
        mine.set_weights(fresh.get_weights())
    # RMSprop and Adam start from zeros
    for var in s.d_optimizer.variables + s.g_optimizer.variables:
        var.assign(tf.zeros_like(var))
    s.reseed(0, seed)
    batches = max(1, len(images) // batch)
    start = time.monotonic()
    for i in range(steps):
        lo = (i % batches) * batch
        losses = s(images[lo : lo + batch], ep[lo : lo + batch], cellsum[lo : lo + batch])
        if not np.isfinite(float(losses["g_loss"])):
            raise FloatingPointError(
                f"{precision} seed {seed}: losses became NaN/Inf at step {i + 1}"
            )
        if seconds is not None and time.monotonic() - start > seconds:
            return i + 1
    return steps


def shower_statistics(
    generator: tf.keras.Model, latent_dim: int, showers: int, *, seed: int = 11
) -> dict:
    """Cell-sum/Ep (mean, spread) and unit-sum mean profiles of showers from fixed noise and
    energies.
    """
    ep = np.random.default_rng(seed).uniform(0.5, 4.5, (showers, 1)).astype(np.float32)
    parts = []
    for lo in range(0, showers, 64):
        z = model.sample_latent(
            len(ep[lo : lo + 64]), ep[lo : lo + 64], latent_dim, rng_or_seed=seed + lo
        )
        parts.append(generator(z, training=False).numpy())
    f = shower_features(np.concatenate(parts), ep)
    stats = {"cellsum_over_ep": np.array([f["cellsum_over_ep"].mean(), f["cellsum_over_ep"].std()])}
    for axis in ("z", "x", "y"):
        mean = f[f"profile_{axis}"].mean(axis=0)
        stats[f"profile_{axis}"] = mean / mean.sum() if mean.sum() > 0 else mean
    return stats


def distances(a: dict, b: dict) -> dict[str, float]:
    """L1 distance per statistic (profiles: each in [0, 2]; cell-sum/Ep: |Δmean| + |Δstd|)."""
    return {k: float(np.abs(a[k] - b[k]).sum()) for k in STATISTICS}


def seed_spread(runs: Mapping[int, dict]) -> dict[int, dict[str, float]]:
    """Per seed and statistic, the largest distance from that seed's run to another seed's (at
    least two runs): how far a run can land from it by the seed alone. A run from the same start
    that is just another sample lies farther with probability 1/len(runs) (it would be the
    farthest of len(runs) exchangeable runs)."""
    if len(runs) < 2:
        raise ValueError(f"a seed spread needs at least two runs, got seeds {sorted(runs)}")
    to_others = {seed: [distances(runs[o], runs[seed]) for o in runs if o != seed] for seed in runs}
    return {seed: {k: max(d[k] for d in ds) for k in STATISTICS} for seed, ds in to_others.items()}


def compare(
    preset: str,
    showers,
    *,
    steps: int,
    batch: int,
    generated: int,
    seeds: Sequence[int] = (3, 4),
    bf16_seeds: int = 1,
    seconds: float | None = None,
    bf16: Sequence[str] = ("fixed",),
) -> dict:
    """Train fp32 once per seed in `seeds` (at least two) and bf16 once per name in `bf16`
    (BF16_FORMS) for each of the first `bf16_seeds` seeds. Return every run's statistics, the fp32
    seed spread (`seed_spread`) and, per bf16 set and seed, the distance to the fp32 run of the
    same seed and whether it is within that seed's spread ("within" per set: every seed is).

    With `seconds`, the first run stops when they run out, and the others take the same number of
    steps (returned as "steps")."""
    if len(set(seeds)) < 2 or len(set(seeds)) != len(seeds):
        raise ValueError(f"compare needs at least two different fp32 seeds, got {list(seeds)}")
    if not 1 <= bf16_seeds <= len(seeds):
        raise ValueError(f"bf16_seeds must be between 1 and {len(seeds)}, got {bf16_seeds}")
    latent = model.PRESETS[preset].latent_dim

    def train(s: step.TrainStep, precision: str, seed: int, *, seconds: float | None = None) -> int:
        return train_from_seed(
            s,
            preset,
            precision,
            seed=seed,
            showers=showers,
            steps=steps,
            batch=batch,
            seconds=seconds,
        )

    fp32_step = new_step(preset, "fp32")
    fp32: dict[int, dict] = {}
    for seed in seeds:
        steps = train(fp32_step, "fp32", seed, seconds=seconds if not fp32 else None)
        fp32[seed] = shower_statistics(fp32_step.generator, latent, generated)
    spread = seed_spread(fp32)
    runs = {}
    for name in bf16:
        s = new_step(preset, "bf16", BF16_FORMS[name])
        per_seed: dict[int, dict[str, Any]] = {}
        for seed in seeds[:bf16_seeds]:
            train(s, "bf16", seed)
            stats = shower_statistics(s.generator, latent, generated)
            diff = distances(stats, fp32[seed])
            per_seed[seed] = {
                "vs_fp32": diff,
                "within": {k: diff[k] <= spread[seed][k] for k in STATISTICS},
                "statistics": _as_lists(stats),
            }
        runs[name] = {
            "per_seed": per_seed,
            "within": {k: all(r["within"][k] for r in per_seed.values()) for k in STATISTICS},
        }
    return {
        "steps": steps,
        "fp32": {seed: _as_lists(st) for seed, st in fp32.items()},
        "fp32_seed_spread": spread,
        "bf16": runs,
    }


def _as_lists(stats: Mapping[str, np.ndarray]) -> dict[str, list[float]]:
    return {k: np.asarray(v).tolist() for k, v in stats.items()}


def trained_statistics(
    preset: str, precision: str, seed: int, *, showers, steps: int, batch: int, generated: int
) -> dict[str, list[float]]:
    """One training's shower statistics as JSON values: what another process's stack reports."""
    s = new_step(preset, precision)
    train_from_seed(
        s,
        preset=preset,
        precision=precision,
        seed=seed,
        showers=showers,
        steps=steps,
        batch=batch,
    )
    return _as_lists(shower_statistics(s.generator, model.PRESETS[preset].latent_dim, generated))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m gan3d.equivalence",
        description="One training's shower statistics in this Python's stack, as one JSON line.",
    )
    ap.add_argument("--showers", type=Path, required=True, help="npz: images, ep, cellsum")
    ap.add_argument("--preset", choices=tuple(model.PRESETS), default="tiny")
    ap.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--generated", type=int, default=128)
    args = ap.parse_args(argv)
    with np.load(args.showers) as f:
        showers = (f["images"], f["ep"], f["cellsum"])
    stats = trained_statistics(
        args.preset,
        args.precision,
        args.seed,
        showers=showers,
        steps=args.steps,
        batch=args.batch,
        generated=args.generated,
    )
    print(json.dumps({"statistics": stats, "itex": itex.seen_here().record()}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
