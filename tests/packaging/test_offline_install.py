"""The kit crosses the air gap: `make wheelhouse` on a machine with PyPI, then, in a network
namespace with nothing but loopback, install.sh into a fresh venv outside the checkout, and
every core command (and `kit scale report` with [report]) from a directory that is not the
checkout; once as root on the oldest Python the core promises for manylinux_2_28, once as an
unprivileged user on the system Python with `make wheelhouse`'s defaults (manylinux2014, [report])."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest

from tests.support.installs import (
    build_wheelhouse,
    floor_python,
    machine_platform,
    outside_env,
    results_json,
    run,
)
from tests.support.parts import require
from tests.support.paths import REPO

pytestmark = pytest.mark.slow
NOBODY = 65534


@pytest.fixture(scope="module")
def netns():
    """A network namespace with only `lo` up: PyPI (and everything else) unreachable."""
    require(
        os.geteuid() == 0 and shutil.which("ip") is not None, "needs root and iproute2 for ip netns"
    )
    name = f"kit-offline-{uuid.uuid4().hex[:8]}"
    made = run(["ip", "netns", "add", name])
    require(made.returncode == 0, f"ip netns add failed: {made.stderr.strip()}")
    run(["ip", "netns", "exec", name, "ip", "link", "set", "lo", "up"])
    yield name
    run(["ip", "netns", "delete", name])


@pytest.fixture(scope="module")
def public_dir():
    """Outside the checkout and readable by an unprivileged user (pytest's tmp dirs are 0700)."""
    path = Path(tempfile.mkdtemp(prefix="kit-offline-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def in_netns(netns: str, cmd: list[str], cwd: Path, env: dict[str, str], user: int | None = None):
    prefix = ["ip", "netns", "exec", netns]
    if user is not None:
        prefix += ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups"]
    return run(prefix + cmd, cwd=cwd, env=env, timeout=600)


def check_offline(netns: str, wheelhouse: Path, python: str, home: Path, user: int | None) -> None:
    """install.sh, then the core commands, all with no network and from a directory not the
    checkout.
    """
    venv, work = home / "venv", home / "work"
    work.mkdir()
    if user is not None:
        for path in (home, work):
            os.chown(path, user, user)
    env = outside_env(HOME=str(home), PYTHON=python, XDG_STATE_HOME=str(home / "state"))
    offline = in_netns(netns, ["ip", "-o", "addr"], work, env)
    assert "127.0.0.1" in offline.stdout and all(
        " lo " in f" {line.split()[1]} " for line in offline.stdout.splitlines()
    )

    done = in_netns(
        netns, ["sh", str(wheelhouse / "install.sh"), str(venv), "report"], work, env, user
    )
    assert done.returncode == 0, done.stdout + done.stderr
    kit = str(venv / "bin" / "kit")

    def ok(*args: str) -> str:
        done = in_netns(netns, [kit, *args], work, env, user)
        assert done.returncode == 0, (
            f"kit {' '.join(args)}: {done.returncode}\n{done.stdout}\n{done.stderr}"
        )
        assert "Traceback" not in done.stderr
        return done.stdout

    version = run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import importlib.metadata as m; print(m.version('secure-site-kit'))",
        ],
        env=env,
    ).stdout.strip()
    assert ok("--version").splitlines()[0] == f"kit (secure-site-kit) {version}"
    # The documentation ships in the wheel: listed, printed and found outside any checkout.
    topics = ok("docs")
    assert "  reference/site-config " in topics and "  security " in topics
    assert ok("docs", "security").startswith("# Security")
    assert ok("docs", "--path", "reference/cli").startswith(str(venv))
    shown = ok("site", "show", "supermuc-ng")
    assert "SuperMUC-NG" in shown and str(REPO) not in shown
    script = ok(
        "slurm",
        "render",
        "--dry-run",
        "--site",
        "supermuc-ng",
        "--no-container",
        "--nodes",
        "2",
        "--ranks-per-node",
        "4",
        "--dir",
        str(work / "runs"),
        "--",
        "--data",
        "/hppfs/calo",
    )
    assert "#SBATCH --nodes=2" in script and "python3 -m gan3d train" in script
    ok(
        "scale",
        "plan",
        "--site",
        "supermuc-ng",
        "--no-container",
        "--nodes",
        "1,2",
        "--ranks-per-node",
        "4",
        "--threads",
        "12",
        "--dir",
        str(work / "sweep"),
        "--",
        "--data",
        "/hppfs/calo",
    )
    assert (work / "sweep" / "plan.yaml").is_file()
    ok("scale", "submit", str(work / "sweep"), "--dry-run")
    results = [str(results_json(work / f"n{n}.json", n, 100 / n)) for n in (1, 2)]
    if user is not None:
        for path in results:
            os.chown(path, user, user)
    ok("scale", "report", "--results", *results, "--out", str(work / "report"))
    assert (work / "report" / "report.md").is_file()
    assert (work / "report" / "time_per_epoch.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # Not installed: one line naming the extra, exit 1, no traceback.
    missing = in_netns(
        netns, [kit, "transfer", "push", "x.sqfs", "--site", "supermuc-ng"], work, env, user
    )
    assert (missing.returncode, missing.stderr.count("\n")) == (1, 1), missing.stderr
    assert "secure-site-kit[transfer]" in missing.stderr and "Traceback" not in missing.stderr


@pytest.fixture(scope="module")
def floor_wheelhouse(public_dir) -> tuple[str, Path]:
    python = floor_python()
    # The other tag README promises (glibc >= 2.28; it also takes the older manylinux wheels), where
    # this machine runs its wheels; the unprivileged user's test has the default, manylinux2014.
    platform = (
        "manylinux_2_28_x86_64"
        if int(machine_platform().split("_")[2]) >= 28
        else "manylinux2014_x86_64"
    )
    return python, build_wheelhouse(python, public_dir / "wheelhouse-floor", platform=platform)


def test_root_installs_and_runs_the_core_offline_on_the_oldest_python(
    netns, public_dir, floor_wheelhouse
):
    python, wheelhouse = floor_wheelhouse
    sums = subprocess.run(
        ["sha256sum", "--check", "--strict", "SHA256SUMS"],
        cwd=wheelhouse,
        capture_output=True,
        text=True,
    )
    assert sums.returncode == 0 and sums.stdout.count(": OK") >= 10, sums.stdout + sums.stderr
    home = public_dir / "root-home"
    home.mkdir()
    check_offline(netns, wheelhouse, python, home, user=None)


def test_an_unprivileged_user_installs_and_runs_the_core_offline(netns, public_dir):
    """The login node's user: no root, the system Python (pip comes from a venv of it)."""
    system = shutil.which("python3", path="/usr/bin:/bin")
    require(system is not None, "no system python3 in /usr/bin")
    builder = public_dir / "builder-venv"
    made = run([system, "-m", "venv", str(builder)])
    require(
        made.returncode == 0,
        f"{system} -m venv failed (python3-venv missing): {made.stderr.strip()}",
    )
    # `make wheelhouse`'s defaults: [report] for manylinux2014 (glibc >= 2.17: SLES 15, CentOS 7 login nodes)
    wheelhouse = build_wheelhouse(
        str(builder / "bin" / "python"), public_dir / "wheelhouse-system", platform=None
    )
    home = public_dir / "user-home"
    home.mkdir()
    check_offline(netns, wheelhouse, system, home, user=NOBODY)
    assert (home / "venv" / "bin" / "kit").stat().st_uid == NOBODY


def test_install_sh_refuses_a_damaged_copy_another_python_and_a_missing_extra(
    floor_wheelhouse, tmp_path
):
    """Each in one line, exit 1, before any venv exists."""
    python, wheelhouse = floor_wheelhouse
    copy = tmp_path / "wheelhouse"
    shutil.copytree(wheelhouse, copy)
    venv = tmp_path / "venv"

    def install(*args: str, **env: str) -> subprocess.CompletedProcess:
        return run(
            ["sh", str(copy / "install.sh"), str(venv), *args],
            env=outside_env(**{"PYTHON": python, **env}),
        )

    other = (
        "/usr/bin/python3"
        if run([python, "-c", "import sys; print(sys.version_info[:2])"]).stdout
        != run(["/usr/bin/python3", "-c", "import sys; print(sys.version_info[:2])"]).stdout
        else None
    )
    if other:
        done = install("report", PYTHON=other)
        assert done.returncode == 1 and "but this wheelhouse is for Python" in done.stderr, (
            done.stderr
        )
        assert done.stderr.count("\n") == 1
    done = install("transfer")
    assert done.returncode == 1 and "extra 'transfer' is not in this wheelhouse" in done.stderr, (
        done.stderr
    )
    assert done.stderr.count("\n") == 1
    [wheel] = copy.glob("rich-*.whl")
    wheel.write_bytes(wheel.read_bytes()[:-1] + b"?")
    done = install("report")
    assert done.returncode == 1 and done.stderr == (
        f"install.sh: {copy / wheel.name} does not match SHA256SUMS (a damaged or partial copy); "
        "fix: copy the wheelhouse again\n"
    )
    assert not venv.exists()
