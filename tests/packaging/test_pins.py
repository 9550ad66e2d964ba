"""constraints.txt is the one pin list: it satisfies every requirement of pyproject.toml on every
Python the kit supports, no other file writes a version, and kit/pins.py refuses files that do
not match it."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import tomllib
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.support.installs import outside_env, run
from tests.support.paths import REPO

PINS = [sys.executable, str(REPO / "kit" / "pins.py")]
PYTHONS = ("3.9", "3.10", "3.11", "3.12")


def lock() -> list[tuple[str, str, Marker | None]]:
    sys.path.insert(0, str(REPO / "kit"))
    try:
        import pins
    finally:
        sys.path.pop(0)
    return [
        (canonicalize_name(p.name), p.version, Marker(p.marker) if p.marker else None)
        for p in pins.read_pins(REPO / "constraints.txt")
    ]


def requirements() -> list[tuple[str, Requirement]]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    out = [("", Requirement(r)) for r in project["dependencies"]]
    for extra, reqs in project["optional-dependencies"].items():
        out += [(extra, Requirement(r)) for r in reqs]
    return out


@pytest.mark.parametrize("python", PYTHONS)
def test_the_pin_list_satisfies_every_requirement_on_every_supported_python(python):
    env = {
        "python_version": python,
        "python_full_version": f"{python}.0",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "implementation_name": "cpython",
        "platform_machine": "x86_64",
    }
    pins = lock()
    for extra, req in requirements():
        if canonicalize_name(req.name) == "secure-site-kit" or (
            req.marker and not req.marker.evaluate(env)
        ):
            continue
        chosen = [
            v
            for name, v, marker in pins
            if name == canonicalize_name(req.name) and (marker is None or marker.evaluate(env))
        ]
        assert len(chosen) == 1, f"[{extra}] {req} on Python {python}: pins {chosen}"
        assert req.specifier.contains(chosen[0], prereleases=True), (
            f"[{extra}] {req}: pinned {chosen[0]}"
        )


def test_no_other_file_writes_a_version():
    for rel in (
        "scripts/setup.sh",
        "scripts/wheelhouse.sh",
        "scripts/wheelhouse-install.sh",
        "images/gan3d-mpich.Dockerfile",
        "images/gan3d-openmpi.Dockerfile",
        "Makefile",
    ):
        text = (REPO / rel).read_text()
        assert not re.search(r"[A-Za-z0-9_-]==\d|[a-z]-\d+\.\d+\.\d+-", text), rel


def test_a_file_whose_hash_or_version_is_not_pinned_is_refused(tmp_path):
    (tmp_path / "pyyaml-6.0.3-cp39-cp39-manylinux2014_x86_64.whl").write_bytes(
        b"not the real wheel"
    )
    done = run([*PINS, "verify", str(REPO / "constraints.txt"), str(tmp_path)])
    assert (
        done.returncode == 1 and done.stderr.count("\n") == 1 and "sha256 differs" in done.stderr
    ), done.stderr
    (tmp_path / "pyyaml-6.0.3-cp39-cp39-manylinux2014_x86_64.whl").unlink()
    (tmp_path / "pyyaml-5.1-py3-none-any.whl").write_bytes(b"x")
    done = run([*PINS, "verify", str(REPO / "constraints.txt"), str(tmp_path)])
    assert done.returncode == 1 and "not in the pin list" in done.stderr, done.stderr


@pytest.mark.parametrize(
    "text",
    [
        "pyyaml>=6\n",
        "pyyaml==6.0.3 --hash=md5:abc\n",
        "pyyaml==6.0.3 \\\n  --hash=sha256:xyz\n",
        "-e .\n",
        "pyyaml==6.0.3 ; python_version \n",
        "\x00\n",
    ],
)
def test_a_malformed_pin_list_is_one_clear_line(tmp_path, text):
    bad = tmp_path / "constraints.txt"
    bad.write_text(text)
    done = run([*PINS, "requirements", str(bad)])
    assert done.returncode == 1 and done.stderr.count("\n") == 1 and str(bad) in done.stderr, (
        done.stderr
    )
    assert "Traceback" not in done.stderr


def test_requirements_keep_the_hashes_for_pip_and_constraints_drop_them():
    blocks = run([*PINS, "requirements", str(REPO / "constraints.txt"), "--only", "horovod"]).stdout
    assert re.fullmatch(
        r"horovod==\d[^\n]*\\\n(    --hash=sha256:[0-9a-f]{64}( \\\n)?)+\n", blocks
    ), blocks
    bare = run([*PINS, "constraints", str(REPO / "constraints.txt")]).stdout
    assert "--hash" not in bare and re.search(r"(?m)^numpy==1\.26\.4$", bare)


def test_every_extra_is_locked():
    """No extra is left out of the one pin list: scripts/lock.sh resolves each one."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    locked = set(re.findall(r"--extra (\S+)", (REPO / "scripts" / "lock.sh").read_text()))
    assert locked == set(project["optional-dependencies"]), locked


def test_training_gets_the_cpu_build_of_tensorflow():
    """tensorflow-cpu, never the full build beside it: both own site-packages/tensorflow/."""
    train = {
        canonicalize_name(Requirement(r).name)
        for r in tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
            "optional-dependencies"
        ]["train"]
    }
    assert "tensorflow-cpu" in train and "tensorflow" not in train
    names = {name for name, _, _ in lock()}
    assert "tensorflow-cpu" in names and "tensorflow" not in names


def fake_distribution(site_packages: Path, name: str, version: str) -> None:
    """A dist-info as pip leaves it (METADATA + RECORD), owning tensorflow/__init__.py."""
    info = site_packages / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "RECORD").write_text(
        f"tensorflow/__init__.py,,\n{info.name}/METADATA,,\n{info.name}/RECORD,,\n"
    )
    (site_packages / "tensorflow").mkdir(exist_ok=True)
    (site_packages / "tensorflow" / "__init__.py").write_text("")


@pytest.mark.parametrize(
    "planted, says",
    [
        ([], ""),
        (["tensorflow"], "tensorflow tensorflow-cpu\n"),
        (["tensorflow", "tensorflow-cpu"], "tensorflow tensorflow-cpu\n"),
        (["tensorflow-cpu"], ""),
    ],
)
def test_setup_finds_the_full_tensorflow_the_pin_list_replaced(tmp_path, planted, says):
    """What setup.sh uninstalls before installing tensorflow-cpu, asked of a throwaway venv's
    Python (no pip in it: the planted dist-infos are all it has)."""
    venv = tmp_path / "venv"
    assert run([sys.executable, "-m", "venv", "--without-pip", str(venv)]).returncode == 0
    [site_packages] = venv.glob("lib/python3*/site-packages")
    for name in planted:
        fake_distribution(site_packages, name, "2.15.1")
    done = run(
        [str(venv / "bin" / "python"), *PINS[1:], "replaced", str(REPO / "constraints.txt")],
        env=outside_env(),
    )
    assert done.returncode == 0 and done.stdout == says, done.stderr


def test_a_group_the_pin_list_names_twice_or_not_at_all_replaces_nothing():
    sys.path.insert(0, str(REPO / "kit"))
    try:
        import pins
    finally:
        sys.path.pop(0)
    pin = lambda name: pins.Pin(name, "2.15.1", None, ("0" * 64,))  # noqa: E731
    assert (
        pins.replaced([pin("tensorflow"), pin("tensorflow-cpu")], ["tensorflow", "tensorflow-cpu"])
        == []
    )
    assert pins.replaced([pin("numpy")], ["tensorflow"]) == []
    assert pins.replaced([pin("tensorflow")], ["Tensorflow_CPU"]) == [
        ("tensorflow-cpu", "tensorflow")
    ]
