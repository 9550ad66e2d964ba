"""The trainer for real: `python -m gan3d train` under MPICH's mpiexec with Horovod, tiny preset.

Nothing is mocked: real MPI processes, Horovod all-reduces, HDF5 files from the simulator.
"""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.support.paths import REPO
from tests.support.training import tiny_run_args, train, train_env

CONTRACT = [
    "site",
    "image_digest",
    "software",
    "mpi_library_version",
    "nodes",
    "ranks",
    "ranks_per_node",
    "threads_per_rank",
    "inter_op_threads",
    "thread_env",
    "batch_per_rank",
    "global_batch",
    "epochs",
    "epoch_times",
    "showers_per_second",
    "flop_per_step",
    "flop_per_second",
    "flop_per_second_per_rank",
    "precision",
    "peak_fp32_theoretical_flop_per_second",
    "peak_fp32_theoretical_basis",
    "peak_fp32_measured_flop_per_second",
    "percent_of_peak_fp32_theoretical",
    "percent_of_peak_fp32_measured",
    "peak_fp64_measured_flop_per_second",
    "percent_of_peak_fp64_measured",
    "percent_of_peak_fp64_max_clock",
    "percent_of_peak",
    "percent_of_peak_denominator",
    "losses",
    "peak_rss_bytes_per_rank",
    "seed",
    "preset",
    "data_files",
    "first_step_seconds",
    "weights_sha256_per_rank",
]


@pytest.fixture(scope="module")
def two_rank_run(parts, tmp_path_factory):
    """`python -m gan3d demo` with the tiny preset: simulate, 2-rank mpiexec training, physics
    check.
    """
    out = tmp_path_factory.mktemp("demo")
    cmd = [
        sys.executable,
        "-m",
        "gan3d",
        "demo",
        "--site",
        "laptop",
        "--preset",
        "tiny",
        "--epochs",
        "2",
        "--steps",
        "3",
        "--batch-size",
        "4",
        "--build",
        str(out / "build"),
        "--results",
        str(out / "r.json"),
        "--learn-steps",
        "0",  # the learning part runs for real in the laptop tutorial's test
    ]
    env = dict(
        train_env(), COLUMNS="250"
    )  # rich wraps long paths at 80 columns when not on a terminal
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads((out / "r.json").read_text()), out, proc


def test_two_ranks_end_with_identical_weights_and_learn(two_rank_run):
    record, _, proc = two_rank_run
    hashes = record["weights_sha256_per_rank"]
    assert len(hashes) == 2 and hashes[0] == hashes[1]
    assert hashes[0] != record["weights_sha256_initial"]
    first, last = record["losses"][0]["train"], record["losses"][-1]["train"]
    assert first["d_loss"] != last["d_loss"] and first["g_loss"] != last["g_loss"]
    assert set(record["losses"][0]["validation"]) >= {"d_loss", "g_loss"}
    # The demo warms the learning rate up over epoch 1 from lr to lr x ranks (0.001 -> 0.002).
    lr1, lr2 = record["losses"][0]["learning_rate"], record["losses"][1]["learning_rate"]
    assert lr1["first_step"] == pytest.approx(0.001 + 0.001 / 3, rel=1e-6)
    assert (
        lr1["last_step"] == pytest.approx(0.002, rel=1e-6) == lr2["first_step"] == lr2["last_step"]
    )
    assert "2 rank(s) on 1 node(s)" in proc.stdout and "KMP_BLOCKTIME=0" in proc.stdout
    # no alarming TensorFlow error lines (TF 2.15's remapper fails on the step's graph; it is off)
    assert " E tensorflow/" not in proc.stderr and "remapper failed" not in proc.stderr


def test_demo_validates_physics_and_prints_the_summary(two_rank_run):
    record, out, proc = two_rank_run
    physics = record[
        "physics"
    ]  # a short run may score below 0 (farther from the data than empty showers)
    raw, data, empty = (
        physics["score_raw"],
        physics["score_reference_data"],
        physics["score_reference_empty"],
    )
    assert 0 < data < empty and physics["score"] == pytest.approx((empty - raw) / (empty - data))
    assert "physics score (1 = like held-out data" in proc.stdout
    assert record["physics"]["plots"] and all(Path(p).is_file() for p in record["physics"]["plots"])
    for text in (
        "showers/s (job)",
        "GFLOP/s (job)",
        "% of measured matmul fp32 peak (",
        "theoretical peaks unknown: the site config gives no clock_ghz_avx",
        "the % above is of the fp32 peak measured here",
        str(out / "r.json"),
    ):
        assert text in proc.stdout, text


def test_results_carry_the_contract_with_plausible_values(two_rank_run):
    r, out, _ = two_rank_run
    missing = [k for k in CONTRACT if k not in r]
    assert not missing, missing
    assert (r["ranks"], r["nodes"], r["ranks_per_node"], r["threads_per_rank"]) == (2, 1, 2, 1)
    assert r["batch_per_rank"] == 4 and r["global_batch"] == 8 and r["site"] == "laptop"
    assert r["thread_env"]["OMP_NUM_THREADS"] == "1"
    assert "MPICH" in r["mpi_library_version"]
    assert r["software"]["tensorflow"].startswith("2.15") and r["software"]["horovod"] == "0.28.1"
    assert len(r["epoch_times"]) == 2 and all(t > 0 for t in r["epoch_times"])
    assert r["timed_steps"] == 2 * 3 - 1  # the first (tracing) step is reported separately
    assert r["showers_per_second"] == pytest.approx(8 * r["timed_steps"] / r["timed_seconds"])
    assert r["flop_per_step"]["job"]["total"] == 2 * r["flop_per_step"]["per_rank"]["total"] > 0
    assert r["flop_per_second"] == pytest.approx(
        r["showers_per_second"] * r["flop_per_shower"], rel=1e-9
    )
    # laptop is a VM: no theoretical peak; the measured fp32 peak is the denominator, named
    assert r["precision"] == "fp32" and r["peak_fp32_theoretical_flop_per_second"] is None
    from gan3d.model import FFT_LAYERS

    assert r["fft_convolutions"] == sorted(
        FFT_LAYERS
    )  # what ran, with a rate that counts model FLOP
    assert (
        r["peak_fp32_theoretical_basis"].startswith("unknown clock")
        and r["percent_of_peak_fp32_theoretical"] is None
    )
    assert (
        r["peak_fp32_measured_flop_per_second"] > 1e9
        and r["peak_fp64_measured_flop_per_second"] > 1e8
    )
    assert r["percent_of_peak_denominator"] == "fp32 measured peak"
    assert (
        r["percent_of_peak"]
        == r["percent_of_peak_fp32_measured"]
        == pytest.approx(100 * r["flop_per_second"] / r["peak_fp32_measured_flop_per_second"])
    )
    assert 0 < r["percent_of_peak"] <= 100 and r["percent_of_peak_fp64_max_clock"] is None
    assert len(r["peak_rss_bytes_per_rank"]) == 2 and min(r["peak_rss_bytes_per_rank"]) > 50 * 2**20
    assert r["memory_within_node"] is True
    assert r["data_files"] == {"train": 2, "validation": 1} and r["train_events"] == 512
    ckpt = Path(r["checkpoint"])
    assert ckpt.name == "epoch-0002" and (ckpt / "generator.weights.h5").is_file()


def test_resume_gives_bit_identical_weights(parts, data, tmp_path):
    """2 ranks: per-rank noise streams and BatchNorm statistics must also continue exactly. The run
    stopped after epoch 1 is the straight run's own epoch-1 checkpoint, alone in a directory."""
    straight = train(
        tiny_run_args(
            data,
            tmp_path / "a.json",
            "--epochs",
            "2",
            "--deterministic",
            "--checkpoint-dir",
            str(tmp_path / "a"),
        ),
        ranks=2,
    )
    assert straight.returncode == 0, straight.stderr[-3000:]
    (tmp_path / "b").mkdir()
    shutil.copytree(tmp_path / "a" / "epoch-0001", tmp_path / "b" / "epoch-0001")
    resumed = train(
        tiny_run_args(
            data,
            tmp_path / "b.json",
            "--epochs",
            "2",
            "--resume",
            "--checkpoint-dir",
            str(tmp_path / "b"),
            "--deterministic",
        ),
        ranks=2,
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    a, b = (json.loads((tmp_path / f).read_text()) for f in ("a.json", "b.json"))
    assert b["start_epoch"] == 1 and "resumed from" in resumed.stdout
    assert len(b["losses"]) == 1 and b["losses"][0]["train"] == a["losses"][1]["train"]
    epoch1, epoch2 = (
        _weights(tmp_path / "a" / f"epoch-000{e}" / "generator.weights.h5") for e in (1, 2)
    )
    assert epoch1.keys() == epoch2.keys() and any(
        not np.array_equal(epoch1[k], epoch2[k]) for k in epoch1
    )  # epoch 2 moved the weights...
    assert b["weights_sha256_per_rank"] == a["weights_sha256_per_rank"]  # ...the same way
    assert len(set(a["weights_sha256_per_rank"])) == 1


def _weights(path: Path) -> dict[str, np.ndarray]:
    """Every array of a `.weights.h5` file, by its name there."""
    import h5py

    found: dict[str, np.ndarray] = {}
    with h5py.File(path, "r") as f:
        f.visititems(
            lambda name, obj: (
                found.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None
            )
        )
    return found


def test_impossible_ranks_times_threads_is_refused(parts, data, tmp_path):
    proc = train(
        tiny_run_args(data, tmp_path / "r.json", "--site", "laptop", "--threads", "2"),
        ranks=2,
        timeout=60,
    )
    assert proc.returncode != 0
    assert "2 rank(s) per node x --threads 2 = 4 threads" in proc.stderr
    assert "--threads 1" in proc.stderr and "--oversubscribe" in proc.stderr
    assert not (tmp_path / "r.json").exists()


def test_corrupt_data_file_is_named(parts, data, tmp_path):
    bad = tmp_path / "EleEscan_9_9.h5"
    blob = Path(data[0]).read_bytes()
    bad.write_bytes(blob[: len(blob) // 2])  # a truncated copy
    proc = train(
        [
            "--data",
            f"{bad},{data[1]}",
            "--validation-data",
            str(data[2]),
            "--preset",
            "tiny",
            "--batch-size",
            "4",
            "--threads",
            "1",
        ],
        timeout=60,
    )
    assert proc.returncode == 1
    assert str(bad) in proc.stderr and "gan3d train: error:" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_itex_on_without_the_extra_is_a_clear_error(data, tmp_path):
    import importlib.util

    if importlib.util.find_spec("intel_extension_for_tensorflow") is not None:
        pytest.skip("ITEX is installed here: the missing-extra error cannot occur")
    proc = train(
        ["--data", str(data[0]), "--validation-data", str(data[2]), "--itex", "on"], timeout=60
    )
    assert (
        proc.returncode == 1
        and "ITEX does not load" in proc.stderr
        and "scripts/setup.sh --itex" in proc.stderr
        and "--itex off" in proc.stderr
    )


def test_synthetic_showers_are_simulated_once_and_shared_by_both_ranks(parts, tmp_path):
    """--synthetic 256 writes two files of 128; --test-fraction 0.1 holds out 26 events, not a
    file.
    """
    out = tmp_path / "synthetic"
    results = tmp_path / "r.json"
    proc = train(
        [
            "--synthetic",
            "256",
            "--synthetic-dir",
            str(out),
            "--test-fraction",
            "0.1",
            "--preset",
            "tiny",
            "--batch-size",
            "4",
            "--steps-per-epoch",
            "2",
            "--validation-steps",
            "1",
            "--threads",
            "1",
            "--seed",
            "3",
            "--results",
            str(results),
        ],
        ranks=2,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    written = sorted(out.glob("*.h5"))
    assert len(written) == 2  # rank 0 wrote them; rank 1 read the same directory
    record = json.loads(results.read_text())
    assert record["ranks"] == 2
    assert (record["train_events"], record["validation_events"]) == (230, 26)
    held = record["held_out"]
    assert (
        held["by"] == "events"
        and held["events"] == 26
        and held["of_events"] == 256
        and held["seed"] == 3
    )
    assert sorted(s["file"] for s in held["source"]) == [str(p) for p in written]
    assert sum(s["stop"] - s["first"] for s in held["source"]) == 26
    assert "held out 26 of 256 events for validation" in proc.stdout
