"""constraints-itex.txt, the ITEX stack's pin list: the full tensorflow build in place of
tensorflow-cpu, the CPU build of Intel Extension for TensorFlow, the main list's TensorFlow and
Horovod versions (setup.sh --itex reuses the cached Horovod wheel on that premise), and every
requirement of the train and horovod extras met on the developer set-up's Python."""

from __future__ import annotations

import sys

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.support.paths import REPO

ENV = {
    "python_version": "3.11",
    "python_full_version": "3.11.0",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "implementation_name": "cpython",
    "platform_machine": "x86_64",
}


def pins_of(name: str) -> dict[str, str]:
    sys.path.insert(0, str(REPO / "kit"))
    try:
        import pins
    finally:
        sys.path.pop(0)
    return {canonicalize_name(p.name): p.version for p in pins.read_pins(REPO / name)}


@pytest.fixture(scope="module")
def itex() -> dict[str, str]:
    return pins_of("constraints-itex.txt")


def test_the_itex_list_pins_the_full_tensorflow_and_not_the_cpu_build(itex):
    main = pins_of("constraints.txt")
    assert "tensorflow-cpu" not in itex and itex["tensorflow"] == main["tensorflow-cpu"]
    assert "tensorflow" not in main  # the two builds never share a list (nor a venv)
    assert itex["horovod"] == main["horovod"]


def test_the_itex_list_holds_the_cpu_build_of_the_plugin(itex):
    version = itex["intel-extension-for-tensorflow"]
    # the [cpu] extra's library is VERSION.0 (VERSION.1 is the GPU build, VERSION.2 the XPU one)
    assert itex["intel-extension-for-tensorflow-lib"] == f"{version}.0"


def test_the_itex_input_and_the_list_agree(itex):
    for line in (REPO / "constraints-itex.in").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            req = Requirement(line)
            assert req.specifier.contains(itex[canonicalize_name(req.name)]), line


def test_the_itex_list_meets_the_train_and_horovod_extras_on_python_3_11(itex):
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    for extra in ("train", "horovod"):
        for text in extras["optional-dependencies"][extra]:
            req = Requirement(text)
            name = canonicalize_name(req.name)
            if name in ("secure-site-kit", "tensorflow-cpu") or (
                req.marker and not req.marker.evaluate(ENV)
            ):
                continue
            assert name in itex and req.specifier.contains(itex[name], prereleases=True), (
                f"[{extra}] {req}: pinned {itex.get(name)}"
            )
