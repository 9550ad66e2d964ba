"""Fixtures of the transfer tests: a real OpenSSH sshd on loopback, a user's ~/.ssh, sites,
images.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml

from tests.helpers import require
from tests.transfer.sshd import Sshd, sshd_available, start_sshd

ALIAS = "kit-test"


@pytest.fixture(scope="session")
def sshd(tmp_path_factory) -> Sshd:
    require(
        sshd_available(), "OpenSSH server/client not installed (apt-get install openssh-server)"
    )
    server = start_sshd(tmp_path_factory.mktemp("sshd"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def home(sshd, tmp_path_factory) -> Path:
    """A user home whose ~/.ssh/config names the test sshd as `kit-test` (key, known_hosts)."""
    root = tmp_path_factory.mktemp("home")
    sshd.write_ssh_config(root / ".ssh" / "config", alias=ALIAS)
    return root


@pytest.fixture
def user_home(home, monkeypatch) -> Path:
    """Make `home` the current user's home (the library reads ~/.ssh/config from $HOME)."""
    monkeypatch.setenv("HOME", str(home))
    return home


@pytest.fixture
def make_site(tmp_path, repo):
    """Write a site YAML (the laptop site, its transfer endpoint pointed at the test sshd)."""
    base = yaml.safe_load((repo / "site-configs" / "laptop.yaml").read_text())

    def make(
        name: str = "sshtest", remote: Path | None = None, images: Path | None = None, **transfer
    ) -> Path:
        data = dict(base, name=name)
        data["transfer"] = dict(
            base["transfer"],
            host=ALIAS,
            user=None,
            port=22,
            image_dir=str(remote or tmp_path / "remote"),
            **transfer,
        )
        data["container"] = dict(base["container"], image_dir=str(images or tmp_path / "images"))
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return path

    return make


def write_sha256(path: Path) -> Path:
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    out = path.with_name(path.name + ".sha256")
    out.write_text(f"{digest}  {path.name}\n")
    return out


def busybox_image(out: Path, extra: bytes = b"") -> Path:
    """A tiny but genuine Charliecloud image tarball: busybox-static plus the dirs ch-run binds."""
    require(Path("/bin/busybox").exists(), "busybox-static not installed")
    root = out.parent / (out.name + ".root")
    out.parent.mkdir(parents=True, exist_ok=True)
    for d in ("bin", "dev", "etc", "home", "proc", "root", "sys", "tmp", "usr", "var"):
        (root / d).mkdir(parents=True, exist_ok=True)
    for f in ("hosts", "resolv.conf", "passwd", "group"):
        (root / "etc" / f).touch()
    shutil.copy2("/bin/busybox", root / "bin" / "busybox")
    if not (root / "bin" / "sh").exists():
        os.symlink("busybox", root / "bin" / "sh")
    (root / "etc" / "kit-version").write_bytes(extra)
    with tarfile.open(out, "w:gz") as tar:
        tar.add(root, arcname=".")
    shutil.rmtree(root)
    write_sha256(out)
    return out


def random_image(out: Path, size: int, seed: int = 0) -> Path:
    """Incompressible bytes under an image name (the push does not look inside)."""
    import random

    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(random.Random(seed).randbytes(size))
    write_sha256(out)
    return out


def have_charliecloud() -> None:
    require(
        shutil.which("ch-convert") is not None and shutil.which("ch-run") is not None,
        "Charliecloud not installed (apt-get install charliecloud)",
    )


def ch_run(image_dir: Path, *cmd: str) -> str:
    env = dict(os.environ, USER=os.environ.get("USER", "root"))
    return subprocess.run(
        ["ch-run", str(image_dir), "--", *cmd], capture_output=True, text=True, check=True, env=env
    ).stdout


def cached_bytes(path: Path) -> int:
    """How much of `path` sits in the page cache (fincore, util-linux)."""
    require(shutil.which("fincore") is not None, "fincore (util-linux) not installed")
    out = subprocess.run(
        ["fincore", "--raw", "--noheadings", "--bytes", "-o", "RES", str(path)],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(out.stdout.split()[0])


def direct_io_works(directory: Path) -> bool:
    """Does the filesystem under `directory` take O_DIRECT opens (tmpfs before Linux 6.6 does
    not)?
    """
    try:
        fd = os.open(directory / ".probe", os.O_WRONLY | os.O_CREAT | os.O_DIRECT)
    except OSError as exc:
        if exc.errno == errno.EINVAL:
            return False
        raise
    os.close(fd)
    os.unlink(directory / ".probe")
    return True
