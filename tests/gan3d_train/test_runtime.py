"""Thread settings and capacity checks of gan3d.runtime (no MPI, no TensorFlow needed)."""

import pytest

from gan3d import runtime
from gan3d.runtime import SettingsError


def test_default_threads_prefers_slurm_cpus_per_task():
    assert runtime.default_threads(4, 48, {"SLURM_CPUS_PER_TASK": "12"}) == 12
    assert runtime.default_threads(4, 48, {}) == 12
    assert runtime.default_threads(3, 2, {}) == 1  # never zero threads


def test_thread_settings_use_hpai_defaults_but_let_the_environment_override():
    s = runtime.thread_settings(12, 2, {})
    assert s.intra_op == 12 and s.inter_op == 2
    assert s.env == {
        "OMP_NUM_THREADS": "12",
        "KMP_AFFINITY": "granularity=fine,compact,1,0",
        "KMP_BLOCKTIME": "0",
    }
    s = runtime.thread_settings(4, 1, {"KMP_BLOCKTIME": "1", "OMP_NUM_THREADS": "99"})
    assert s.env["KMP_BLOCKTIME"] == "1"
    assert s.env["OMP_NUM_THREADS"] == "4"  # --threads decides, not a stale variable


def test_too_many_threads_per_node_is_refused_with_the_fix():
    runtime.check_capacity(
        4, 12, 2, cores=48, where="'supermuc-ng' site"
    )  # HPAI's layout fits exactly
    with pytest.raises(SettingsError) as err:
        runtime.check_capacity(2, 2, 2, cores=2, where="'laptop' site")
    text = str(err.value)
    assert (
        "--threads 2" in text
        and "2 cores" in text
        and "--threads 1" in text
        and "--oversubscribe" in text
    )
    runtime.check_capacity(2, 2, 2, cores=2, where="'laptop' site", oversubscribe=True)
    with pytest.raises(SettingsError, match="--threads 0"):
        runtime.check_capacity(1, 0, 2, cores=2, where="x")
