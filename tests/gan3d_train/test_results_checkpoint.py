"""Results arithmetic and the atomic, pruned per-epoch checkpoints (TensorFlow, no MPI)."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gan3d import results
from gan3d.checkpoint import CheckpointError, EpochCheckpoints
from gan3d.peak import site_peaks
from kit.site import load_site
from tests.support.checkpoints import generator_state


def test_throughput_is_consistent_with_flop_per_shower():
    flops = {"d_real": 1e9, "d_fake": 1e9, "g1": 2e9, "g2": 2e9, "total": 6e9}
    perf = results.throughput(flops, batch_per_rank=4, ranks=2, steps=10, seconds=5.0)
    assert perf["showers_per_second"] == pytest.approx(2 * 4 * 10 / 5.0)
    assert perf["flop_per_step"]["job"]["total"] == 12e9
    assert perf["flop_per_second"] == pytest.approx(
        perf["showers_per_second"] * perf["flop_per_shower"]
    )
    assert perf["flop_per_second_per_rank"] == pytest.approx(perf["flop_per_second"] / 2)


def test_supermuc_ng_peaks_follow_the_papers_convention():
    """4 nodes at 24 TFLOP/s: fp32 at the 2.3 GHz AVX clock, and the paper's FP64 at 2.7 GHz
    (4.15 TFLOP/s per node), not half the fp32 figure (which was 1.17x off)."""
    fields = results.peak_fields(
        24e12,
        "fp32",
        4,
        node_peaks=site_peaks(load_site("supermuc-ng")),
        measured={"fp32": 20e12},
        measured_basis="m",
    )
    assert fields["peak_fp32_theoretical_flop_per_second"] == pytest.approx(4 * 48 * 2.3e9 * 64)
    assert (
        fields["peak_fp32_theoretical_basis"]
        == "4 nodes x 48 cores x 2.3 GHz (avx clock) x 64 FP32 FLOP/cycle"
    )
    assert fields["percent_of_peak_fp64_max_clock"] == pytest.approx(100 * 24e12 / (4 * 4.1472e12))
    assert fields["percent_of_peak_fp64_theoretical"] == pytest.approx(
        100 * 24e12 / (4 * 48 * 2.3e9 * 32)
    )
    # a measured peak below the run's own rate was disturbed while it was measured: no % of it
    assert (
        fields["percent_of_peak_fp32_measured"] is None
        and "disturbed" in fields["peak_fp32_measured_basis"]
    )
    # unless the rate is an effective one (frequency-domain layers), which may pass a true peak
    effective = results.peak_fields(
        24e12,
        "fp32",
        4,
        node_peaks=None,
        measured={"fp32": 20e12},
        measured_basis="m",
        effective=True,
    )
    assert effective["percent_of_peak_fp32_measured"] == pytest.approx(120.0)
    assert effective["peak_fp32_measured_basis"] == "m"
    assert (effective["percent_of_peak"], effective["percent_of_peak_denominator"]) == (
        pytest.approx(120.0),
        "fp32 measured peak",
    )
    assert fields["peak_fp32_measured_flop_per_second"] == 20e12
    assert fields["peak_fp64_measured_flop_per_second"] is None
    assert "--measure-peak" in fields["peak_fp64_measured_basis"]
    assert (fields["percent_of_peak"], fields["percent_of_peak_denominator"]) == (
        fields["percent_of_peak_fp32_theoretical"],
        "fp32 theoretical peak",
    )


def test_laptop_divides_by_the_measured_peak_and_says_so():
    fields = results.peak_fields(
        10e9,
        "bf16",
        1,
        node_peaks=site_peaks(load_site("laptop")),
        measured={"bf16": 80e9, "fp64": 20e9},
        measured_basis="m",
    )
    assert fields["peak_bf16_theoretical_flop_per_second"] is None
    assert fields["peak_bf16_theoretical_basis"].startswith("unknown clock")
    assert (
        fields["percent_of_peak_fp64_max_clock"] is None
        and "clock_ghz_max" in fields["peak_fp64_max_clock_basis"]
    )
    assert (fields["percent_of_peak"], fields["percent_of_peak_denominator"]) == (
        12.5,
        "bf16 measured peak",
    )
    assert fields["percent_of_peak_fp64_measured"] == pytest.approx(50.0)
    nothing = results.peak_fields(10e9, "fp32", 1, node_peaks=None, measured={}, measured_basis="m")
    assert nothing["percent_of_peak"] is None and nothing["percent_of_peak_denominator"] is None


_RATE = st.floats(1e3, 1e18, allow_nan=False)


@given(
    rate=_RATE,
    nodes=st.integers(1, 10**4),
    measured=st.dictionaries(st.sampled_from(["fp32", "bf16", "fp64"]), _RATE),
    precision=st.sampled_from(["fp32", "bf16"]),
    site=st.sampled_from(["supermuc-ng", "stampede2", "laptop"]),
    effective=st.booleans(),
)
def test_every_percent_is_the_rate_over_the_peak_its_key_names(
    rate, nodes, measured, precision, site, effective
):
    fields = results.peak_fields(
        rate,
        precision,
        nodes,
        node_peaks=site_peaks(load_site(site)),
        measured=measured,
        measured_basis="m",
        effective=effective,
    )
    for key, percent in fields.items():
        if not key.startswith("percent_of_peak_") or key == "percent_of_peak_denominator":
            continue
        peak = fields[key.replace("percent_of_peak_", "peak_") + "_flop_per_second"]
        disturbed = (
            not effective
            and key == f"percent_of_peak_{precision}_measured"
            and peak is not None
            and rate > peak
        )
        assert (percent is None) == (peak is None or disturbed), key
        if percent is not None:
            assert percent == pytest.approx(100 * rate / peak), key
        if disturbed:
            assert "disturbed" in fields[f"peak_{precision}_measured_basis"]
    if fields["percent_of_peak"] is None:
        assert fields["percent_of_peak_denominator"] is None
    else:
        p, kind, _ = fields["percent_of_peak_denominator"].split(" ")
        assert p == precision and fields["percent_of_peak"] == fields[f"percent_of_peak_{p}_{kind}"]


def test_results_file_is_written_whole(tmp_path):
    path = results.write_results(tmp_path / "sub" / "r.json", {"ranks": 2})
    from importlib import metadata

    assert json.loads(path.read_text()) == {
        "schema": results.SCHEMA,
        "ranks": 2,
        "kit_version": metadata.version("secure-site-kit"),
    }
    assert [p.name for p in path.parent.iterdir()] == ["r.json"]  # no temp file left
    assert results.peak_rss_bytes() > 10 * 2**20


def test_checkpoints_keep_the_last_n_and_restore_exactly(tmp_path):
    gen, state = generator_state()
    ckpts = EpochCheckpoints(tmp_path, keep=2)
    assert ckpts.latest() is None
    saved = {}
    for epoch in (1, 2, 3):
        for v in gen.trainable_variables:
            v.assign(v + 0.5)
        saved[epoch] = [v.numpy().copy() for v in gen.variables]
        ckpts.save(state, gen, epoch, meta={"preset": "tiny"})
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
