"""`kit transfer push --install` for a udocker site (container.runtime: udocker): the site has no
Charliecloud, so the remote installer unpacks the verified tarball itself (install FMT unpack,
chosen by the runtime registry), with the checks the kit applies to an image's tar members; over
the loopback sshd, whose sessions find only a ch-convert that fails on the PATH."""

from __future__ import annotations

import io
import os
import stat
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml

from kit.errors import KitError
from kit.image import convert
from kit.transfer import push
from tests.support.installer import install_argv, sha12
from tests.support.transfer import ALIAS, busybox_image, random_image, write_sha256
from tests.support.unpacked import assert_same_tree
from tests.transfer.sshd import start_sshd
from tests.transfer.unpack_driver import describe

pytestmark = pytest.mark.system  # an sshd of its own: root
BOUND = 300
NO_CH = "#!/bin/sh\necho 'ch-convert ran on a udocker site' >&2\nexit 99\n"


@pytest.fixture(scope="module")
def no_charliecloud_sshd(tmp_path_factory):
    """An sshd whose sessions' PATH finds first a ch-convert that fails (python3 is found by its
    path, /usr/bin/python3, as kit.transfer.remote picks it)."""
    root = tmp_path_factory.mktemp("sshd-udocker")
    bin_dir = root / "bin"
    bin_dir.mkdir()
    (bin_dir / "ch-convert").write_text(NO_CH)
    (bin_dir / "ch-convert").chmod(0o755)
    server = start_sshd(root / "sshd", extra_config=f"SetEnv PATH={bin_dir}:/usr/bin:/bin\n")
    yield server
    server.stop()


@pytest.fixture
def udocker_site(no_charliecloud_sshd, tmp_path, repo, monkeypatch):
    def make(runtime: str = "udocker") -> Path:
        home = tmp_path / "home"
        no_charliecloud_sshd.write_ssh_config(home / ".ssh" / "config", alias=ALIAS)
        monkeypatch.setenv("HOME", str(home))
        doc = yaml.safe_load((repo / "site-configs" / "laptop.yaml").read_text())
        doc["name"] = f"sshtest-{runtime}"
        doc["transfer"] |= {"host": ALIAS, "user": None, "image_dir": str(tmp_path / "remote")}
        doc["container"] = {"runtime": runtime, "image_dir": str(tmp_path / "images")}
        path = tmp_path / f"{doc['name']}.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return path

    return make


def test_a_udocker_site_installs_the_image_as_a_directory_without_charliecloud(
    udocker_site, tmp_path
):
    images = tmp_path / "images"
    img = busybox_image(tmp_path / "bb.tar.gz", b"one")
    report = push(img, udocker_site(), install=True)
    current = images / "bb.current"
    assert os.readlink(current) == f"bb@{report.sha256[:12]}"
    tree = images / f"bb@{report.sha256[:12]}"
    assert (tree / "etc" / "kit-version").read_text() == "one"
    assert os.readlink(tree / "bin" / "sh") == "busybox"
    assert os.access(tree / "bin" / "busybox", os.X_OK)
    assert (tree / "bin" / "busybox").read_bytes() == Path("/bin/busybox").read_bytes()
    assert not [p.name for p in images.iterdir() if p.name.startswith(".")]  # no work dir left

    two = busybox_image(tmp_path / "bb.tar.gz", b"two")
    again = push(two, udocker_site(), install=True)
    assert (current / "etc" / "kit-version").read_text() == "two"
    assert again.installed.endswith(f"bb@{again.sha256[:12]}")


def test_the_same_push_on_a_charliecloud_site_runs_its_ch_convert(udocker_site, tmp_path):
    """The control: the runtime decides; the Charliecloud site's install reaches ch-convert."""
    img = busybox_image(tmp_path / "bb.tar.gz", b"one")
    with pytest.raises(KitError, match="ch-convert of .* failed"):
        push(img, udocker_site("charliecloud"), install=True)
    assert not (tmp_path / "images" / "bb.current").exists()


@pytest.mark.parametrize("how", [{"install_as": "squash"}, {"name": "bb.sqfs"}])
def test_what_udocker_cannot_run_is_refused_before_a_byte_is_sent(udocker_site, tmp_path, how):
    name = how.get("name", "bb.tar.gz")
    img = random_image(tmp_path / name, 4096)
    with pytest.raises(KitError, match="udocker runs a directory image") as err:
        push(img, udocker_site(), install=True, install_as=how.get("install_as", "dir"))
    assert "kit image convert SRC OUT.tar.gz" in str(err.value)
    assert not (tmp_path / "remote").exists()


def _tar(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz", format=tarfile.GNU_FORMAT) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    write_sha256(path)
    return path


def _member(name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"", **kw) -> tuple:
    info = tarfile.TarInfo(name)
    info.type, info.mode = kind, kw.pop("mode", 0o644)
    for key, value in kw.items():
        setattr(info, key, value)
    if kind == tarfile.REGTYPE:
        info.size = len(data)
        return info, data
    return info, None


def _unpack(src: Path, images: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        install_argv(src, images, fmt="unpack"),
        capture_output=True,
        text=True,
        timeout=BOUND,
        env={"PATH": "/nonexistent"},  # the installer's own Python does it all
    )


HOSTILE = {  # each: the members, given a directory outside the image
    "a '..' member": lambda out: [_member("../outside/x", data=b"x")],
    "an absolute path through '..'": lambda out: [_member("/etc/../../outside/x", data=b"x")],
    "a file through a symlink": lambda out: [
        _member("lib", tarfile.SYMTYPE, linkname=out),
        _member("lib/x", data=b"x"),
    ],
    "a hard link to a file not unpacked": lambda out: [
        _member("x", tarfile.LNKTYPE, linkname="etc/passwd")
    ],
    "a hard link through '..'": lambda out: [
        _member("x", tarfile.LNKTYPE, linkname="../outside/y")
    ],
    "a symlink out of the image": lambda out: [
        _member("s", tarfile.SYMTYPE, linkname="../../outside/y"),
    ],
    "a hard link to a symlink that leads out from the link's place": lambda out: [
        _member("d", tarfile.DIRTYPE, mode=0o755),
        _member("d/s", tarfile.SYMTYPE, linkname="../outside"),
        _member("x", tarfile.LNKTYPE, linkname="d/s"),
    ],
    "a name twice": lambda out: [_member("x", data=b"one"), _member("x", data=b"two")],
    "a directory replaced by a file": lambda out: [
        _member("d", tarfile.DIRTYPE, mode=0o755),
        _member("d", data=b"x"),
    ],
}


@pytest.mark.timeout(BOUND)
@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_archive_is_refused_and_nothing_is_written_outside(tmp_path, case):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "y").write_text("keep")
    src = _tar(tmp_path / "up" / "bb.tar.gz", HOSTILE[case](str(outside)))
    images = tmp_path / "up" / "images"  # beside the upload: '..' from an entry reaches outside/
    done = _unpack(src, images)
    assert done.returncode == 6, (case, done.stdout, done.stderr)
    assert done.stderr.startswith("KIT-ERROR 6 the unpack of ") and done.stderr.count("\n") == 1
    assert sorted(p.name for p in outside.iterdir()) == ["y"]
    assert (outside / "y").read_text() == "keep"
    assert sorted(images.iterdir()) == []  # no version, no current, no work dir


@pytest.mark.timeout(BOUND)
def test_setuid_bits_and_devices_are_dropped(tmp_path):
    members = [
        _member("bin", tarfile.DIRTYPE, mode=0o555),
        _member("bin/su", data=b"su", mode=0o4755),
        _member("bin/g", data=b"g", mode=0o2755),
        _member("dev/null", tarfile.CHRTYPE, devmajor=1, devminor=3),
        _member("fifo", tarfile.FIFOTYPE),
        _member("etc/motd", data=b"second"),
        _member("etc/issue", tarfile.LNKTYPE, linkname="etc/motd"),
    ]
    src = _tar(tmp_path / "up" / "bb.tar.gz", members)
    images = tmp_path / "images"
    done = _unpack(src, images)
    assert done.returncode == 0, done.stderr
    tree = images / f"bb@{sha12(src)}"
    assert stat.S_IMODE((tree / "bin" / "su").stat().st_mode) == 0o755
    assert stat.S_IMODE((tree / "bin" / "g").stat().st_mode) == 0o755
    assert stat.S_IMODE((tree / "bin").stat().st_mode) == 0o755  # read-only dir: owner may write
    assert not (tree / "dev" / "null").exists() and not (tree / "fifo").exists()
    assert (tree / "etc" / "motd").read_text() == "second"
    assert (tree / "etc" / "issue").stat().st_ino == (tree / "etc" / "motd").stat().st_ino


def _umask() -> int:
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


# Pushed over the loopback sshd to the real installer (the unpack's equivalence with kit image
# convert over generated archives: tests/transfer/test_installer_unpack.py).
TAKEN = [  # what kit image convert takes, with what it changes (modes, links, dropped members)
    ("./", tarfile.DIRTYPE, b"", 0o777),
    ("tmp", tarfile.DIRTYPE, b"", 0o1777),
    ("open", tarfile.DIRTYPE, b"", 0o777),
    ("open/tool", tarfile.REGTYPE, b"#!/bin/sh\n", 0o4777),
    ("open/abs", tarfile.SYMTYPE, b"", 0o777, "/etc/kit-version"),
    ("open/also", tarfile.LNKTYPE, b"", 0o644, "open/abs"),
    ("etc/kit-version", tarfile.REGTYPE, b"one", 0o644),
    ("etc/.wh.gone", tarfile.REGTYPE, b"", 0o644),
    ("dev/null", tarfile.REGTYPE, b"n", 0o644),
    ("fifo", tarfile.FIFOTYPE, b"", 0o644),
]


def _taken(path: Path) -> Path:
    members = []
    for name, kind, data, mode, *link in TAKEN:
        info, payload = _member(name, kind, data, mode=mode, linkname=link[0] if link else "")
        members.append((info, payload))
    return _tar(path, members)


@pytest.mark.timeout(BOUND)
@pytest.mark.parametrize("damaged", [False, True])
def test_a_push_installs_what_kit_image_convert_takes_as_it_unpacks_it(
    udocker_site, tmp_path, damaged
):
    """The real installer over SSH: the image convert takes lands as convert unpacks it (but for
    the mount points and /ch files convert adds); with a bad gzip CRC nothing is installed."""
    src = _taken(tmp_path / "up" / "bb.tar.gz")
    images = tmp_path / "images"
    if damaged:
        data = src.read_bytes()
        src.write_bytes(data[:-8] + bytes([data[-8] ^ 1]) + data[-7:])
        write_sha256(src)
        with pytest.raises(KitError):
            convert(src, tmp_path / "converted", fmt="dir")
        with pytest.raises(KitError, match="the unpack of .* failed; nothing changed"):
            push(src, udocker_site(), install=True)
        assert sorted(images.iterdir()) == []
        return
    converted = convert(src, tmp_path / "converted", fmt="dir")
    report = push(src, udocker_site(), install=True)
    tree = images / f"bb@{report.sha256[:12]}"
    made = {p.lstrip("/") for p in converted.mount_points}
    assert_same_tree(describe(str(tree)), describe(str(tmp_path / "converted")), made, _umask())
    assert os.readlink(tree / "open" / "also") == "/etc/kit-version"  # a symlink of its own
