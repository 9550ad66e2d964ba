"""Physics equivalence of bf16 training, tiny preset (gan3d.equivalence; the full preset is
bench/gan3d_bf16_physics.py): the bf16 generator's showers lie within the fp32 seed-to-seed spread.

The tolerance is not a number written here: it is how far fp32 runs with different seeds land
from each other (per seed, the farthest of the two other seeds' runs), measured in the same test.
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
    frequency domain (the forms a probe chooses on a CPU with a bf16 unit and no AMX), two seeds
    each, the same three fp32 runs the yardstick."""
    raw, energy = simulate_showers(64, np.random.default_rng(7), emin=50.0, emax=450.0)
    out = equivalence.compare(
        "tiny",
        preprocess(raw, energy, 1.0),
        steps=16,
        batch=4,
        generated=128,
        bf16=("fixed", "fft"),
        seeds=(3, 4, 5),
        bf16_seeds=2,
    )
    spread = out["fp32_seed_spread"]
    # the seeds made a difference, so the spread is a real yardstick
    assert all(v > 0 for per_seed in spread.values() for v in per_seed.values()), spread
    assert set(out["fp32"]) == set(spread) == {3, 4, 5}
    assert set(out["bf16"]) == {"fixed", "fft"}
    for forms, run in out["bf16"].items():
        assert set(run["per_seed"]) == {3, 4}
        for seed, r in run["per_seed"].items():
            for key, d in r["vs_fp32"].items():
                assert d <= spread[seed][key], (
                    f"{key}: bf16 ({forms}) "
                    f"seed {seed} vs fp32 {d:.4g} > fp32 seed spread {spread[seed][key]:.4g}"
                )


def test_the_seed_spread_is_each_runs_farthest_other_run():
    """Three runs whose statistics are known: per seed and statistic, the distance to the farthest
    other seed's run."""
    profile = np.array([0.5, 0.5])
    runs = {
        seed: {
            "cellsum_over_ep": np.array([mean, 0.1]),
            "profile_z": profile,
            "profile_x": profile,
            "profile_y": np.array([y, 1 - y]),
        }
        for seed, mean, y in ((3, 1.0, 0.5), (4, 1.4, 0.2), (5, 0.9, 0.4))
    }
    spread = equivalence.seed_spread(runs)
    assert [spread[s]["cellsum_over_ep"] for s in (3, 4, 5)] == pytest.approx([0.4, 0.5, 0.5])
    assert [spread[s]["profile_y"] for s in (3, 4, 5)] == pytest.approx([0.6, 0.6, 0.4])
    assert all(spread[s]["profile_z"] == spread[s]["profile_x"] == 0.0 for s in runs)
    with pytest.raises(ValueError, match="at least two runs"):
        equivalence.seed_spread({3: runs[3]})


@pytest.mark.parametrize(
    "seeds, bf16_seeds, message",
    [
        ((3,), 1, "at least two different"),
        ((3, 3), 1, "at least two different"),
        ((3, 4), 3, "between 1 and 2"),
        ((3, 4), 0, "between 1 and 2"),
    ],
)
def test_compare_refuses_a_yardstick_it_cannot_make(seeds, bf16_seeds, message):
    with pytest.raises(ValueError, match=message):
        equivalence.compare(
            "tiny", None, steps=1, batch=1, generated=1, seeds=seeds, bf16_seeds=bf16_seeds
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
