"""Peak FLOP/s: the theoretical formula and the matmul micro-benchmark's plumbing."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gan3d import peak


def test_theoretical_peak_of_this_machine_and_supermuc_ng():
    assert peak.theoretical_peak(2, 2.0, 64) == 256e9
    # SuperMUC-NG node, FP64 Top500 convention of the paper: 48 cores x 2.7 GHz x 32
    assert peak.theoretical_peak(48, 2.7, 32) == pytest.approx(4.1472e12)
    with pytest.raises(ValueError, match="cores >= 1"):
        peak.theoretical_peak(0, 2.0, 64)


def test_measured_peak_per_precision_beside_the_sites_theoretical_one(capsys):
    pytest.importorskip("tensorflow")
    assert peak.measure_peak_flops(seconds=0.2, n=512) > 1e8  # any CPU of this century
    assert peak.main(["--seconds", "0.2", "--matrix", "256", "--site", "supermuc-ng"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["precisions"]) == {"fp32", "bf16", "fp64"}
    assert out["machine"]["cpus"] >= 1 and out["machine"]["cpu_model"]
    fp32, bf16, fp64 = (out["precisions"][p] for p in ("fp32", "bf16", "fp64"))
    assert "bfloat16" in bf16["kernel"] and "float64" in fp64["kernel"]
    assert all(e["measured_flop_per_second"] > 1e7 for e in (fp32, bf16, fp64))
    assert fp32["theoretical_flop_per_second"] == pytest.approx(48 * 2.3e9 * 64)
    assert fp32["percent_of_theoretical"] == pytest.approx(
        100 * fp32["measured_flop_per_second"] / (48 * 2.3e9 * 64)
    )
    assert bf16["theoretical_flop_per_second"] is None and bf16["percent_of_theoretical"] is None
    assert "bf16_flop_per_cycle_per_core" in bf16["theoretical_basis"]
    assert out["paper_convention"]["flop_per_second"] == pytest.approx(4.1472e12)


def test_laptop_states_its_theoretical_peak_is_unknown(capsys):
    pytest.importorskip("tensorflow")
    assert (
        peak.main(
            ["--seconds", "0.1", "--matrix", "128", "--precision", "fp32", "--site", "laptop"]
        )
        == 0
    )
    fp32 = json.loads(capsys.readouterr().out)["precisions"]["fp32"]
    assert fp32["theoretical_flop_per_second"] is None and fp32["theoretical_basis"].startswith(
        "unknown clock"
    )
    assert fp32["measured_flop_per_second"] > 1e7


def test_other_thread_count_than_the_running_runtime_uses_a_fresh_process(monkeypatch):
    tf = pytest.importorskip("tensorflow")
    tf.constant(1.0) + 1  # the runtime is up: its thread pool is fixed from here on
    current = tf.config.threading.get_intra_op_parallelism_threads()
    launched = []
    real_run = peak.run_bounded

    def spy(cmd, *args, **kwargs):
        launched.append(cmd)
        return real_run(cmd, *args, **kwargs)

    monkeypatch.setattr(peak, "run_bounded", spy)
    assert peak.measure_peak_flops(threads=current + 1, seconds=0.2, n=256) > 1e8
    assert len(launched) == 1 and launched[0][1:4] == ["-m", "gan3d", "peak"]
    assert launched[0][-2:] == ["--threads", str(current + 1)]  # measured in a fresh process


def test_cli_rejects_an_unknown_precision_and_an_unknown_site(capsys):
    with pytest.raises(SystemExit):
        peak.main(["--precision", "fp16"])
    assert "fp32, bf16, fp64" in capsys.readouterr().err
    assert peak.main(["--site", "atlantis"]) == 1
    assert "unknown site 'atlantis'" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ["--seconds", "nan"],
        ["--seconds", "inf"],
        ["--seconds", "601"],
        ["--matrix", "100000000"],
        ["--seconds=-1"],
    ],
)
def test_cli_refuses_seconds_that_never_end_and_matrices_past_memory(argv):
    """--seconds nan or inf measured forever (the deadline is never reached), a
    10^8 x 10^8 matrix is allocated whole: a usage line before TensorFlow starts, exit 2."""
    done = subprocess.run(
        [sys.executable, "-m", "gan3d", "peak", "--precision", "fp32", *argv],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and done.stdout == "", done.stderr[-2000:]
    assert done.stderr.splitlines()[-1].startswith("python -m gan3d peak: error: --seconds "), (
        done.stderr
    )
    assert "give 0 < seconds <= 600 and a matrix of 1..8192" in done.stderr
