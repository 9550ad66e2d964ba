"""Results arithmetic and the atomic, pruned per-epoch checkpoints (TensorFlow, no MPI)."""
import json

import pytest

from gan3d import results
from gan3d.checkpoint import CheckpointError, EpochCheckpoints


def test_throughput_is_consistent_with_flop_per_shower():
    flops = {"d_real": 1e9, "d_fake": 1e9, "g1": 2e9, "g2": 2e9, "total": 6e9}
    perf = results.throughput(flops, batch_per_rank=4, ranks=2, steps=10, seconds=5.0,
                              peak_theoretical=256e9, peak_measured=150e9)
    assert perf["showers_per_second"] == pytest.approx(2 * 4 * 10 / 5.0)
    assert perf["flop_per_step"]["job"]["total"] == 12e9
    assert perf["flop_per_second"] == pytest.approx(perf["showers_per_second"] * perf["flop_per_shower"])
    assert perf["flop_per_second_per_rank"] == pytest.approx(perf["flop_per_second"] / 2)
    assert perf["percent_of_peak_theoretical"] == pytest.approx(100 * 24e9 / 256e9)
    assert perf["percent_of_peak_fp64_paper_convention"] == pytest.approx(2 * perf["percent_of_peak_theoretical"])
    none = results.throughput(flops, 4, 2, 10, 5.0, None, None)
    assert none["percent_of_peak_theoretical"] is None and none["percent_of_peak_measured"] is None


def test_results_file_is_written_whole(tmp_path):
    path = results.write_results(tmp_path / "sub" / "r.json", {"ranks": 2})
    from importlib import metadata

    assert json.loads(path.read_text()) == {"schema": results.SCHEMA, "ranks": 2,
                                            "kit_version": metadata.version("secure-site-kit")}
    assert [p.name for p in path.parent.iterdir()] == ["r.json"]  # no temp file left
    assert results.peak_rss_bytes() > 10 * 2**20


def _state():
    import tensorflow as tf

    from gan3d.model import generator

    gen = generator("tiny")
    return gen, tf.train.Checkpoint(generator=gen, epoch=tf.Variable(0))


def test_checkpoints_keep_the_last_n_and_restore_exactly(tmp_path):
    gen, state = _state()
    ckpts = EpochCheckpoints(tmp_path, keep=2)
    assert ckpts.latest() is None
    saved = {}
    for epoch in (1, 2, 3):
        for v in gen.trainable_variables:
            v.assign(v + 0.5)
        saved[epoch] = [v.numpy().copy() for v in gen.variables]
        ckpts.save(state, gen, epoch, {"preset": "tiny"})
    assert [e for e, _ in ckpts.complete()] == [2, 3]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["epoch-0002", "epoch-0003"]
    assert (ckpts.latest() / "generator.weights.h5").is_file()
    # An interrupted write (no meta.json) is never picked up.
    (tmp_path / "epoch-0004").mkdir()
    assert ckpts.latest().name == "epoch-0003"
    for v in gen.trainable_variables:
        v.assign(v * 0)
    meta = ckpts.restore(state, ckpts.latest(), {"preset": "tiny"})
    assert meta["epoch"] == 3
    assert all((a == b).all() for a, b in zip(saved[3], [v.numpy() for v in gen.variables]))
    with pytest.raises(CheckpointError, match="preset='tiny' but this run asks for 'full'"):
        ckpts.restore(state, ckpts.latest(), {"preset": "full"})
