"""Broken data files stop at construction with a DataError naming the file, the dataset and a
fix.
"""

import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest

from gan3d.data import DataError, ShowerFiles


def _write(path: Path, **datasets) -> Path:
    with h5py.File(path, "w") as h5:
        for name, data in datasets.items():
            h5.create_dataset(name, data=data)
    return path


def _good_ecal(n: int = 5) -> np.ndarray:
    return np.random.default_rng(0).random((n, 25, 25, 25), dtype=np.float32)


def _expect(paths, *words: str) -> str:
    with pytest.raises(DataError) as info:
        ShowerFiles(paths)
    message = str(info.value)
    for word in words:
        assert word in message, (word, message)
    assert "fix" in message
    return message


def test_missing_file(tmp_path: Path, sim_dir: Path):
    missing = tmp_path / "EleEscan_9_9.h5"
    _expect([sim_dir / "EleEscan_1_0.h5", missing], str(missing), "does not exist", "ECAL")


def test_truncated_file(tmp_path: Path, sim_dir: Path):
    cut = tmp_path / "cut.h5"
    shutil.copy(sim_dir / "EleEscan_1_0.h5", cut)
    size = cut.stat().st_size
    with open(cut, "r+b") as fh:
        fh.truncate(size // 2)
    _expect([cut], str(cut), "truncated", "ECAL")


def test_not_hdf5(tmp_path: Path):
    text = tmp_path / "EleEscan_1_0.h5"
    text.write_text("this is a shower list, honest\n" * 100)
    _expect([text], str(text), "not an HDF5 file", "ECAL")


def test_no_ecal_dataset(tmp_path: Path):
    path = _write(tmp_path / "noecal.h5", HCAL=_good_ecal(), target=np.ones((5, 2)))
    _expect([path], str(path), "no dataset ECAL", "HCAL")


def test_wrong_ecal_shape(tmp_path: Path):
    path = _write(
        tmp_path / "shape.h5", ECAL=np.zeros((5, 25, 25, 20), np.float32), target=np.ones((5, 2))
    )
    _expect([path], str(path), "ECAL", "(5, 25, 25, 20)", "(N,25,25,25)")


def test_missing_energy(tmp_path: Path):
    path = _write(tmp_path / "noenergy.h5", ECAL=_good_ecal())
    _expect([path], str(path), "target[:,1]", "energy")


def test_target_without_energy_column(tmp_path: Path):
    path = _write(tmp_path / "target1.h5", ECAL=_good_ecal(), target=np.ones((5, 1)))
    _expect([path], str(path), "dataset target", "column 1")


def test_length_mismatch(tmp_path: Path):
    path = _write(tmp_path / "mismatch.h5", ECAL=_good_ecal(5), target=np.ones((4, 2)) * 50)
    _expect([path], str(path), "ECAL has 5 events", "target[:,1] has 4")


def test_bad_energy_values(tmp_path: Path):
    path = _write(tmp_path / "nan.h5", ECAL=_good_ecal(3), energy=np.array([10.0, np.nan, 30.0]))
    _expect([path], str(path), "dataset energy event 1 ", "nan", "--skip-bad-events")


def test_good_files_are_accepted(sim_dir: Path):
    with ShowerFiles(sorted(sim_dir.glob("*.h5"))) as files:
        assert files.num_events == 1200
        assert files.read(2, 10, 13).shape == (3, 25, 25, 25)


def test_damage_inside_a_file_stops_the_stream_with_the_file_named(tmp_path: Path, sim_dir: Path):
    from gan3d.data import ShowerStream

    bad = tmp_path / "EleEscan_1_0.h5"
    shutil.copy(sim_dir / "EleEscan_1_0.h5", bad)
    size = bad.stat().st_size
    with open(bad, "r+b") as fh:  # scramble compressed ECAL chunks in the middle of the file
        fh.seek(size // 2)
        fh.write(np.random.default_rng(0).integers(0, 256, 20_000, dtype=np.uint8).tobytes())
    files = ShowerFiles([bad])  # the first and last events still decode
    with pytest.raises(DataError) as info:
        for _ in ShowerStream(files, batch_size=16, shuffle=False).epoch(0):
            pass
    assert str(bad) in str(info.value) and "dataset ECAL" in str(info.value)
