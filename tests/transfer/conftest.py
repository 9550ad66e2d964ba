"""Fixtures of the transfer tests: a real OpenSSH sshd on loopback, a user's ~/.ssh, sites (the
images they push: tests/support/transfer.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.support.parts import require
from tests.support.transfer import ALIAS
from tests.transfer.sshd import Sshd, sshd_available, start_sshd


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
        name: str = "sshtest",
        remote: Path | None = None,
        images: Path | None = None,
        container: dict | None = None,
        **transfer,
    ) -> Path:
        """``container``: more container keys (e.g. another runtime); ``transfer``: transfer's."""
        data = dict(base, name=name)
        data["transfer"] = dict(
            base["transfer"],
            host=ALIAS,
            user=None,
            port=22,
            image_dir=str(remote or tmp_path / "remote"),
            **transfer,
        )
        data["container"] = dict(
            base["container"], image_dir=str(images or tmp_path / "images"), **(container or {})
        )
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return path

    return make
