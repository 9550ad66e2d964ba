"""Intel Extension for TensorFlow: loaded, not only installed. The probe's child protocol with real
child processes (one that answers, one that aborts as a C++ check does), the refusal of `--itex
on` where ITEX does not load, `kit scale tune --itex off,on` reporting such a candidate refused,
and, where the ITEX stack (scripts/setup.sh --itex) loads ITEX, a 2-rank training that records it
loaded."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from gan3d import itex
from kit.errors import KitError
from kit.scale import tune
from kit.site import load_site

REPO = Path(__file__).resolve().parents[2]
MPIEXEC = shutil.which("mpiexec.hydra") or shutil.which("mpiexec.mpich")
ITEX_PYTHON = Path(os.environ.get("KIT_ITEX_PYTHON") or REPO / ".venv-itex" / "bin" / "python")
LOADED = {
    "installed": True,
    "loaded": True,
    "version": "2.15.0.0",
    "backend": "CPU AVX512",
    "library": "libitex_cpu_internal_avx512.so",
    "reason": None,
}


def fake_python(tmp_path: Path, body: str) -> str:
    """A real executable standing in for another venv's Python: the probe runs it as a child."""
    path = tmp_path / "python"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def test_a_child_that_answers_loaded_is_loaded(tmp_path):
    python = fake_python(tmp_path, f"echo 'some log line'\necho '{json.dumps(LOADED)}'\n")
    state = itex.probe(python)
    assert state.loaded and state.backend == "CPU AVX512" and state.version == "2.15.0.0"
    assert state.record() == LOADED


def test_a_child_that_floods_its_output_is_read_with_a_bound_and_still_heard(tmp_path):
    """20 MB of log before its answer: the probe keeps the head and tail of each stream."""
    flood = "head -c 20000000 /dev/zero | tr '\\0' x\necho\n"
    state = itex.probe(fake_python(tmp_path, f"{flood}echo '{json.dumps(LOADED)}'\n"))
    assert state.record() == LOADED


def test_a_child_that_aborts_is_a_reason_with_its_last_words(tmp_path):
    body = 'echo "W itex: this CPU is not supported by this build" >&2\nkill -ABRT $$\n'
    state = itex.probe(fake_python(tmp_path, body))
    assert not state.loaded and state.installed
    assert state.reason.startswith("importing ITEX was killed by signal 6: ")
    assert "this CPU is not supported by this build" in state.reason and "\n" not in state.reason


def test_a_child_that_exits_or_hangs_or_is_missing_is_a_reason(tmp_path):
    state = itex.probe(fake_python(tmp_path, "echo 'no JSON here'\nexit 3\n"))
    assert state.reason == "importing ITEX ended with exit 3: no JSON here"
    hung = itex.probe(fake_python(tmp_path, "echo 'stuck in dlopen' >&2\nsleep 30\n"), timeout=0.5)
    assert not hung.loaded and hung.reason.endswith("did not answer in 0.5 s: stuck in dlopen")
    gone = itex.probe(str(tmp_path / "no-such-python"))
    assert not gone.loaded and not gone.installed and "no-such-python" in gone.reason


def test_loaded_means_the_kernel_library_is_mapped():
    lib = "/v/site-packages/intel_extension_for_tensorflow/libitex_cpu_internal_avx2.so"
    maps = f"7f00-7f10 r-xp 0 08:01 1 /v/tensorflow-plugins/libitex_cpu.so\n7f20-7f30 r-xp 0 08:01 2 {lib}\n"
    assert itex.kernel_library(maps) == "libitex_cpu_internal_avx2.so"
    # the plugin wrapper alone, or a venv named -itex, is not ITEX's kernels
    assert itex.kernel_library(maps.splitlines()[0] + "\n7f 0 /x/.venv-itex/lib/libfoo.so") is None


def test_a_refusal_carries_itex_own_log_lines(tmp_path):
    answer = json.dumps(
        {**LOADED, "loaded": False, "backend": None, "library": None, "reason": "no"}
    )
    said = "E itex/core/wrapper/itex_cpu_wrapper.cc:42] this CPU lacks AVX2"
    state = itex.probe(fake_python(tmp_path, f"echo '{said}' >&2\necho '{answer}'\nexit 1\n"))
    assert not state.loaded and state.reason == f"no; ITEX said: {said}"


def test_without_itex_installed_the_reason_names_the_itex_stack():
    if itex.installed():
        pytest.skip("ITEX is installed in this Python: the not-installed reason cannot occur")
    state = itex.load_here()
    assert not state.loaded and not state.installed
    assert "scripts/setup.sh --itex" in state.reason and "--itex off" in state.reason
    assert itex.main([]) == 1


def test_the_probe_command_answers_in_one_line_whatever_the_child_did(tmp_path):
    """setup.sh --itex prints `python -m gan3d.itex --probe`'s line: an aborting plugin too."""
    env = dict(_env(), PATH=f"{tmp_path}:{os.environ['PATH']}")
    fake_python(tmp_path, 'echo "E itex: no AVX2" >&2\nkill -ABRT $$\n')
    code = "import sys; from gan3d import itex; sys.exit(itex.main(['--probe']))"
    script = f"import gan3d.itex as m; m.probe.__defaults__ = ({str(tmp_path / 'python')!r}, 60.0); {code}"
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1 and done.stderr == ""
    assert done.stdout == "importing ITEX was killed by signal 6: E itex: no AVX2\n"


def _env() -> dict:
    env = dict(os.environ, PYTHONPATH=str(REPO), TMPDIR=tempfile.gettempdir())
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    for key in [k for k in env if k.startswith(("SLURM_", "OMPI_", "PMI_"))]:
        del env[key]
    return env


def test_itex_on_where_it_does_not_load_is_one_line_and_exit_1(tmp_path):
    if itex.installed():
        pytest.skip("ITEX is installed in this Python: this run would not be refused")
    proc = subprocess.run(
        [sys.executable, "-m", "gan3d", "train", "--synthetic", "64", "--itex", "on"],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(err) == 1, proc.stderr
    assert err[0].startswith("gan3d train: error: --itex on: ITEX does not load: ")
    assert "is not installed in this Python" in err[0]


def test_tune_itex_is_one_more_dimension():
    laptop = load_site("laptop")
    both = tune.candidate_layouts(laptop, [(1, 2)], itex=("off", "on"))
    assert [c.run_id for c in both] == ["r1-t2-fp32", "r1-t2-fp32-itex"]
    assert [c.name for c in both] == ["1x2 fp32", "1x2 fp32 itex"]
    assert tune.tune_args(both[1], 3, 0.5)[-2:] == ("--itex", "on")
    assert "--itex" not in tune.tune_args(both[0], 3, 0.5)
    with pytest.raises(KitError, match="--itex maybe: give off, on or off,on"):
        tune.candidate_layouts(laptop, [(1, 2)], itex=("maybe",))
    with pytest.raises(KitError, match="--itex: kit scale tune sets"):
        tune.check_train_args(("--itex", "on"))


def test_tune_finds_the_itex_venv_beside_the_running_one(tmp_path):
    main_python = tmp_path / ".venv" / "bin" / "python"
    assert tune.sibling_itex_python(str(main_python)) is None
    itex_python = tmp_path / ".venv-itex" / "bin" / "python"
    itex_python.parent.mkdir(parents=True)
    itex_python.write_text("")
    assert tune.sibling_itex_python(str(main_python)) == str(itex_python)


def test_tune_reports_an_itex_candidate_that_cannot_load_as_refused(tmp_path, monkeypatch):
    """The on candidate is never launched: it gets ITEX's reason; the off one runs and is the best."""
    body = 'echo "E itex: CPU feature check failed" >&2\nexit 1\n'
    python = fake_python(tmp_path, body)
    out = tmp_path / "tune"
    launched = []

    def run_bounded(cmd, log, timeout):
        launched.append(cmd)
        results = Path(cmd[cmd.index("--results") + 1])
        results.write_text(
            json.dumps(
                {"status": "ok", "showers_per_second": 5.0, "peak_rss_bytes_per_rank": [2**28]}
            )
        )
        return 0

    monkeypatch.setattr(tune, "_run_bounded", run_bounded)
    monkeypatch.setattr(tune, "local_launcher", lambda site: ["mpiexec"])
    laptop = load_site("laptop")
    layouts = tune.candidate_layouts(laptop, [(1, 2)], itex=("off", "on"))
    measured = tune.run_local(
        laptop,
        layouts,
        out,
        train_args=(),
        steps=3,
        peak_seconds=0.5,
        timeout=60,
        itex_python=python,
    )
    assert len(launched) == 1 and "--itex" not in launched[0] and sys.executable in launched[0]
    off, on = measured
    assert off.showers_per_second == 5.0 and not off.problem
    assert on.showers_per_second is None
    assert on.problem == (
        f"refused: ITEX does not load in {python}: importing ITEX ended with exit 1: "
        "E itex: CPU feature check failed"
    )
    tune.write_tune(laptop, 1, measured, out_dir=out)
    doc = yaml.safe_load((out / tune.TUNE_NAME).read_text())
    assert doc["best"]["itex"] == "off"
    assert [(r["itex"], r["problem"]) for r in doc["layouts"]] == [
        ("off", None),
        ("on", on.problem),
    ]


def _itex_state() -> itex.ItexState:
    if not ITEX_PYTHON.is_file():
        pytest.skip(f"no ITEX stack at {ITEX_PYTHON} (scripts/setup.sh --itex makes it)")
    state = itex.probe(str(ITEX_PYTHON))
    if not state.loaded:
        pytest.skip(f"ITEX does not load in {ITEX_PYTHON}: {state.reason}")
    return state


@pytest.mark.slow
def test_a_two_rank_itex_run_records_the_plugin_loaded(tmp_path):
    state = _itex_state()
    if MPIEXEC is None:
        pytest.skip("no MPICH mpiexec (apt-get install mpich)")
    results = tmp_path / "itex.json"
    cmd = [MPIEXEC, "-n", "2", str(ITEX_PYTHON), "-m", "gan3d", "train", "--synthetic", "256"]
    cmd += ["--preset", "tiny", "--batch-size", "4", "--epochs", "1", "--steps-per-epoch", "3"]
    cmd += ["--validation-steps", "1", "--threads", "1", "--itex", "on", "--results", str(results)]
    proc = subprocess.run(
        cmd, cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    record = json.loads(results.read_text())
    assert record["ranks"] == 2 and record["status"] == "ok"
    assert record["itex"] == {"requested": True, **state.record()}
    assert record["software"]["itex"] == state.version


@pytest.mark.slow
def test_itex_off_in_the_itex_stack_records_the_plugin_tensorflow_loaded_anyway(tmp_path):
    """TensorFlow loads an installed plugin at its import: --itex off there is no plain run, and the
    record says so (the plain stack is the main venv)."""
    state = _itex_state()
    results = tmp_path / "off.json"
    cmd = [str(ITEX_PYTHON), "-m", "gan3d", "train", "--synthetic", "256", "--preset", "tiny"]
    cmd += [
        "--batch-size",
        "4",
        "--epochs",
        "1",
        "--steps-per-epoch",
        "2",
        "--validation-steps",
        "1",
    ]
    cmd += ["--threads", "1", "--itex", "off", "--results", str(results)]
    proc = subprocess.run(
        cmd, cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "--itex off, but TensorFlow loads an installed ITEX plugin" in proc.stdout + proc.stderr
    record = json.loads(results.read_text())
    assert record["itex"] == {"requested": False, **state.record()}


@pytest.mark.slow
def test_itex_trained_showers_lie_within_the_fp32_seed_spread(tmp_path):
    """Physics equivalence of the ITEX stack (gan3d.equivalence): its fp32 generator, seed A, lands
    no farther from this stack's seed A than this stack's seed B does, statistic by statistic."""
    import numpy as np

    from gan3d import equivalence
    from gan3d.data import preprocess
    from gan3d.simulate import simulate_showers

    state = _itex_state()
    raw, energy = simulate_showers(64, np.random.default_rng(7), emin=50.0, emax=450.0)
    images, ep, cellsum = preprocess(raw, energy, 1.0)
    np.savez(tmp_path / "showers.npz", images=images, ep=ep, cellsum=cellsum)
    run = dict(steps=16, batch=4, generated=128)
    cmd = [str(ITEX_PYTHON), "-m", "gan3d.equivalence", "--showers", str(tmp_path / "showers.npz")]
    cmd += ["--preset", "tiny", "--seed", "3"] + [f"--{k}={v}" for k, v in run.items()]
    proc = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["itex"] == state.record()  # the plugin's kernels ran the ITEX training
    showers = (images, ep, cellsum)
    a, b = (
        equivalence.trained_statistics("tiny", "fp32", seed, showers=showers, **run)
        for seed in (3, 4)
    )
    on = out["statistics"]
    here_a, here_b, itex_a = ({k: np.asarray(v) for k, v in x.items()} for x in (a, b, on))
    spread = equivalence.seed_spread({3: here_a, 4: here_b})[3]
    diff = equivalence.distances(itex_a, here_a)
    assert all(v > 0 for v in spread.values()), spread  # the seeds made a difference
    for key in spread:
        assert diff[key] <= spread[key], (
            f"{key}: ITEX vs fp32 {diff[key]:.4g} > fp32 seed spread {spread[key]:.4g}"
        )
