"""Shower files for the tests: the simulator's real output, small, or events tagged with ids."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np


def tiny_showers(directory: Path) -> list[Path]:
    """Three simulator files of 64 showers (seed 5): two to train on, one to validate with."""
    from gan3d.simulate import write_files

    return write_files(directory, 3, 64, seed=5)


def write_id_files(directory: Path, counts: list[int]) -> list[Path]:
    """Files whose event k carries its global id k+1 in cell (0,0,0): lets tests track events."""
    paths, next_id = [], 1
    for i, n in enumerate(counts):
        ecal = np.zeros((n, 25, 25, 25), np.float32)
        ecal[:, 0, 0, 0] = np.arange(next_id, next_id + n)
        energy = np.linspace(10, 500, n)
        path = directory / f"ids_{i}.h5"
        with h5py.File(path, "w") as h5:
            h5.create_dataset(
                "ECAL", data=ecal, chunks=(min(n, 32), 25, 25, 25), compression="gzip"
            )
            h5.create_dataset("target", data=np.stack([np.full(n, 11.0), energy], axis=1))
        paths.append(path)
        next_id += n
    return paths
