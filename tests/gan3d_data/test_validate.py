"""The physics check: scores separate good from wrong showers, plots are real PNGs, results keep
keys.
"""

import json
from pathlib import Path

import numpy as np
import pytest

from gan3d.data import ShowerFiles, expand_data_arg
from gan3d.validate import main, plot_features, read_results, score_features, shower_features
from kit.errors import KitError

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def physics_score(real, real_ep, fake, fake_ep) -> dict:
    """The unscaled score of two image sets, as gan3d validate computes it from their features."""
    return score_features(shower_features(real, real_ep), shower_features(fake, fake_ep))


def plot_comparison(real, real_ep, fake, fake_ep, out_dir, bins):
    """gan3d validate's comparison plots of two image sets."""
    return plot_features(
        shower_features(real, real_ep), shower_features(fake, fake_ep), out_dir, bins=bins
    )


@pytest.fixture(scope="module")
def showers(sim_dir: Path):
    with ShowerFiles(expand_data_arg(str(sim_dir))) as files:
        images, ep, _ = files.load()
    return images, ep


def test_features_of_a_known_shower():
    image = np.zeros((1, 25, 25, 25, 1), np.float32)
    image[0, 10, 12, 3, 0] = 1.0  # x=10, y=12, depth z=3
    image[0, 14, 12, 3, 0] = 1.0
    feats = shower_features(image, np.array([0.5]))
    assert feats["profile_z"][0].argmax() == 3 and feats["profile_z"][0].sum() == 2.0
    assert feats["m1_x"][0] == 12.0 and feats["m1_y"][0] == 12.0 and feats["m1_z"][0] == 3.0
    assert feats["m2_x"][0] == 2.0 and feats["m2_z"][0] == 0.0
    assert feats["cellsum_over_ep"][0] == 4.0 and feats["energy_gev"][0] == 50.0


def test_data_against_itself_scores_far_lower_than_wrong_showers(showers):
    images, ep = showers
    a, b = slice(0, 600), slice(600, 1200)
    same = physics_score(images[a], ep[a], images[b], ep[b])
    assert len(same["bins"]) == 4 and all(bin_["score_raw"] is not None for bin_ in same["bins"])
    wrong = {
        "moved one cell in x": np.roll(images[b], 1, axis=1),
        "two layers deeper": np.roll(images[b], 2, axis=3),
        "scaled by 1.2": images[b] * 1.2,
    }
    for what, fake in wrong.items():
        bad = physics_score(images[a], ep[a], fake, ep[b])
        assert bad["score_raw"] > 2 * same["score_raw"], (what, bad["score_raw"], same["score_raw"])
        assert all(w["score_raw"] > s["score_raw"] for w, s in zip(bad["bins"], same["bins"])), what


def test_empty_bins_are_reported_not_scored(showers):
    images, ep = showers
    low = ep * 100 < 100
    result = physics_score(images[low], ep[low], images[low], ep[low])
    assert result["bins"][0]["score_raw"] == pytest.approx(0.0, abs=1e-12)
    assert [b["score_raw"] for b in result["bins"][1:]] == [None, None, None]
    assert result["score_raw"] == pytest.approx(0.0, abs=1e-12)


def test_plots_are_png_files(showers, tmp_path: Path):
    images, ep = showers
    paths = plot_comparison(
        images[:300],
        ep[:300],
        images[300:600],
        ep[300:600],
        tmp_path / "plots",
        bins=[(10, 250), (250, 500)],
    )
    assert [p.name for p in paths] == [
        "physics_10-250GeV.png",
        "physics_250-500GeV.png",
        "physics_cellsum_vs_energy.png",
    ]
    for path in paths:
        data = path.read_bytes()
        assert data.startswith(PNG_SIGNATURE) and len(data) > 20_000
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == sorted(
        p.name for p in paths
    )  # no temp files


def test_results_that_are_not_json_are_refused_and_left_as_they_are(tmp_path: Path):
    results = tmp_path / "run.json"
    results.write_text("{not json")
    with pytest.raises(KitError, match="not valid JSON"):
        read_results(results)
    assert results.read_text() == "{not json"


def test_cli_with_a_real_tiny_generator(sim_dir: Path, tmp_path: Path, capsys):
    import tensorflow as tf

    from gan3d.checkpoint import EpochCheckpoints
    from gan3d.model import generator

    tf.keras.utils.set_random_seed(3)
    model = generator("tiny")
    ckpt = EpochCheckpoints(tmp_path / "ckpt").save(
        tf.train.Checkpoint(generator=model), model, 1, meta={"preset": "tiny"}
    )
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"schema": "gan3d-run/1", "ranks": 2, "flop_per_second": 1.5e9}))
    args = [
        "--data",
        str(sim_dir / "EleEscan_1_2.h5"),
        "--out",
        str(tmp_path / "plots"),
        "--events",
        "200",
        "--results",
        str(results),
    ]
    assert (
        main(args + ["--checkpoint", str(tmp_path / "ckpt")]) == 0
    )  # preset taken from the checkpoint
    printed = json.loads(capsys.readouterr().out)
    record = json.loads(results.read_text())
    assert record["ranks"] == 2 and record["flop_per_second"] == 1.5e9
    physics = record["physics"]
    assert physics["preset"] == "tiny" and physics["events"] == 200
    assert physics["reference_events"] == physics["compared_events"] == 100
    for key in (
        "score",
        "score_raw",
        "score_reference_data",
        "score_reference_empty",
        "score_meaning",
    ):
        assert physics[key] == printed[key], key
    raw, data, empty = (
        physics["score_raw"],
        physics["score_reference_data"],
        physics["score_reference_empty"],
    )
    assert 0 < data < empty / 2 and raw > data  # an untrained generator is no data
    assert (
        physics["score"] == pytest.approx((empty - raw) / (empty - data)) and physics["score"] < 1
    )
    assert physics["generator_weights"] == str(ckpt / "generator.weights.h5")
    assert Path(physics["plots"][-1]).name == "physics_score.png"
    for path in physics["plots"]:
        assert Path(path).read_bytes().startswith(PNG_SIGNATURE)

    weights = str(ckpt / "generator.weights.h5")
    assert main(args + ["--generator-weights", weights, "--preset", "full"]) == 1
    err = capsys.readouterr().err
    assert "do not fit preset 'full'" in err and len(err.strip().splitlines()) == 1, err
    assert main(args + ["--generator-weights", str(tmp_path / "nope.h5")]) == 1
    assert "nope.h5" in capsys.readouterr().err


def test_a_generator_of_empty_showers_scores_worst(showers, tmp_path: Path):
    images, ep = showers
    a, b = slice(0, 600), slice(600, 1200)
    empty = physics_score(images[a], ep[a], np.zeros_like(images[b]), ep[b])
    moved = physics_score(images[a], ep[a], np.roll(images[b], 1, axis=1), ep[b])
    assert empty["score_raw"] > moved["score_raw"]
    assert all(b["score_raw"] is not None for b in empty["bins"])
    paths = plot_comparison(
        images[a], ep[a], np.zeros_like(images[b]), ep[b], tmp_path, bins=[(10, 500)]
    )
    assert all(p.read_bytes().startswith(PNG_SIGNATURE) for p in paths)
