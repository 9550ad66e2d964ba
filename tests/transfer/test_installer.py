"""The remote installer (remote_script.py install/switch) run as the site runs it, with the real
ch-convert: concurrent installs, SIGKILL at several points, a ch-convert that never ends, a
FIFO for an image, and an image directory with other people's names in it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from kit.transfer import assemble, push, remote_install
from kit.transfer.assemble import script
from tests.support.installer import call, install_argv, sha12
from tests.support.transfer import (
    busybox_image,
    ch_run,
    have_charliecloud,
    kit_leftovers,
    live_processes,
)
from tests.transfer.oldest import oldest_python3
from tests.transfer.sifs import random_sif

MiB = 1 << 20
BOUND = 300  # s: an installer that blocks is stopped here (and the test fails); nothing is timed


def run_install(src: Path, images: Path, *extra: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        install_argv(src, images, *extra, **kw), capture_output=True, text=True, timeout=BOUND
    )


def wait_until(condition, proc: subprocess.Popen) -> bool:
    """Poll the filesystem until `condition()` holds; False if `proc` ended first."""
    while not condition():
        if proc.poll() is not None:
            return condition()
        time.sleep(0.005)
    return True


def busy_work_dir(images: Path, prefix: str) -> bool:
    """Has an install begun writing into its temp dir (ch-convert is running)?"""
    try:
        return any(
            p.name.startswith(prefix) and p.is_dir() and any(p.iterdir()) for p in images.iterdir()
        )
    except FileNotFoundError:  # it was renamed or removed while being looked at
        return False


def slow_image(path: Path, label: bytes) -> Path:
    """A real image big enough (incompressible bytes) that ch-convert takes a moment to unpack."""
    return busybox_image(path, label + os.urandom(24 * MiB))


def size_of_label(current: Path) -> int:
    return int(ch_run(current, "/bin/busybox", "wc", "-c", "/etc/kit-version").split()[0])


def test_two_installs_at_once_the_second_waits_and_both_succeed(tmp_path):
    have_charliecloud()
    src = slow_image(tmp_path / "up" / "bb.tar.gz", b"x")
    images = tmp_path / "images"
    first = subprocess.Popen(
        install_argv(src, images), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    started = wait_until(
        lambda: images.is_dir() and any(p.name.startswith(".bb@") for p in images.iterdir()), first
    )
    second = subprocess.Popen(
        install_argv(src, images), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    outs = [p.communicate(timeout=BOUND) for p in (first, second)]
    assert started, "the first install ended before the second began: the image is too small"
    assert [first.returncode, second.returncode] == [0, 0], outs
    current = images / "bb.current"
    assert os.readlink(current) == f"bb@{sha12(src)}"
    assert size_of_label(current) == 1 + 24 * MiB
    assert kit_leftovers(images) == []


@pytest.mark.parametrize("point", ["started", "converting"])
def test_sigkill_of_the_installer_leaves_a_complete_current(
    sshd, user_home, make_site, tmp_path, point
):
    """The remote installer is killed as soon as its temp dir appears, or once ch-convert writes
    into it (the orphaned ch-convert may go on): NAME.current still names a complete image, and
    the next push --install (of another version) waits for the orphan, removes what the killed
    one left and succeeds."""
    have_charliecloud()
    site = make_site(keep_versions=1)
    images, remote = tmp_path / "images", tmp_path / "remote"
    push(busybox_image(tmp_path / "v1" / "bb.tar.gz", b"one"), site, install=True)
    v2 = slow_image(tmp_path / "v2" / "bb.tar.gz", b"two")
    push(v2, site)  # uploaded, not installed
    prefix = f".bb@{sha12(v2)}"
    proc = subprocess.Popen(
        install_argv(remote / "bb.tar.gz", images), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    if point == "started":
        wait_until(lambda: any(p.name.startswith(prefix) for p in images.iterdir()), proc)
    else:
        wait_until(lambda: busy_work_dir(images, prefix), proc)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=BOUND)

    current = images / "bb.current"
    assert os.readlink(current) == "bb@" + sha12(tmp_path / "v1" / "bb.tar.gz")
    assert ch_run(current, "/bin/busybox", "cat", "/etc/kit-version") == "one"

    v3 = busybox_image(tmp_path / "v3" / "bb.tar.gz", b"three")
    push(v3, site, install=True)
    assert os.readlink(current) == f"bb@{sha12(v3)}"
    assert ch_run(current, "/bin/busybox", "cat", "/etc/kit-version") == "three"
    assert kit_leftovers(images) == [], "the killed install's work dir is gone"


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_stopped_installer_cleans_up_at_once(tmp_path, signum):
    """Ctrl-C, kill or a hang-up during ch-convert: ch-convert's process group is stopped, the
    work dir removed, NAME.current untouched, and the installer says so in one line."""
    have_charliecloud()
    images = tmp_path / "images"
    v1 = busybox_image(tmp_path / "v1" / "bb.tar.gz", b"one")
    assert run_install(v1, images).returncode == 0
    v2 = slow_image(tmp_path / "v2" / "bb.tar.gz", b"two")
    proc = subprocess.Popen(
        install_argv(v2, images), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert wait_until(lambda: busy_work_dir(images, f".bb@{sha12(v2)}"), proc)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=BOUND)
    assert proc.returncode == 10 and "stopped by a signal" in err.decode(), err
    assert len(err.decode().strip().splitlines()) == 1, err
    assert kit_leftovers(images) == [], "the work dir goes with the installer"
    assert live_processes(f"{images}/.bb@") == [], "no ch-convert is left"
    assert os.readlink(images / "bb.current") == f"bb@{sha12(v1)}"
    assert ch_run(images / "bb.current", "/bin/busybox", "cat", "/etc/kit-version") == "one"


@pytest.mark.timeout(BOUND)
def test_a_ch_convert_that_never_ends_is_stopped(tmp_path):
    """The watchdog: a ch-convert (here a stand-in that only sleeps: a real one cannot be made to
    hang on a checked regular file) that reads and writes nothing for STALL s is killed."""
    fake = tmp_path / "bin" / "ch-convert"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\nsleep 3601\n")  # a shell and its child: the group goes
    fake.chmod(0o755)
    src = busybox_image(tmp_path / "up" / "bb.tar.gz", b"x")
    images = tmp_path / "images"
    env = dict(os.environ, PATH=f"{fake.parent}:{os.environ['PATH']}")
    res = subprocess.run(
        install_argv(src, images, "2", "5"), capture_output=True, text=True, env=env, timeout=BOUND
    )
    assert res.returncode == 6, res.stderr
    assert (
        "read and wrote nothing for 2 s" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    )
    assert not (images / "bb.current").is_symlink() and kit_leftovers(images) == []
    assert live_processes(str(fake)) == [] and live_processes("sleep 3601") == [], (
        "its group is gone"
    )


@pytest.mark.timeout(BOUND)
@pytest.mark.parametrize("fmt", ["dir", "squash"])
def test_a_fifo_in_place_of_the_image_is_refused(tmp_path, fmt):
    up, images = tmp_path / "up", tmp_path / "images"
    up.mkdir()
    os.mkfifo(up / "bb.tar.gz")
    res = run_install(up / "bb.tar.gz", images, fmt=fmt, version="0" * 12)
    assert res.returncode == 8 and "FIFO" in res.stderr, res.stderr
    assert list(images.iterdir()) == []


@pytest.mark.parametrize("planted", ["bb@my-notes", "bb@0123456789ab-old", "bb@"])
def test_prune_removes_only_the_kits_own_versions(tmp_path, planted):
    """keep 0 prunes every previous version: entries that only look like versions stay."""
    images, src = tmp_path / "images", tmp_path / "up" / "bb.sqfs"
    (images / planted).mkdir(parents=True)
    (images / planted / "mine").write_text("keep me")
    for _ in range(3):
        src.parent.mkdir(exist_ok=True)
        src.write_bytes(os.urandom(4096))
        res = run_install(src, images, keep="0", fmt="squash")
        assert res.returncode == 0, res.stderr
    assert (images / planted / "mine").read_text() == "keep me"
    assert sorted(p.name for p in images.iterdir()) == sorted(
        [planted, "bb.current", f"bb@{sha12(src)}.sqfs"]
    )


def test_a_sif_is_copied_listed_switched_and_pruned_only_if_it_is_one(tmp_path):
    """FMT sif (an Apptainer site), run by the oldest Python 3 here as on a site: each upload is
    checked and copied as it is to NAME@VERSION.sif; listing, switch and prune take .sif versions
    as they take .sqfs ones. A .sif without SIF's magic, or a SIF with another FMT, changes
    nothing."""
    python = oldest_python3() or sys.executable
    images, sent = tmp_path / "images", tmp_path / "remote_script.py"
    sent.write_bytes(script())  # the text the site runs

    def install(src: Path, fmt: str = "sif") -> subprocess.CompletedProcess:
        argv = [python, str(sent), *install_argv(src, images, keep="1", fmt=fmt)[2:]]
        return subprocess.run(argv, capture_output=True, text=True, timeout=BOUND)

    shas = []
    for seed in (1, 2, 3):
        src = random_sif(tmp_path / "up" / "bb.sif", seed)
        done = install(src)
        assert done.returncode == 0, done.stderr
        shas.append(sha12(src))
    assert sorted(p.name for p in images.iterdir()) == sorted(
        ["bb.current", f"bb@{shas[1]}.sif", f"bb@{shas[2]}.sif"]
    ), "keep 1: the first version was pruned"
    assert (images / "bb.current").read_bytes() == src.read_bytes()
    listed = subprocess.run(
        [python, str(sent), "versions", str(images), "bb"],
        capture_output=True,
        text=True,
        timeout=BOUND,
    )
    doc = json.loads(listed.stdout)
    assert [(v["entry"], v["format"], v["current"]) for v in doc["versions"]] == [
        (f"bb@{shas[2]}.sif", "sif", True),
        (f"bb@{shas[1]}.sif", "sif", False),
    ]
    assert call(["switch", str(images), "bb", f"bb@{shas[1]}.sif", "0"])[0] == 0
    assert os.readlink(images / "bb.current") == f"bb@{shas[1]}.sif"

    before = sorted(p.name for p in images.iterdir())
    fake = tmp_path / "fake" / "bb.sif"
    fake.parent.mkdir()
    fake.write_bytes(os.urandom(4096))
    done = install(fake)
    assert done.returncode == 6, done.stderr
    assert "is not a SIF file" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    sqfs = tmp_path / "up" / "bb.sqfs"
    sqfs.write_bytes(os.urandom(4096))
    for upload, fmt in ((src, "dir"), (src, "squash"), (sqfs, "sif")):
        done = install(upload, fmt)
        assert done.returncode == 5 and "a SIF is installed only as a SIF" in done.stderr, fmt
    assert sorted(p.name for p in images.iterdir()) == before, "nothing added, nothing pruned"
    assert os.readlink(images / "bb.current") == f"bb@{shas[1]}.sif"


@pytest.mark.parametrize("planted", ["target-link", "current-file", "current-dir"])
def test_what_the_kit_did_not_make_is_refused_not_replaced(tmp_path, planted):
    images, src = tmp_path / "images", tmp_path / "up" / "bb.sqfs"
    src.parent.mkdir()
    src.write_bytes(os.urandom(4096))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "data").write_text("theirs")
    images.mkdir()
    name = {
        "target-link": f"bb@{sha12(src)}.sqfs",
        "current-file": "bb.current",
        "current-dir": "bb.current",
    }[planted]
    if planted == "target-link":
        (images / name).symlink_to(elsewhere / "data")
    elif planted == "current-file":
        (images / name).write_text("theirs")
    else:
        (images / name).mkdir()
    before = sorted(p.name for p in images.iterdir())
    res = run_install(src, images, fmt="squash")
    assert res.returncode == 8, res.stderr
    assert name in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert (elsewhere / "data").read_text() == "theirs"
    assert sorted(p.name for p in images.iterdir()) == before, "nothing was added, nothing replaced"


def test_a_replaced_upload_is_not_installed_under_the_old_version(tmp_path):
    """Two operators push different images of one name: an install names what it unpacks."""
    images, src = tmp_path / "images", tmp_path / "up" / "bb.sqfs"
    src.parent.mkdir()
    src.write_bytes(b"first")
    version = sha12(src)
    src.write_bytes(b"second")  # the other push renamed its upload over ours
    res = run_install(src, images, fmt="squash", version=version)
    assert res.returncode == 4 and "no longer the image uploaded" in res.stderr
    assert not (images / "bb.current").exists() and kit_leftovers(images) == []


# Names and versions as a hostile or confused sender could pass them: the installer either
# refuses them (exit 5, one line) or creates entries only inside IMGDIR, under the kit's names.
NAMES = st.one_of(
    st.sampled_from(["bb", "../bb", "a/b", "..", ".", "bb\n", ".bb", "bb@x", "-bb", ""]),
    st.text(st.characters(codec="utf-8", exclude_characters="\0"), max_size=12),
)
HEX = st.text("0123456789abcdef", min_size=12, max_size=12)


@given(
    name=NAMES,
    version=st.one_of(
        st.just("V"), HEX, st.sampled_from(["V/..", "../V", "V\n", "V.sqfs"]), st.text(max_size=16)
    ),
)
@example(name="../bb", version="V")
@example(name="bb", version="../../escape")
@example(name="bb/../../x", version="V")
@example(name="bb..", version="V")
def test_names_and_versions_never_reach_outside_the_image_dir(name, version):
    with tempfile.TemporaryDirectory() as root:
        root = Path(root)
        images, src = root / "site" / "images", root / "up" / "bb.sqfs"
        images.mkdir(parents=True)
        src.parent.mkdir()
        src.write_bytes(b"image bytes")
        version = version.replace("V", sha12(src))
        outside = sorted(str(p) for p in root.rglob("*") if images not in p.parents)
        code, err = call(["install", str(src), str(images), name, version, "0", "0", "squash"])
        assert code in (0, 4, 5), err  # installed; not the image's sha; malformed
        assert len(err.strip().splitlines()) == (0 if code == 0 else 1), err
        assert sorted(str(p) for p in root.rglob("*") if images not in p.parents) == outside
        made = sorted(p.name for p in images.iterdir())
        assert made == ([] if code else sorted([f"{name}.current", f"{name}@{version}.sqfs"]))


def test_switch_only_names_installed_versions(tmp_path):
    images = tmp_path / "images"
    (images / "bb@0123456789ab").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (images / "bb@aaaaaaaaaaaa").symlink_to(tmp_path / "elsewhere")
    for entry, code in (("../elsewhere", 5), ("bb@aaaaaaaaaaaa", 8), ("bb@0123456789ab", 0)):
        got, err = call(["switch", str(images), "bb", entry, "0"])
        assert got == code, err
    assert os.readlink(images / "bb.current") == "bb@0123456789ab"


def test_a_prune_cut_short_leaves_no_half_version_under_a_version_name(tmp_path, monkeypatch):
    """The removal of a pruned version is interrupted half-way (here: after its first file): the
    version is already gone from its name, so listing, rollback and a re-push of that version never
    take a half tree for an installed one; the next install removes what is left."""
    images, src = tmp_path / "images", tmp_path / "up" / "bb.sqfs"
    old = images / ("bb@" + "a" * 12)
    (old / "usr" / "bin").mkdir(parents=True)
    for n in range(3):
        (old / "usr" / "bin" / f"tool{n}").write_text("x")
    src.parent.mkdir()
    src.write_bytes(os.urandom(4096))
    assert run_install(src, images, keep="1", fmt="squash").returncode == 0
    real_unlink = os.unlink

    def cut(path, *args, **kw):  # the prune is killed after removing one file
        real_unlink(path, *args, **kw)
        raise KeyboardInterrupt

    monkeypatch.setattr(remote_install.os, "unlink", cut)
    with pytest.raises(KeyboardInterrupt):
        remote_install.install(
            str(src),
            str(images),
            "bb",
            version=sha12(src),
            keep_n=0,
            dry=False,
            fmt="squash",
            stall=0,
            wait=0,
        )
    monkeypatch.undo()
    assert remote_install.versions(str(images), "bb") == [f"bb@{sha12(src)}.sqfs"]
    assert not old.exists() and kit_leftovers(images), "what is left of it sits under a temp name"
    assert run_install(src, images, keep="0", fmt="squash").returncode == 0
    assert kit_leftovers(images) == [] and sorted(p.name for p in images.iterdir()) == [
        "bb.current",
        f"bb@{sha12(src)}.sqfs",
    ]


def test_a_pruned_directory_version_with_closed_directories_goes_for_a_non_root_user():
    """A site user is not root: a version ch-convert wrote with d--------- / r-x directories (the
    image's own modes) must still be pruned whole, with no temp name left behind."""
    if not (os.geteuid() == 0 and shutil.which("setpriv")):
        pytest.skip("needs root to switch to nobody (setpriv)")
    base = Path(tempfile.mkdtemp(prefix="kit-prune-", dir="/tmp"))
    try:
        base.chmod(0o755)
        images = base / "images"
        old = images / ("bb@" + "a" * 12)
        (old / "usr/locked/deeper").mkdir(parents=True)
        (old / "usr/locked/deeper/file").write_text("x")
        (old / "usr/readonly").mkdir()
        (old / "usr/readonly/file").write_text("y")
        subprocess.run(["chown", "-R", "nobody", str(base)], check=True)
        (old / "usr/locked/deeper").chmod(0o000)
        (old / "usr/locked").chmod(0o500)
        (old / "usr/readonly").chmod(0o555)
        sent = base / "remote_script.py"  # the script as the site gets it (kit.transfer.assemble)
        sent.write_bytes(assemble.script())
        code = "import runpy, sys; runpy.run_path(sys.argv[1])['retire'](sys.argv[2], sys.argv[3])"
        done = subprocess.run(
            [
                "setpriv",
                "--reuid=nobody",
                "--regid=nogroup",
                "--clear-groups",
                sys.executable,
                "-c",
                code,
                str(sent),
                str(images),
                old.name,
            ],
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert list(images.iterdir()) == []
    finally:
        subprocess.run(["chmod", "-R", "u+rwx", str(base)], check=False)
        shutil.rmtree(base, ignore_errors=True)
