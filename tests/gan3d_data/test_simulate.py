"""The synthetic shower generator: layout, physics trends, fluctuations, reproducibility."""
from pathlib import Path

import h5py
import numpy as np

from gan3d.simulate import main, simulate_showers, write_files


def _depth(ecal: np.ndarray) -> np.ndarray:
    """Energy-weighted mean layer index along z (the last axis) per shower."""
    prof = ecal.sum(axis=(1, 2))
    return (prof * np.arange(25)).sum(axis=1) / prof.sum(axis=1)


def test_files_have_the_clic_layout(sim_dir: Path):
    paths = sorted(sim_dir.iterdir())
    assert [p.name for p in paths] == ["EleEscan_1_0.h5", "EleEscan_1_1.h5", "EleEscan_1_2.h5"]
    with h5py.File(paths[0], "r") as h5:
        assert h5["ECAL"].shape == (400, 25, 25, 25) and h5["ECAL"].dtype == np.float32
        assert h5["target"].shape == (400, 2)
        target = h5["target"][()]
        assert np.all(target[:, 0] == 11)
        assert 10 <= target[:, 1].min() and target[:, 1].max() <= 500
        np.testing.assert_allclose(h5["energy"][()], target[:, 1])
        assert h5["ECAL"][()].min() >= 0


def test_cell_sum_is_about_two_percent_and_linear_in_energy():
    ecal, energy = simulate_showers(600, np.random.default_rng(1))
    total = ecal.reshape(len(ecal), -1).sum(axis=1)
    ratio = total / energy
    assert 0.017 < ratio.mean() < 0.023
    slope, intercept = np.polyfit(energy, total, 1)
    assert 0.015 < slope < 0.025
    assert abs(intercept) < 0.05 * total.mean()
    assert np.corrcoef(energy, total)[0, 1] > 0.98


def test_cell_sum_follows_the_trainers_fitted_curve():
    from gan3d.model import fitted_cellsum  # the cell-sum target the trainer gives generated showers

    rng = np.random.default_rng(6)
    for energy in (20.0, 100.0, 400.0):
        ecal, _ = simulate_showers(300, rng, np.full(300, energy))
        mean_sum = ecal.reshape(300, -1).sum(axis=1).mean()
        assert abs(mean_sum / fitted_cellsum(energy / 100.0) - 1) < 0.03, energy


def test_shower_maximum_deepens_logarithmically_with_energy():
    rng = np.random.default_rng(2)
    depth = {e: _depth(simulate_showers(300, rng, np.full(300, float(e)))[0]).mean() for e in (20, 100, 500)}
    low, high = depth[100] - depth[20], depth[500] - depth[100]
    assert low > 0.7 and high > 0.7  # ln(5)/0.65 X0 per layer ~ 2.5 layers per step, less back leakage
    assert 0.5 < high / low < 1.5  # equal steps in ln E give similar steps in depth


def test_showers_fluctuate_event_by_event():
    ecal, _ = simulate_showers(200, np.random.default_rng(3), np.full(200, 100.0))
    total = ecal.reshape(200, -1).sum(axis=1)
    assert 0.005 < total.std() / total.mean() < 0.1
    assert _depth(ecal).std() > 0.3
    x_profile = ecal.sum(axis=(2, 3))
    x_centre = (x_profile * np.arange(25)).sum(axis=1) / x_profile.sum(axis=1)
    assert 0.3 < x_centre.std() < 1.0  # uniform +-1 cell jitter of the axis: std 0.58
    assert not np.array_equal(ecal[0], ecal[1])


def test_seeds_reproduce_and_differ(tmp_path: Path):
    a = write_files(tmp_path / "a", 1, 50, seed=7)[0]
    b = write_files(tmp_path / "b", 1, 50, seed=7)[0]
    c = write_files(tmp_path / "c", 1, 50, seed=8)[0]
    with h5py.File(a) as fa, h5py.File(b) as fb, h5py.File(c) as fc:
        assert np.array_equal(fa["ECAL"][()], fb["ECAL"][()])
        assert np.array_equal(fa["target"][()], fb["target"][()])
        assert not np.array_equal(fa["ECAL"][()], fc["ECAL"][()])
    x1, e1 = simulate_showers(20, np.random.default_rng(4))
    x2, e2 = simulate_showers(20, np.random.default_rng(4))
    assert np.array_equal(x1, x2) and np.array_equal(e1, e2)


def test_cli_writes_files_atomically_and_rejects_bad_ranges(tmp_path: Path, capsys):
    out = tmp_path / "cli"
    assert main(["--out", str(out), "--files", "2", "--events-per-file", "30", "--seed", "1",
                 "--emin", "50", "--emax", "60"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["EleEscan_1_0.h5", "EleEscan_1_1.h5"]  # no temp files left
    with h5py.File(out / "EleEscan_1_1.h5") as h5:
        assert 50 <= h5["target"][:, 1].min() and h5["target"][:, 1].max() <= 60
    assert main(["--out", str(tmp_path / "bad"), "--emin", "500", "--emax", "10"]) == 1
    assert "emin" in capsys.readouterr().err
    (tmp_path / "plain").write_text("not a directory")
    assert main(["--out", str(tmp_path / "plain" / "sub"), "--files", "1", "--events-per-file", "2"]) == 1
    assert str(tmp_path / "plain") in capsys.readouterr().err
