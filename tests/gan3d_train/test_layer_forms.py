"""`gan3d train --forms auto` on this machine: the first run probes each convolution's forms and
caches the choice, the next run with the same key takes it from the cache, and both results say
which forms ran and where they came from. Real tiny trainings; no time is asserted."""

import json
import subprocess
import sys

import pytest

from gan3d.model import candidate_forms
from tests.support.paths import REPO
from tests.support.training import tiny_run_args, train_env


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    from gan3d.simulate import write_files

    return write_files(tmp_path_factory.mktemp("showers"), 3, 32, seed=3)


def _train(args: list[str], cache, forms: str = "auto") -> subprocess.CompletedProcess:
    env = dict(train_env(), GAN3D_FORMS=forms, XDG_CACHE_HOME=str(cache))
    env.pop("KIT_CACHE", None)  # it would move the cache past XDG_CACHE_HOME
    return subprocess.run(
        [sys.executable, "-m", "gan3d", "train", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def test_auto_forms_are_probed_once_then_taken_from_the_cache_and_recorded(data, tmp_path):
    cache = tmp_path / "xdg"
    first = _train(tiny_run_args(data, tmp_path / "r1.json", "--epochs", "1"), cache)
    assert first.returncode == 0, first.stderr[-3000:]
    r1 = json.loads((tmp_path / "r1.json").read_text())["layer_forms"]
    allowed = candidate_forms("fp32")
    assert r1["source"] == "probe" and set(r1["forms"]) == set(allowed)
    assert all(r1["forms"][name] in allowed[name] for name in allowed)
    # every form of every layer was timed (a far slower one at least once)
    assert {k: set(v) for k, v in r1["probe"]["median_ms"].items()} == {
        k: set(v) for k, v in allowed.items()
    }
    (cached,) = (cache / "secure-site-kit" / "gan3d-forms").iterdir()
    assert r1["cache_file"] == str(cached)
    assert "layer forms (probe" in first.stdout

    second = _train(tiny_run_args(data, tmp_path / "r2.json", "--epochs", "1"), cache)
    assert second.returncode == 0, second.stderr[-3000:]
    record = json.loads((tmp_path / "r2.json").read_text())
    r2 = record["layer_forms"]
    assert (r2["source"], r2["forms"], r2["probe"]) == ("cache", r1["forms"], None)
    assert "layer forms (cache)" in second.stdout
    # the frequency-domain layers the record names are the ones the choice put there
    assert record["fft_convolutions"] == sorted(n for n, f in r2["forms"].items() if f == "fft")


def test_a_bad_forms_default_from_the_environment_is_one_line(data, tmp_path):
    done = _train(tiny_run_args(data, tmp_path / "r.json"), tmp_path / "xdg", forms="fastest")
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "GAN3D_FORMS" in done.stderr and "fix:" in done.stderr
    assert not (tmp_path / "r.json").exists() and not (tmp_path / "xdg").exists()
