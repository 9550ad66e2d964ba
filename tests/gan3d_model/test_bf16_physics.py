"""Physics equivalence of bf16 training, tiny preset (gan3d.equivalence; the full preset is
bench/gan3d_bf16_physics.py): the bf16 generator's showers lie within the fp32 seed-to-seed spread.

The tolerance is not a number written here: it is how far two fp32 runs with different seeds
land from each other, measured in the same test.
"""

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from gan3d import cpu, equivalence  # noqa: E402
from gan3d.data import preprocess  # noqa: E402
from gan3d.simulate import simulate_showers  # noqa: E402


@pytest.mark.skipif(
    cpu.bf16_support() is None,
    reason="needs avx512_bf16 or amx_bf16+amx_tile (this CPU has neither: bf16 would be emulated)",
)
def test_bf16_showers_lie_within_the_fp32_seed_spread():
    """In bfloat16 convolutions (the built-in forms) and with the fixed table's layers in the float32
    frequency domain (the forms a probe chooses on a CPU with a bf16 unit and no AMX), the same fp32
    runs the yardstick."""
    raw, energy = simulate_showers(64, np.random.default_rng(7), emin=50.0, emax=450.0)
    out = equivalence.compare(
        "tiny",
        preprocess(raw, energy, 1.0),
        steps=16,
        batch=4,
        generated=128,
        bf16=("fixed", "fft"),
    )
    spread = out["fp32_seed_spread"]
    # the seeds made a difference, so the spread is a real yardstick
    assert all(v > 0 for v in spread.values()), spread
    assert set(out["bf16"]) == {"fixed", "fft"}
    for forms, run in out["bf16"].items():
        for key in spread:
            assert run["vs_fp32"][key] <= spread[key], (
                f"{key}: bf16 ({forms}) vs fp32 {run['vs_fp32'][key]:.4g} > fp32 seed spread "
                f"{spread[key]:.4g}"
            )


def test_a_time_budget_stops_the_run_early_and_says_after_how_many_steps():
    """The full-preset bench fits its first run into a time budget and gives the others its step
    count.
    """
    raw, energy = simulate_showers(8, np.random.default_rng(7), emin=50.0, emax=450.0)
    showers = preprocess(raw, energy, 1.0)
    s = equivalence.new_step("tiny", "fp32")
    assert (
        equivalence.train_from_seed(
            s, "tiny", "fp32", seed=3, showers=showers, steps=5, batch=4, seconds=0.0
        )
        == 1
    )
    after_one = [w.copy() for w in s.generator.get_weights()]
    assert (
        equivalence.train_from_seed(s, "tiny", "fp32", seed=3, showers=showers, steps=3, batch=4)
        == 3
    )
    assert any(not np.array_equal(a, b) for a, b in zip(after_one, s.generator.get_weights()))


def test_every_set_of_bf16_forms_draws_the_fp32_runs_initial_weights():
    """train_from_seed starts every run from the weights the built-in forms draw for the seed: that
    is each run's own start only if the layer forms do not change the draws."""
    drawn = []
    for forms in (None, *equivalence.BF16_FORMS.values()):
        tf.keras.utils.set_random_seed(3)
        g = equivalence.model.generator("tiny", "bf16", forms=forms)
        d = equivalence.model.discriminator("tiny", "bf16", forms=forms)
        drawn.append(g.get_weights() + d.get_weights())
    for other in drawn[1:]:
        assert len(other) == len(drawn[0])
        assert all(np.array_equal(a, b) for a, b in zip(drawn[0], other))
