"""`gan3d validate` on damaged checkpoints, FIFOs, bad data events and a NaN generator: exit 1 with one
line naming the file, nothing written that looks valid, never a hang. Real tiny generator, real files."""
import json
import os
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest

from gan3d.validate import main


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> Path:
    """A checkpoint directory with one real epoch checkpoint of a tiny generator."""
    import tensorflow as tf

    from gan3d.checkpoint import EpochCheckpoints
    from gan3d.model import generator

    tf.keras.utils.set_random_seed(3)
    model = generator("tiny")
    out = tmp_path_factory.mktemp("ckpt")
    EpochCheckpoints(out).save(tf.train.Checkpoint(generator=model), model, 1, {"preset": "tiny"})
    return out


@pytest.fixture(scope="module")
def data(sim_dir: Path, tmp_path_factory) -> Path:
    """One simulator file whose event 5 holds an Inf cell."""
    path = tmp_path_factory.mktemp("bad") / "EleEscan_1_0.h5"
    shutil.copy(sim_dir / "EleEscan_1_2.h5", path)
    with h5py.File(path, "r+") as h5:
        h5["ECAL"][5, 12, 12, 4] = np.inf
    return path


def _args(data: Path, tmp_path: Path, *extra: str) -> list[str]:
    return ["--data", str(data), "--out", str(tmp_path / "plots"), "--events", "50", *extra]


def _fails(args: list[str], capsys, *words: str) -> str:
    assert main(args) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("gan3d validate: error:"), err
    for word in words:
        assert word in err, (word, err)
    return err


def test_bad_data_events_are_refused_or_skipped_and_counted(data, ckpt, tmp_path, capsys):
    _fails(_args(data, tmp_path, "--checkpoint", str(ckpt)), capsys, f"data file {data}: dataset ECAL event 5")
    results = tmp_path / "r.json"
    assert main(_args(data, tmp_path, "--checkpoint", str(ckpt), "--skip-bad-events", "--results", str(results))) == 0
    physics = json.loads(results.read_text())["physics"]
    assert physics["skip_bad_events"] is True and physics["bad_events_skipped"] == 1 and physics["events"] == 50


@pytest.mark.timeout(60, method="thread")
def test_a_fifo_as_results_is_refused_without_blocking(sim_dir, ckpt, tmp_path, capsys):
    os.mkfifo(tmp_path / "r.json")
    _fails(_args(sim_dir / "EleEscan_1_2.h5", tmp_path, "--checkpoint", str(ckpt), "--results",
                 str(tmp_path / "r.json")), capsys, "r.json is a FIFO")


@pytest.mark.timeout(60, method="thread")
def test_a_fifo_as_generator_weights_is_refused_without_blocking(sim_dir, tmp_path, capsys):
    os.mkfifo(tmp_path / "generator.weights.h5")
    _fails(_args(sim_dir / "EleEscan_1_2.h5", tmp_path, "--generator-weights", str(tmp_path / "generator.weights.h5"),
                 "--preset", "tiny"), capsys, "generator.weights.h5 is a FIFO")


def test_a_damaged_checkpoint_meta_json_is_refused(sim_dir, ckpt, tmp_path, capsys):
    damaged = tmp_path / "ckpt"
    shutil.copytree(ckpt, damaged)
    (damaged / "epoch-0001" / "meta.json").write_text('{"epoch": "1", "preset": "tiny"}')
    _fails(_args(sim_dir / "EleEscan_1_2.h5", tmp_path, "--checkpoint", str(damaged)), capsys,
           str(damaged / "epoch-0001" / "meta.json"), "field 'epoch'")


def test_a_nan_generator_writes_no_score(sim_dir, ckpt, tmp_path, capsys):
    weights = tmp_path / "generator.weights.h5"
    shutil.copy(ckpt / "epoch-0001" / "generator.weights.h5", weights)
    with h5py.File(weights, "r+") as h5:
        h5.visititems(lambda name, obj: obj.__setitem__(..., np.nan) if isinstance(obj, h5py.Dataset) else None)
    results = tmp_path / "r.json"
    results.write_text('{"ranks": 2}')
    _fails(_args(sim_dir / "EleEscan_1_2.h5", tmp_path, "--generator-weights", str(weights), "--preset", "tiny",
                 "--results", str(results)), capsys, "NaN or Inf showers")
    assert results.read_text() == '{"ranks": 2}'
