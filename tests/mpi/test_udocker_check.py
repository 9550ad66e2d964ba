"""`kit mpi check` through udocker, for real: udocker 1.3.17 (the [udocker] extra) with Debian's proot
(through the kit's wrapper without -k), MPICH's mpiexec and this machine's Debian MPICH bound into the
kit's MPICH test image, run as an ordinary user (udocker refuses root). What cannot start a rank is
one line naming its fix."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from tests.support.hostmpi import SYSTEM, TARGET, impi_site_dict
from tests.support.parts import require
from tests.support.udocker import USER, write_shim

pytestmark = pytest.mark.system
REPO = Path(__file__).resolve().parents[2]
# a launcher that starts each of its -n N ranks as a job of its own (what a runtime that keeps the
# launcher's PMI from its ranks makes of a launch)
APART = """#!/bin/sh
n=$2; shift 2
i=0; while [ "$i" -lt "$n" ]; do "$@" & i=$((i + 1)); done
wait
"""


def _packages() -> str:
    """Where udocker and the kit's dependencies are installed (this venv's site-packages)."""
    import udocker
    import yaml as y

    return ":".join(sorted({str(Path(m.__file__).resolve().parents[1]) for m in (udocker, y)}))


@pytest.fixture(scope="module")
def public():
    """A directory the ordinary user may enter and read; its home/ is that user's."""
    require(os.geteuid() == 0 and shutil.which("setpriv"), "needs root to run as nobody (setpriv)")
    require(
        shutil.which("mpiexec.hydra") and (SYSTEM / "libmpich.so.12").exists(),
        "Debian's MPICH (apt-get install mpich)",
    )
    require(
        Path("/usr/bin/proot").is_file(), "Debian's proot (apt-get install proot; scripts/setup.sh)"
    )
    pytest.importorskip("udocker", reason="udocker (pip install '.[udocker]')")
    base = Path(tempfile.mkdtemp(prefix="kit-udocker-", dir="/tmp"))
    base.chmod(0o755)
    (base / "home").mkdir()
    shutil.chown(base / "home", "nobody")
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def python(public) -> str:
    """A Python the ordinary user may run with the kit, udocker and their dependencies
    importable.
    """
    env = {
        "PYTHONPATH": f"{REPO}:{_packages()}",
        "PATH": os.environ["PATH"],
        "HOME": str(public / "home"),
    }
    minor = f"python3.{sys.version_info.minor}"
    for candidate in dict.fromkeys([sys.executable, f"/usr/bin/{minor}"]):
        # through a shell, as the udocker shim starts it (setpriv alone starts what a shell may not)
        probe = subprocess.run(
            [
                *USER,
                "/bin/sh",
                "-c",
                'exec "$0" -c "import kit, yaml, rich, elftools, udocker"',
                candidate,
            ],
            env=env,
            cwd=public,
            capture_output=True,
            timeout=120,
        )
        if probe.returncode == 0:
            return candidate
    require(False, f"no {minor} the user nobody can run with this venv's packages")


def _site(public: Path, python: str, name: str, launcher: str = "mpiexec", **udocker) -> Path:
    shim = public / "udocker"
    if not shim.exists():
        write_shim(shim, python, _packages())
    site = impi_site_dict(Path("/usr"))
    site["name"] = name
    site["host_mpi"] = {
        "vendor": "mpich",
        "version": "4.0.2",
        "prefix": "/usr",
        "library_dirs": [str(SYSTEM)],
        "launcher": launcher,
        "soname": "libmpich.so.12",
        "env": {},
    }
    site["container"] = {
        "runtime": "udocker",
        "image_dir": str(public),
        "mpi_target": TARGET,
        "udocker": {"executable": str(shim), "dir": str(public / "home" / ".udocker"), **udocker},
    }
    path = public / f"{name}.yaml"
    path.write_text(yaml.safe_dump(site, sort_keys=False))
    path.chmod(0o644)
    return path


@pytest.fixture(scope="module")
def image(public, python, mpich_oci) -> Path:
    """The MPICH test image converted into a directory the user may read, paired for this host's
    MPICH (its libmpich.so.12 linked to the bound host library)."""
    from kit.image.convert import convert
    from kit.mpi import make_pair, prepare_image_dir

    out = public / "img"
    convert(mpich_oci, out, fmt="dir")
    (out / TARGET.lstrip("/") / "compat/libmpich.so.12").unlink()
    site = _site(public, python, "mpich-udocker")
    prepare_image_dir(make_pair(site, out), out)
    assert not make_pair(site, out).missing
    return out


def _kit(public: Path, python: str, *argv: str, user: bool = True) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PYTHONPATH": f"{REPO}:{_packages()}",
        "HOME": str(public / "home"),
        "COLUMNS": "1000",
    }
    env.pop("XDG_CACHE_HOME", None)
    for key in [k for k in env if k.startswith(("SLURM_", "PMI_", "OMPI_", "UDOCKER_"))]:
        del env[key]
    cmd = [*(USER if user else []), python, "-m", "kit", *argv]
    return subprocess.run(cmd, cwd=public, env=env, capture_output=True, text=True, timeout=600)


def _one_line(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    return done.stderr


def test_two_ranks_through_udocker_map_the_host_mpich_and_allreduce(public, python, image):
    done = _kit(
        public, python, "mpi", "check", "--site", str(public / "mpich-udocker.yaml"), str(image)
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    out = done.stdout
    assert "PASS: the host MPI is loaded from the bind and a 2-rank allreduce is right" in out, out
    assert "MPI library (inside udocker)" in out and f"{TARGET}/lib0/libmpich.so.12.2.2" in out, out
    assert "C library: /usr/lib/x86_64-linux-gnu/libc.so.6" in out, (
        out
    )  # the image's, as the rank sees it
    wrappers = list((public / "home/.cache/secure-site-kit/udocker").glob("proot-no-k-*"))
    assert len(wrappers) == 1 and wrappers[0].stat().st_mode & 0o777 == 0o755
    assert not (
        public / ".mountpoints"
    ).exists()  # udocker's, left in the check's own directory, removed


def test_ranks_that_run_as_jobs_of_their_own_fail_in_one_line(public, python, image):
    apart = public / "apart"
    apart.write_text(APART)
    apart.chmod(0o755)
    site = _site(public, python, "mpich-udocker-apart", launcher=str(apart))
    done = _kit(public, python, "mpi", "check", "--site", str(site), str(image), "--timeout", "300")
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-2000:]
    fails = [line for line in done.stdout.splitlines() if line.startswith("FAIL")]
    assert len(fails) == 1 and fails[0].startswith(
        "FAIL: MPI world of 1 rank(s), but the launcher started 2 (kit mpi check):"
    ), done.stdout
    assert "udocker: run --hostenv" in fails[0]


def test_root_is_refused_unless_the_site_allows_it(public, python, image):
    err = _one_line(
        _kit(
            public,
            python,
            "mpi",
            "check",
            "--site",
            str(public / "mpich-udocker.yaml"),
            str(image),
            user=False,
        )
    )
    assert (
        "udocker refuses to run as root; fix: run as an ordinary user, or set container.udocker.allow_root: "
        "true in the site config" in err
    )


def test_a_missing_udocker_names_the_extra(public, python, image):
    site = _site(
        public, python, "no-udocker", allow_root=True, executable=str(public / "nowhere/udocker")
    )
    err = _one_line(
        _kit(public, python, "mpi", "check", "--site", str(site), str(image), user=False)
    )
    assert "udocker not found (container.udocker.executable" in err
    assert "fix: pip install 'secure-site-kit[udocker]'" in err


def test_a_missing_proot_names_the_package(public, python, image):
    site = _site(public, python, "no-proot", proot=str(public / "nowhere/proot"))
    err = _one_line(_kit(public, python, "mpi", "check", "--site", str(site), str(image)))
    assert (
        f"proot not found at {public}/nowhere/proot (container.udocker.proot); fix: apt-get install proot"
        in err
    )


def test_the_fallback_mode_p2_runs_the_check_too(public, python, image):
    """P2: proot without seccomp acceleration (udocker sets PROOT_NO_SECCOMP=1)."""
    site = _site(public, python, "mpich-udocker-p2", mode="P2")
    done = _kit(public, python, "mpi", "check", "--site", str(site), str(image))
    assert done.returncode == 0 and "PASS: the host MPI is loaded from the bind" in done.stdout, (
        done.stdout[-3000:] + done.stderr[-2000:]
    )
