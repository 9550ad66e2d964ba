"""The kit's cache and state directories follow one rule (kit.cachedir), whoever asks: udocker's
wrappers, gan3d's forms cache, `kit vcluster`'s Intel MPI, the wheel checks, the crash reports, the
tests' Apptainer and the shell scripts."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from unittest import mock

from hypothesis import given
from hypothesis import strategies as st

from gan3d import formcache
from kit import crash
from kit.cachedir import cache_base, kit_cache, kit_state
from kit.reference.environment import scan
from kit.runtime import udocker
from kit.vcluster.sites import default_intel_mpi
from tests.support.paths import REPO
from tests.support.sources import module_name, parsed

VARIABLES = ("HOME", "KIT_CACHE", "XDG_CACHE_HOME", "XDG_STATE_HOME", "KIT_CRASH_DIR")
SCRIPTS = ("setup.sh", "lock.sh", "apptainer.sh", "lint.sh", "wheelhouse.sh")


def expected(env: dict[str, str]) -> tuple[Path, Path]:
    """(cache, state) as docs/reference/environment.md states the rule, written out apart from the
    code: KIT_CACHE moves the cache; a relative or empty XDG variable counts as unset."""
    home = Path(env["HOME"])
    if env.get("KIT_CACHE"):
        cache = Path(env["KIT_CACHE"])
    elif env.get("XDG_CACHE_HOME", "").startswith("/"):
        cache = Path(env["XDG_CACHE_HOME"]) / "secure-site-kit"
    else:
        cache = home / ".cache" / "secure-site-kit"
    xdg_state = env.get("XDG_STATE_HOME", "")
    state = Path(xdg_state) if xdg_state.startswith("/") else home / ".local" / "state"
    return cache, state / "secure-site-kit"


def environments(root: Path) -> st.SearchStrategy[dict[str, str]]:
    """HOME and the XDG variables absolute, relative, empty or unset; KIT_CACHE set, empty or not."""
    unset = st.just(None)
    xdg = st.sampled_from([str(root / "xdg"), "rel/xdg", "", None])
    parts = st.fixed_dictionaries(
        {
            "HOME": st.sampled_from([str(root / "home"), str(root / "other")]),
            "KIT_CACHE": st.sampled_from([str(root / "moved"), "", None]),
            "XDG_CACHE_HOME": xdg,
            "XDG_STATE_HOME": xdg | unset,
        }
    )
    return parts.map(lambda d: {k: v for k, v in d.items() if v is not None})


ROOT = Path("/nonexistent-kit-test")  # paths only: nothing is made under it


@given(env=environments(ROOT))
def test_every_reader_of_the_cache_and_state_directories_gets_the_one_rule(env):
    cache, state = expected(env)
    kept = {k: v for k, v in os.environ.items() if k not in VARIABLES}
    with mock.patch.dict(os.environ, {**kept, **env}, clear=True):
        assert kit_cache() == kit_cache(env) == cache
        assert kit_state() == kit_state(env) == state
        assert udocker.cache_dir() == cache / "udocker"
        assert cache_base() == cache.parent
        assert formcache.cache_dir() == formcache.cache_dir(env) == cache / "gan3d-forms"
        assert crash._crash_dir() == state


def test_the_intel_mpi_is_found_in_the_kit_cache_and_a_relative_xdg_is_not_followed(
    tmp_path, monkeypatch
):
    for where, version in (("moved", "3.0"), ("xdg/secure-site-kit", "2.0"), ("rel", "9.0")):
        (tmp_path / where / "impi" / version / "bin").mkdir(parents=True)
        (tmp_path / where / "impi" / version / "bin" / "mpiexec.hydra").touch()
    (tmp_path / "rel" / "secure-site-kit").mkdir()
    (tmp_path / "rel" / "impi").rename(tmp_path / "rel" / "secure-site-kit" / "impi")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("KIT_CACHE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", "rel")  # relative: ignored, ~/.cache has none
    assert default_intel_mpi() is None
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_intel_mpi() == tmp_path / "xdg/secure-site-kit/impi/2.0"
    monkeypatch.setenv("KIT_CACHE", str(tmp_path / "moved"))
    assert default_intel_mpi() == tmp_path / "moved/impi/3.0"


def test_a_crash_dir_variable_still_moves_the_crash_reports_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("KIT_CRASH_DIR", str(tmp_path / "crashes"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert crash._crash_dir() == tmp_path / "crashes"
    assert kit_state() == tmp_path / "state" / "secure-site-kit"


def test_the_scripts_place_the_cache_where_the_kit_does(tmp_path):
    lines = set()
    for name in SCRIPTS:
        found = [
            line
            for line in (REPO / "scripts" / name).read_text().splitlines()
            if "KIT_CACHE:-" in line
        ]
        assert len(found) == 1, name  # one place sets CACHE, the same way in each script
        lines.add(found[0])
    assert len(lines) == 1
    (line,) = lines
    cases = [
        {"HOME": str(tmp_path)},
        {"HOME": str(tmp_path), "XDG_CACHE_HOME": "rel"},
        {"HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "x")},
        {"HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "x"), "KIT_CACHE": "/m"},
        {"HOME": str(tmp_path), "KIT_CACHE": ""},
    ]
    for env in cases:
        run = subprocess.run(
            ["bash", "-c", f'{line.split("  #")[0]}\necho "$CACHE"'],
            capture_output=True,
            text=True,
            check=True,
            env=env,
        )
        assert Path(run.stdout.strip()) == kit_cache(env), env


def test_only_the_one_module_reads_the_variables_that_place_the_cache():
    readers = scan({module_name(path): tree for path, tree in parsed().items()}).readers
    for variable in ("KIT_CACHE", "XDG_CACHE_HOME", "XDG_STATE_HOME", "HOME"):
        assert readers[variable] == {"kit.cachedir"}, variable
