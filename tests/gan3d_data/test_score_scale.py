"""The physics score's fixed scale: held-out data = 1, empty showers = 0, the same meaning at any
data size and split. Real simulator showers (sim_dir: 1,200 of them)."""

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gan3d.data import ShowerFiles, expand_data_arg
from gan3d.validate import (
    empty_features,
    normalise,
    plot_score,
    reference_halves,
    scaled_score,
    shower_features,
    take,
)


@pytest.fixture(scope="module")
def showers(sim_dir: Path):
    with ShowerFiles(expand_data_arg(str(sim_dir))) as files:
        images, ep, _ = files.load()
    return images, ep, shower_features(images, ep)


def _scaled(feats: dict, index: np.ndarray, seed: int, fake_of) -> dict:
    """Score on the scale of the showers `index`, split as `gan3d validate` does; the generator
    is `fake_of(held-out indices)` -> features of its showers at those energies."""
    first, second = reference_halves(len(index), seed)
    return scaled_score(
        take(feats, index[first]), take(feats, index[second]), fake_of(index[second])
    )


@settings(max_examples=15)
@given(size=st.integers(40, 1200), seed=st.integers(0, 2**32 - 1))
def test_held_out_data_scores_one_and_empty_showers_zero(showers, size, seed):
    _, _, feats = showers
    index = np.random.default_rng(seed).choice(len(feats["cellsum"]), size, replace=False)
    as_data = _scaled(feats, index, seed, lambda held: take(feats, held))
    empty = _scaled(
        feats, index, seed, lambda held: empty_features(feats["energy_gev"][held] / 100.0)
    )
    if as_data["score"] is None:  # too few showers to set a scale: said, never a number
        assert (
            "fix: compare more --events" in as_data["score_null_reason"] and empty["score"] is None
        )
        return
    assert as_data["score"] == pytest.approx(1.0, abs=1e-12) and empty["score"] == pytest.approx(
        0.0, abs=1e-12
    )
    assert as_data["score_raw"] == as_data["score_reference_data"]
    assert as_data["score_reference_data"] < empty["score_raw"] == empty["score_reference_empty"]
    assert as_data["score_null_reason"] is None
    for bin_data, bin_empty in zip(as_data["bins"], empty["bins"]):
        assert bin_data["score"] is None or bin_data["score"] == pytest.approx(1.0, abs=1e-12)
        assert bin_empty["score"] is None or bin_empty["score"] == pytest.approx(0.0, abs=1e-12)


def test_other_data_scores_one_within_the_data_spread_and_distortions_do_not(showers):
    """Thirds of the data: reference, held out, and an independent sample as the 'generator'."""
    images, ep, feats = showers
    for seed in range(4):
        order = np.random.default_rng(seed).permutation(len(ep))
        ref, held, other = np.array_split(order, 3)
        result = scaled_score(take(feats, ref), take(feats, held), take(feats, other))
        data, empty = result["score_reference_data"], result["score_reference_empty"]
        unit = data / (empty - data)  # the data-vs-data score itself, on the scale
        assert abs(result["score"] - 1.0) < unit, (seed, result["score"], unit)
        scaled = scaled_score(
            take(feats, ref), take(feats, held), shower_features(images[held] * 1.2, ep[held])
        )
        assert scaled["score"] < 1.0 - 3 * unit, (seed, scaled["score"], unit)


def test_the_meaning_does_not_change_with_the_data_size_or_the_split(showers):
    """A fixed distortion keeps its place on the scale with half or all the data and any split,
    while its raw score and the data reference change with the size."""
    images, ep, feats = showers
    distortions = {
        "moved one cell": lambda i: np.roll(images[i], 1, axis=1),
        "two layers deeper": lambda i: np.roll(images[i], 2, axis=3),
        "scaled by 1.2": lambda i: images[i] * 1.2,
        "scaled by 0.5": lambda i: images[i] * 0.5,
    }
    scores: dict[str, list[float]] = {name: [] for name in distortions}
    references, units = [], []
    for size, seed in ((600, 1), (600, 2), (1200, 3), (1200, 4)):
        index = np.sort(np.random.default_rng(seed).choice(len(ep), size, replace=False))
        for name, distort in distortions.items():
            result = _scaled(
                feats,
                index,
                seed,
                lambda held, distort=distort: shower_features(distort(held), ep[held]),
            )
            scores[name].append(result["score"])
        data, empty = result["score_reference_data"], result["score_reference_empty"]
        units.append(data / (empty - data))
        references.append(data)
    assert min(references[:2]) > max(
        references[2:]
    )  # the raw data-vs-data score falls with more data...
    for (
        name,
        values,
    ) in scores.items():  # ...the scaled score of a distortion stays within the scale's noise
        assert max(values) - min(values) < 2 * max(units), (name, values, units)
    for k in range(
        4
    ):  # distortions apart by more than the noise keep their order at every size and split
        assert (
            scores["scaled by 0.5"][k]
            < scores["scaled by 1.2"][k]
            < min(scores["moved one cell"][k], scores["two layers deeper"][k])
            < 1
        )


def test_a_scale_is_refused_when_data_cannot_be_told_from_nothing():
    assert normalise(3.0, 1.0, 9.0) == (0.75, None)
    assert normalise(12.0, 1.0, 9.0)[0] == pytest.approx(
        -3 / 8
    )  # worse than empty: below 0, not clamped
    for data in (5.0, 9.0, 10.0):  # held-out data scoring more than half of empty showers: no scale
        score, reason = normalise(3.0, data, 9.0)
        assert score is None and "too few showers per energy bin" in reason
    assert normalise(None, 1.0, 9.0)[0] is None and "no energy bin" in normalise(1.0, None, 9.0)[1]


def test_a_handful_of_showers_gets_no_scale_but_a_reason_and_a_plot(showers, tmp_path):
    _, _, feats = showers
    index = np.arange(6)
    result = _scaled(feats, index, 0, lambda held: take(feats, held))
    assert result["score"] is None and result["score_null_reason"]
    assert result["score_raw"] is None or result["score_raw"] == result["score_reference_data"]
    assert all(b["score"] is None for b in result["bins"])
    assert (
        plot_score(result, tmp_path).read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    )  # "no scale" drawn
