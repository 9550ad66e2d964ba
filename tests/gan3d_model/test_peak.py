"""Peak FLOP/s: the theoretical formula and the matmul micro-benchmark's plumbing."""
import json

import pytest

from gan3d import peak


def test_theoretical_peak_of_this_machine_and_supermuc_ng():
    assert peak.theoretical_peak(2, 2.0, 64) == 256e9
    # SuperMUC-NG node, FP64 Top500 convention of the paper: 48 cores x 2.7 GHz x 32
    assert peak.theoretical_peak(48, 2.7, 32) == pytest.approx(4.1472e12)
    with pytest.raises(ValueError, match="cores >= 1"):
        peak.theoretical_peak(0, 2.0, 64)


def test_measured_peak_runs_a_real_matmul(capsys):
    pytest.importorskip("tensorflow")
    rate = peak.measure_peak_flops(seconds=0.2, n=512)
    assert rate > 1e8  # any CPU of this century; the figure itself is a benchmark's business
    assert peak.main(["--seconds", "0.2", "--matrix", "256", "--cores", "2", "--clock-ghz", "2",
                      "--flop-per-cycle", "64"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["theoretical_flop_per_second"] == 256e9
    assert out["percent_of_theoretical"] == pytest.approx(100 * out["measured_flop_per_second"] / 256e9)


def test_other_thread_count_than_the_running_runtime_uses_a_fresh_process(monkeypatch):
    tf = pytest.importorskip("tensorflow")
    tf.constant(1.0) + 1  # the runtime is up: its thread pool can no longer change
    current = tf.config.threading.get_intra_op_parallelism_threads()
    launched = []
    real_run = peak.subprocess.run

    def spy(cmd, *args, **kwargs):
        launched.append(cmd)
        return real_run(cmd, *args, **kwargs)
    monkeypatch.setattr(peak.subprocess, "run", spy)
    assert peak.measure_peak_flops(threads=current + 1, seconds=0.2, n=256) > 1e8
    assert len(launched) == 1 and launched[0][1:4] == ["-m", "gan3d", "peak"]
    assert launched[0][-2:] == ["--threads", str(current + 1)]  # measured in a fresh process


def test_cli_rejects_partial_theoretical_arguments(capsys):
    with pytest.raises(SystemExit):
        peak.main(["--cores", "2"])
    assert "--clock-ghz" in capsys.readouterr().err
