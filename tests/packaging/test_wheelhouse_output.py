"""make wheelhouse never replaces a directory it did not make."""

from __future__ import annotations

import hashlib
import os
import shutil
import sys

import pytest

from tests.support.installs import fake_wheel, outside_env, run
from tests.support.paths import REPO


def test_an_out_dir_the_script_did_not_make_is_left_alone(tmp_path):
    out = tmp_path / "wheelhouse"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    done = run(
        ["bash", str(REPO / "scripts" / "wheelhouse.sh")],
        timeout=120,
        env={**os.environ, "OUT": str(out), "PYTHONPATH": ""},
    )
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert "was not made by this script; fix:" in done.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["wheelhouse"] and (
        out / "notes.txt"
    ).read_text() == "mine"


def test_bad_extras_or_platform_are_refused_before_any_download(tmp_path):
    for var, value in (("EXTRAS", "report;rm -rf /"), ("PLATFORM", "../x")):
        done = run(
            ["bash", str(REPO / "scripts" / "wheelhouse.sh")],
            timeout=120,
            env={**os.environ, "OUT": str(tmp_path / "wh"), var: value, "PYTHONPATH": ""},
        )
        assert done.returncode == 1 and f"{var}=" in done.stderr and done.stderr.count("\n") == 1, (
            done.stderr
        )
        assert not any(tmp_path.iterdir())


@pytest.mark.slow
def test_install_sh_replaces_the_full_tensorflow_of_an_earlier_venv_first(tmp_path):
    """A venv an earlier wheelhouse made holds `tensorflow`; this wheelhouse brings tensorflow-cpu
    (the same files): install.sh uninstalls the old one first and installs the new one whole, so
    tensorflow/ holds the CPU build's files and only its distribution is registered."""
    house, old = tmp_path / "wheelhouse", tmp_path / "old"
    house.mkdir()
    old.mkdir()
    venv = tmp_path / "venv"
    assert run([sys.executable, "-m", "venv", str(venv)]).returncode == 0
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-index"]
    assert (
        run(
            [*pip, str(fake_wheel(old, "tensorflow", "FULL = True\n"))], env=outside_env()
        ).returncode
        == 0
    )
    fake_wheel(house, "tensorflow-cpu", "CPU = True\n")
    fake_wheel(house, "secure-site-kit", "", package="kit_stand_in")  # no requirements to resolve
    shutil.copy(REPO / "scripts" / "wheelhouse-install.sh", house / "install.sh")
    shutil.copy(REPO / "kit" / "pins.py", house)
    shutil.copy(REPO / "constraints.txt", house)
    (house / "PYTHON_VERSION").write_text("{}.{}\n".format(*sys.version_info[:2]))
    (house / "EXTRAS").write_text("")
    sums = [
        f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.name}" for p in sorted(house.iterdir())
    ]
    (house / "SHA256SUMS").write_text("\n".join(sums) + "\n")
    done = run(["sh", str(house / "install.sh"), str(venv)], env=outside_env(PYTHON=sys.executable))
    assert done.returncode == 0, done.stderr
    [package] = venv.glob("lib/python3*/site-packages/tensorflow")
    assert (package / "__init__.py").read_text() == "CPU = True\n"
    listed = run(
        [str(venv / "bin" / "python"), "-m", "pip", "list", "--format=freeze"], env=outside_env()
    ).stdout
    assert "tensorflow-cpu==2.15.1" in listed and "tensorflow==" not in listed, listed
