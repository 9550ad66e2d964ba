"""Installs for the packaging tests: environments without the checkout, Pythons to install on,
wheelhouses and wheels to put in them, and the results files an install is checked with."""

from __future__ import annotations

import base64
import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.support.parts import require
from tests.support.paths import REPO

CACHE = Path(os.environ.get("KIT_CACHE") or Path.home() / ".cache" / "secure-site-kit")


def outside_env(**extra: str) -> dict[str, str]:
    """The environment of a user who has only the installed kit: no PYTHONPATH into the checkout,
    no pip configuration of this machine."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE="/dev/null", USER=env.get("USER", "root"), **extra)
    return env


def runs(python: str) -> bool:
    try:
        return (
            subprocess.run(
                [python, "-c", "import venv"], capture_output=True, timeout=60
            ).returncode
            == 0
        )
    except (OSError, subprocess.TimeoutExpired):
        return False


def floor_python() -> str:
    """The oldest Python the core promises (3.9) when this machine has one, else this one."""
    candidates = [
        shutil.which("python3.9") or "",
        *sorted(glob.glob(str(Path.home() / ".pyenv/versions/3.9*/bin/python3.9"))),
    ]
    return next((c for c in candidates if c and runs(c)), sys.executable)


def machine_platform() -> str:
    """This machine's manylinux tag (the venvs under test run here): manylinux_2_<glibc minor>."""
    glibc = (os.confstr("CS_GNU_LIBC_VERSION") or "glibc 2.17").split()[-1]
    return f"manylinux_2_{int(glibc.split('.')[1])}_{os.uname().machine}"


def run(cmd: list[str], timeout: float = 600, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)


def build_wheelhouse(
    python: str, out: Path, extras: str = "report", platform: str | None = "manylinux2014_x86_64"
) -> Path:
    """`make wheelhouse` for ``python``'s version (``platform`` None: its default); downloads are
    cached across runs."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PLATFORM")
    }  # this machine's pip reaches PyPI
    env.update(
        PYTHON=python,
        EXTRAS=extras,
        OUT=str(out),
        KIT_CACHE=str(CACHE),
        **({"PLATFORM": platform} if platform else {}),
    )
    done = run(["bash", str(REPO / "scripts" / "wheelhouse.sh")], timeout=900, env=env)
    if done.returncode:
        pytest.fail(
            f"wheelhouse.sh failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        )
    return out


def require_pypi() -> None:
    """Skip (outside CI) when pip cannot reach PyPI: these tests ask it about real releases."""
    try:
        done = run(
            [sys.executable, "-m", "pip", "index", "versions", "pyyaml"],
            timeout=120,
            env=outside_env(PIP_DISABLE_PIP_VERSION_CHECK="1"),
        )
        reached, why = done.returncode == 0, (done.stderr.strip().splitlines() or ["no answer"])[-1]
    except subprocess.TimeoutExpired:
        reached, why = False, "no answer in 120 s"
    require(reached, f"PyPI unreachable through pip: {why}")


def results_json(path: Path, nodes: int, seconds: float) -> Path:
    """A run result as gan3d train writes it (the keys kit scale report reads)."""
    peak = nodes * 2 * 1.7e12
    path.write_text(
        json.dumps(
            {
                "schema": "gan3d-run/1",
                "site": "supermuc-ng",
                "mpi_library_version": "Intel(R) MPI Library 2019",
                "nodes": nodes,
                "ranks": 4 * nodes,
                "ranks_per_node": 4,
                "threads_per_rank": 12,
                "batch_per_rank": 8,
                "global_batch": 32 * nodes,
                "epoch_times": [seconds * 1.3, seconds],
                "full_epoch_seconds_estimate": seconds,
                "showers_per_second": 2e5 / seconds,
                "flop_per_second": 2.7e12 * nodes,
                "peak_flop_per_second_theoretical": peak,
                "percent_of_peak_theoretical": 100 * 2.7e12 * nodes / peak,
            }
        )
    )
    return path


def fake_wheel(directory: Path, name: str, init: str, package: str = "tensorflow") -> Path:
    """A pure-Python wheel of `name` 2.15.1 whose only module file is PACKAGE/__init__.py: for
    tensorflow, the layout TensorFlow's full and CPU builds share (the real ones are ~200 MB each)."""
    dist, version = name.replace("-", "_"), "2.15.1"
    info = f"{dist}-{version}.dist-info"
    files = {
        f"{package}/__init__.py": init.encode(),
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [
        f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},"
        f"{len(data)}"
        for path, data in files.items()
    ] + [f"{info}/RECORD,,"]
    path = directory / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as whl:
        for name_in_zip, data in files.items():
            whl.writestr(name_in_zip, data)
        whl.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return path


OPTIONAL = (
    "matplotlib",
    "numpy",
    "isal",
    "zlib_ng",
    "zstandard",
    "fabric",
    "paramiko",
    "invoke",
    "tensorflow",
    "keras",
    "h5py",
    "mpi4py",
    "horovod",
    "sklearn",
    "scipy",
)


def kit_without(args: list[str], blocked: tuple[str, ...], cwd) -> tuple[int, str, str]:
    """`kit ARGS` in a Python where the ``blocked`` modules cannot be imported (as if not
    installed).
    """
    code = (
        "import sys\nfor m in sys.argv[1].split(','): sys.modules[m] = None\n"
        "from kit.cli import main\nsys.exit(main(sys.argv[2:]))"
    )
    done = run(
        [sys.executable, "-c", code, ",".join(blocked), *args],
        cwd=cwd,
        env=outside_env(PYTHONPATH=sys.path[0] if sys.path[0] else ".", KIT_CRASH_DIR=str(cwd)),
    )
    return done.returncode, done.stdout, done.stderr
