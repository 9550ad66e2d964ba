"""The pin list resolves for every login node README promises (Python 3.9-3.12 on manylinux2014
and manylinux_2_28, x86_64): `make lock` checks it with pip, a pin without a wheel is named with
the newest release that has one, and `make wheelhouse` on a platform without a pin's wheel fails
in one line naming the package, its version, the platform, the Python and the fix."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from packaging.markers import Marker

from kit import markers, pins, wheelcheck
from tests.support.installs import CACHE, require_pypi, run
from tests.support.paths import REPO

HASH = "--hash=sha256:" + "0" * 64

# -- markers, as pip would evaluate them on the site's Python -------------------------------------

_VERSIONS = st.sampled_from(
    ["3", "3.9", "3.10", "3.11", "3.12", "3.9.0", "3.9.2", "3.11.7", "3.12.99", "4"]
)
_VERSION_TERM = st.builds(
    lambda var, op, value: f"{var} {op} '{value}'",
    st.sampled_from(["python_version", "python_full_version"]),
    st.sampled_from(["==", "!=", "<", "<=", ">", ">="]),
    _VERSIONS,
)
_WILDCARD_TERM = st.builds(
    lambda var, op, value: f"{var} {op} '{value}.*'",
    st.sampled_from(["python_version", "python_full_version"]),
    st.sampled_from(["==", "!="]),
    st.sampled_from(["3", "3.9", "3.10", "3.11"]),
)
_STRING_TERM = st.builds(
    lambda var, op, value: f"{var} {op} '{value}'",
    st.sampled_from(["sys_platform", "implementation_name", "platform_machine"]),
    st.sampled_from(["==", "!=", "in", "not in"]),
    st.sampled_from(["linux", "win32", "cpython", "PyPy", "x86_64", "aarch64", "linux win32", ""]),
)
_TERM = st.one_of(_VERSION_TERM, _WILDCARD_TERM, _STRING_TERM)
MARKERS = st.recursive(
    _TERM,
    lambda inner: st.one_of(
        st.builds(lambda a, op, b: f"{a} {op} {b}", inner, st.sampled_from(["and", "or"]), inner),
        inner.map(lambda m: f"({m})"),
    ),
    max_leaves=6,
)


@settings(max_examples=400, deadline=None)
@given(MARKERS, st.sampled_from(wheelcheck.PYTHONS), st.sampled_from([0, 2, 99]))
def test_markers_are_evaluated_as_packaging_does(marker, python, patch):
    env = markers.linux_env(python, patch)
    assert markers.evaluate(marker, env) == Marker(marker).evaluate(env), marker


@pytest.mark.parametrize(
    "marker",
    [
        "python_version >= '3.x'",
        "python_version >=",
        "(python_version == '3.9'",
        "python_version == '3.9' xor sys_platform == 'linux'",
        "extra == 'train'",
        "sys_platform < 'linux'",
        "python_version ~= '3'",
    ],
)
def test_a_marker_the_evaluator_does_not_know_is_an_error_not_a_guess(marker):
    with pytest.raises(markers.MarkerError, match="fix: regenerate the pin list"):
        markers.evaluate(marker, markers.linux_env("3.11", 0))


def test_each_python_gets_one_version_of_each_pinned_package_and_no_source_only_one():
    lock = pins.read_pins(REPO / "constraints.txt")
    for python in wheelcheck.PYTHONS:
        chosen = wheelcheck.pins_for(lock, python)
        names = [pins.normalize(p.name) for p in chosen]
        assert len(names) == len(set(names)), python
        assert "horovod" not in names and "pyyaml" in names and "colorama" not in names
        assert ("tensorflow-cpu" in names) == (python in ("3.10", "3.11")), python


def test_a_newer_glibc_tag_also_takes_the_older_manylinux_wheels():
    assert wheelcheck.platform_tags("manylinux2014_x86_64") == ["manylinux2014_x86_64"]
    tags = wheelcheck.platform_tags("manylinux_2_28_x86_64")
    assert tags[0] == "manylinux_2_28_x86_64" and tags[-2:] == [
        "manylinux_2_17_x86_64",
        "manylinux2014_x86_64",
    ]
    assert len(tags) == 13 and wheelcheck.platform_tags("musllinux_1_2_x86_64") == [
        "musllinux_1_2_x86_64"
    ]
    assert wheelcheck.newer_platforms("manylinux1_x86_64") == [
        "manylinux2014_x86_64",
        "manylinux_2_28_x86_64",
    ]
    assert wheelcheck.newer_platforms("manylinux_2_28_x86_64") == []
    with pytest.raises(
        wheelcheck.CheckError, match=r"PLATFORM=manylinux2014_x86_64,: '' is no wheel platform tag"
    ):
        wheelcheck.platform_tags("manylinux2014_x86_64,")


def test_the_promised_pairs_are_the_ones_readme_states():
    readme = (REPO / "README.md").read_text()
    assert "Python 3.9–3.12" in readme
    assert (
        "`manylinux2014_x86_64` for glibc ≥ 2.17, `manylinux_2_28_x86_64` for glibc ≥ 2.28"
        in readme
    )
    assert wheelcheck.PYTHONS == ("3.9", "3.10", "3.11", "3.12")
    assert wheelcheck.PLATFORMS == ("manylinux2014_x86_64", "manylinux_2_28_x86_64")


# -- against PyPI ---------------------------------------------------------------------------------


def test_every_pin_has_a_wheel_for_every_promised_python_and_platform():
    """What `make lock` checks after resolving (cached per package, version, platform and
    Python).
    """
    require_pypi()
    done = run(
        ["bash", str(REPO / "scripts" / "lock.sh"), "--check"],
        timeout=1800,
        env={**os.environ, "KIT_CACHE": str(CACHE), "PYTHONPATH": ""},
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    for python, platform in wheelcheck.PROMISED:
        assert re.search(
            rf"^lock: Python {re.escape(python)} on {platform}: [0-9]+ pins have wheels, ok$",
            done.stdout,
            re.M,
        ), done.stdout


def test_a_pin_without_a_wheel_is_named_with_its_platform_and_the_newest_release_that_has_one(
    tmp_path,
):
    """pillow 13.0.0 publishes no manylinux2014 wheel: the check names it, pyyaml passes."""
    require_pypi()
    lock = tmp_path / "constraints.txt"
    lock.write_text(f"pillow==13.0.0 \\\n    {HASH}\npyyaml==6.0.3 \\\n    {HASH}\n")
    done = run(
        [
            sys.executable,
            "-m",
            "kit.wheelcheck",
            "lock",
            str(lock),
            "--python",
            "3.11",
            "--platform",
            "manylinux2014_x86_64",
            "--cache",
            str(tmp_path / "cache"),
        ],
        timeout=900,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 1, done.stdout + done.stderr
    [line] = done.stderr.splitlines()
    match = re.fullmatch(
        r"lock: pillow 13\.0\.0 has no wheel for Python 3\.11 on manylinux2014_x86_64 \(the newest with one: "
        r"(?P<newest>[0-9.]+)\); fix: "
        r"require pillow<=(?P=newest) in pyproject\.toml .*and run scripts/lock\.sh --upgrade-package pillow",
        line,
    )
    assert match and int(match["newest"].split(".")[0]) <= 12, line
    assert (
        done.stdout
        == "lock: Python 3.11 on manylinux2014_x86_64: 1 pins have wheels, 1 without a wheel\n"
    )
    # what had a wheel is remembered; what had none is asked again next time
    assert (
        tmp_path / "cache" / "wheel-check" / "manylinux2014_x86_64-cp311.txt"
    ).read_text() == "pyyaml==6.0.3\n"


def test_a_wheelhouse_for_a_platform_without_the_wheels_fails_in_one_line_with_the_fix(tmp_path):
    """manylinux1 (glibc 2.5): pip's own answer is a bare ResolutionImpossible; make wheelhouse names the
    pin, the platform, the Python and a PLATFORM that has the wheel, and leaves nothing behind."""
    require_pypi()
    out = tmp_path / "wheelhouse"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(
        PYTHON=sys.executable, PLATFORM="manylinux1_x86_64", OUT=str(out), KIT_CACHE=str(CACHE)
    )
    done = run(["bash", str(REPO / "scripts" / "wheelhouse.sh")], timeout=900, env=env)
    python = "{}.{}".format(*sys.version_info[:2])
    assert done.returncode == 1, done.stdout + done.stderr
    [line] = done.stderr.splitlines()
    assert re.fullmatch(
        r"wheelhouse: "
        rf"[a-z0-9-]+ \S+ \(constraints\.txt\) has no wheel for Python {python} on manylinux1_x86_64.*; fix: "
        r"PLATFORM=manylinux2014_x86_64 if the login node's glibc is >= 2\.17 \(ldd --version\), "
        r"or pin .* in pyproject\.toml and run scripts/lock\.sh --upgrade-package [a-z0-9-]+",
        line,
    ), line
    assert "ResolutionImpossible" not in done.stdout + done.stderr
    assert not out.exists() and not Path(f"{out}.part").exists()


@pytest.mark.parametrize(
    "text", [None, "pyyaml>=6\n", f"pyyaml==6.0.3 ; extra == 'x' \\\n    {HASH}\n"]
)
def test_a_missing_or_malformed_pin_list_is_one_line_before_pip_is_asked(tmp_path, text):
    lock = tmp_path / "constraints.txt"
    if text is not None:
        lock.write_text(text)
    done = run(
        [
            sys.executable,
            "-m",
            "kit.wheelcheck",
            "lock",
            str(lock),
            "--python",
            "3.11",
            "--cache",
            str(tmp_path / "cache"),
        ],
        env={**os.environ, "PYTHONPATH": str(REPO), "PATH": ""},
    )
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert str(lock) in done.stderr or "extra" in done.stderr
    assert (
        "fix:" in done.stderr
        and "Traceback" not in done.stderr
        and not (tmp_path / "cache").exists()
    )


def test_only_a_well_formed_pip_report_counts_as_found():
    good = {"version": "1", "install": [{"metadata": {"name": "PyYAML", "version": "6.0.3"}}]}
    assert wheelcheck.reported(good) == {("pyyaml", "6.0.3")}
    for bad in (
        None,
        [],
        {"install": {}},
        {"install": [1, {"metadata": []}, {"metadata": {"name": 3}}]},
    ):
        assert wheelcheck.reported(bad) == set()


def test_a_pin_without_a_wheel_is_what_went_wrong_and_how_to_lock_another():
    """The lines `lock` and `wheelhouse` print, as parts: a script or a test reads the fix alone."""
    miss = wheelcheck.Missing("pillow", "13.0.0", "3.11", "manylinux2014_x86_64", "12.1.0")
    problem = wheelcheck.lock_problem(miss)
    assert problem.what == (
        "pillow 13.0.0 has no wheel for Python 3.11 on manylinux2014_x86_64 (the newest with one: "
        "12.1.0)"
    )
    assert problem.fix is not None and problem.fix.startswith("require pillow<=12.1.0 in ")
    house = wheelcheck.wheelhouse_problem([miss], "manylinux_2_28_x86_64")
    assert house.what.startswith("pillow 13.0.0 (constraints.txt) has no wheel for Python 3.11")
    assert house.fix == (
        "PLATFORM=manylinux_2_28_x86_64 if the login node's glibc is >= 2.28 (ldd --version), "
        "or pin pillow 12.1.0, the newest with such a wheel, "
        "in pyproject.toml and run scripts/lock.sh --upgrade-package pillow"
    )
