"""kit transfer push against a real OpenSSH sshd on loopback (the remote dirs are local paths,
so the tests can look at, damage and fill them directly)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kit.errors import KitError
from kit.transfer import installed_versions, push, rollback
from kit.transfer.push import INSTALL_FIXES, UPLOAD_FIXES
from kit.transfer.remote_common import EXIT_NOSPACE
from tests.support import apptainer
from tests.support.transfer import (
    busybox_image,
    ch_run,
    direct_io_works,
    have_charliecloud,
    random_image,
)
from tests.transfer.sifs import busybox_sif
from tests.transfer.sshd import start_sshd

pytestmark = pytest.mark.system  # an sshd of its own, or files of another user: root

MiB = 1 << 20


def sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_push_install_and_versions(sshd, user_home, make_site, tmp_path):
    have_charliecloud()
    site = make_site(keep_versions=1)
    remote, images = tmp_path / "remote", tmp_path / "images"
    v1 = busybox_image(tmp_path / "bb.tar.gz", b"one")
    r1 = push(v1, site, install=True)
    assert r1.bytes_sent == v1.stat().st_size and r1.bytes_skipped == 0
    assert sha(remote / "bb.tar.gz") == r1.sha256 == sha(v1)
    assert (remote / "bb.tar.gz.sha256").read_text() == (tmp_path / "bb.tar.gz.sha256").read_text()
    assert not list(remote.glob(".*")), "no part/state/temp files may remain"
    current = images / "bb.current"
    assert os.readlink(current) == f"bb@{r1.sha256[:12]}"
    assert "one" == ch_run(current, "/bin/busybox", "cat", "/etc/kit-version")

    again = push(v1, site, install=True)  # already there and verified: nothing sent
    assert again.bytes_sent == 0 and again.bytes_skipped == v1.stat().st_size

    versions = [r1.sha256[:12]]
    for content in (b"two", b"three"):
        img = busybox_image(tmp_path / "bb.tar.gz", content)
        r = push(img, site, install=True)
        versions.append(r.sha256[:12])
        assert os.readlink(current) == f"bb@{versions[-1]}"
        assert content.decode() == ch_run(current, "/bin/busybox", "cat", "/etc/kit-version")
    # keep_versions=1: the current one and one previous; the first was pruned
    assert sorted(p.name for p in images.glob("bb@*")) == sorted(f"bb@{v}" for v in versions[1:])
    assert r.pruned == [f"bb@{versions[0]}"]


def _interrupted(sshd, site, img, *, after: int, part: Path) -> None:
    """Push `img` and drop every SSH connection (kill sshd's session processes) after `after`
    bytes, once the site holds at least `after` - 4 MiB of them: on a loaded machine the bytes
    sent may still sit in the pipes, and a cut then would leave nothing to resume from."""
    sent = 0

    def cut(n: int) -> None:
        nonlocal sent
        sent += n
        if sent >= after:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and _size(part) < after - 4 * MiB:
                time.sleep(0.05)
            sshd.kill_sessions()

    with pytest.raises(KitError, match="connection .* was lost"):
        push(img, site, chunk_size=MiB, progress=cut)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def test_interrupted_push_resumes(sshd, user_home, make_site, tmp_path):
    site = make_site(direct_io=False)  # buffered writes here; the next test takes O_DIRECT
    img = random_image(tmp_path / "blob.tar.gz", 12 * MiB + 123)
    part = tmp_path / "remote" / ".blob.tar.gz.part"
    _interrupted(sshd, site, img, after=8 * MiB, part=part)
    assert part.exists() and not (tmp_path / "remote" / "blob.tar.gz").exists()
    report = push(img, site, chunk_size=MiB)
    assert report.bytes_skipped >= 2 * MiB, "the verified prefix must not be sent again"
    assert report.bytes_sent == img.stat().st_size - report.bytes_skipped
    assert report.resent_chunks == []
    assert report.direct_io is False
    assert sha(tmp_path / "remote" / "blob.tar.gz") == sha(img)
    assert not part.exists()


def test_corrupted_byte_in_partial_is_resent(sshd, user_home, make_site, tmp_path):
    site = make_site()
    img = random_image(tmp_path / "blob.tar.gz", 12 * MiB, seed=7)
    part = tmp_path / "remote" / ".blob.tar.gz.part"
    _interrupted(sshd, site, img, after=8 * MiB, part=part)
    assert part.stat().st_size >= 3 * MiB
    with open(part, "r+b") as fh:  # flip one byte inside chunk 1
        fh.seek(MiB + 4321)
        byte = fh.read(1)
        fh.seek(MiB + 4321)
        fh.write(bytes([byte[0] ^ 0xFF]))
    report = push(img, site, chunk_size=MiB)
    assert report.resent_chunks == [1]
    assert report.bytes_skipped % MiB == 0 and report.bytes_skipped >= 2 * MiB
    assert report.bytes_sent == img.stat().st_size - report.bytes_skipped
    assert report.direct_io is direct_io_works(tmp_path / "remote")
    assert sha(tmp_path / "remote" / "blob.tar.gz") == sha(img)


@pytest.fixture
def small_fs(tmp_path):
    """An 8 MiB tmpfs: a remote filesystem that really runs out of space."""
    from tests.support.parts import require

    mnt = tmp_path / "small"
    mnt.mkdir()
    res = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mnt)], capture_output=True, text=True
    )
    require(res.returncode == 0, f"cannot mount a tmpfs here: {res.stderr.strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_out_of_space_keeps_previous_version(sshd, user_home, make_site, tmp_path, small_fs):
    have_charliecloud()
    site = make_site(remote=small_fs / "upload", images=small_fs / "images")
    v1 = busybox_image(tmp_path / "app.tar.gz", b"v1")
    push(v1, site, install=True)
    current = small_fs / "images" / "app.current"
    before = os.readlink(current)

    def still_v1() -> None:
        assert os.readlink(current) == before
        assert ch_run(current, "/bin/busybox", "cat", "/etc/kit-version") == "v1"
        assert not list((small_fs / "images").glob(".*")), "no temp version may remain"

    # each failure names where (HOST:DIR, apart for --json) and its fix: for the upload
    # directory --remote-dir, for the image directory fewer versions (--keep)
    upload, images = f"{sshd.host}:{small_fs / 'upload'}", f"{sshd.host}:{small_fs / 'images'}"

    # 1. checked before sending: too big for what is free
    big = random_image(tmp_path / "big" / "app.tar.gz", 12 * MiB)
    with pytest.raises(KitError, match="not enough space: .* nothing was changed") as err:
        push(big, site, install=True)
    assert (err.value.where, err.value.fix) == (upload, UPLOAD_FIXES[EXIT_NOSPACE])
    still_v1()

    # 2. the space goes away while sending (another writer fills the disk): ENOSPC mid-way
    mid = random_image(tmp_path / "mid" / "app.tar.gz", 3 * MiB)
    filler = small_fs / "filler"

    def fill(n: int) -> None:
        if not filler.exists():
            with open(filler, "wb") as fh:
                try:
                    while True:
                        fh.write(b"\0" * 65536)
                        fh.flush()
                except OSError:
                    pass

    with pytest.raises(KitError, match="no space left") as err:
        push(mid, site, install=True, progress=fill, chunk_size=MiB)
    assert (err.value.where, err.value.fix) == (upload, UPLOAD_FIXES[EXIT_NOSPACE])
    still_v1()
    filler.unlink()

    # 3. the upload fits but unpacking does not: ch-convert fails, the old version stays current
    bomb = busybox_image(tmp_path / "bomb" / "app.tar.gz", b"\0" * (9 * MiB))
    with pytest.raises(KitError, match="no space left .* installing") as err:
        push(bomb, site, install=True)
    assert (err.value.where, err.value.fix) == (images, INSTALL_FIXES[EXIT_NOSPACE])
    still_v1()


def test_unknown_host_key_refused_then_accepted(sshd, tmp_path, make_site, monkeypatch):
    home = tmp_path / "newhome"
    known = home / ".ssh" / "known_hosts"
    sshd.write_ssh_config(home / ".ssh" / "config", alias="kit-test", known_hosts=known)
    monkeypatch.setenv("HOME", str(home))
    site = make_site()
    img = random_image(tmp_path / "k.tar.gz", 1000)
    fp = subprocess.run(
        ["ssh-keygen", "-lf", str(sshd.root / "host_ed25519.pub")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()[1]
    with pytest.raises(KitError, match="unknown SSH host key") as err:
        push(img, site)
    assert fp in str(err.value) and "--accept-new-host-key" in str(err.value)
    assert not (tmp_path / "remote").exists()
    push(img, site, accept_new_host_key=True)
    assert sshd.host_pub in known.read_text()
    push(img, site)  # now known: no opt-in needed
    # a different key recorded for the host is refused even with the opt-in
    other = subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other")], check=True
    )
    assert other.returncode == 0
    fake = " ".join((tmp_path / "other.pub").read_text().split()[:2])
    known.write_text(f"[127.0.0.1]:{sshd.port} {fake}\n")
    with pytest.raises(KitError, match="does NOT match"):
        push(img, site, accept_new_host_key=True)


def test_dry_run_changes_nothing(sshd, user_home, make_site, tmp_path):
    site = make_site()
    img = random_image(tmp_path / "d.tar.gz", 2 * MiB)
    report = push(img, site, dry_run=True, install=True)
    assert report.dry_run and report.bytes_sent == img.stat().st_size
    assert report.installed and report.installed.endswith(f"d@{report.sha256[:12]}")
    assert not (tmp_path / "remote").exists() and not (tmp_path / "images").exists()
    text = "\n".join(report.lines())
    assert "would send" in text and "would install" in text


def test_push_through_jump_host(sshd, user_home, make_site, tmp_path):
    """The site's jump_host (here the same sshd) carries both Fabric and the ssh data stream."""
    site = make_site(jump_host="kit-test")
    img = random_image(tmp_path / "j.tar.gz", 3 * MiB + 5)
    report = push(img, site)
    assert "via" in report.endpoint
    assert sha(tmp_path / "remote" / "j.tar.gz") == sha(img)


def test_cli_push_and_errors(sshd, home, make_site, tmp_path, repo):
    site = make_site()
    img = random_image(tmp_path / "c.tar.gz", MiB)
    env = dict(os.environ, HOME=str(home))
    kit = [sys.executable, "-m", "kit", "transfer", "push"]
    dry = subprocess.run(
        kit + [str(img), "--site", str(site), "--dry-run"],
        capture_output=True,
        text=True,
        env=env,
        cwd=repo,
    )
    assert dry.returncode == 0, dry.stderr
    assert "would send 1048576 bytes" in dry.stdout and not (tmp_path / "remote").exists()
    ok = subprocess.run(
        kit + [str(img), "--site", str(site)], capture_output=True, text=True, env=env, cwd=repo
    )
    assert ok.returncode == 0, ok.stderr
    assert sha(tmp_path / "remote" / "c.tar.gz") == sha(img)
    (tmp_path / "c.tar.gz.sha256").write_text("0" * 64 + "  c.tar.gz\n")
    bad = subprocess.run(
        kit + [str(img), "--site", str(site), "--remote-dir", str(tmp_path / "r2")],
        capture_output=True,
        text=True,
        env=env,
        cwd=repo,
    )
    assert bad.returncode == 1 and "does not match" in bad.stderr
    assert not (tmp_path / "r2" / "c.tar.gz").exists()


def test_concurrent_push_into_same_dir_is_refused(sshd, user_home, make_site, tmp_path):
    import fcntl

    site = make_site()
    remote_dir = tmp_path / "remote"
    remote_dir.mkdir()
    img = random_image(tmp_path / "busy.tar.gz", 1000)
    fd = os.open(remote_dir, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # what a running push holds
        with pytest.raises(KitError, match="another kit transfer push is writing into"):
            push(img, site)
    finally:
        os.close(fd)
    assert push(img, site).bytes_sent == 1000


def test_install_as_squashfs(sshd, user_home, make_site, tmp_path):
    have_charliecloud()
    site = make_site()
    img = busybox_image(tmp_path / "sq.tar.gz", b"squashed")
    report = push(img, site, install=True, install_as="squash")
    current = tmp_path / "images" / "sq.current"
    assert os.readlink(current) == f"sq@{report.sha256[:12]}.sqfs"
    assert (tmp_path / "images" / os.readlink(current)).is_file()
    assert ch_run(current, "/bin/busybox", "cat", "/etc/kit-version") == "squashed"


def test_an_apptainer_site_installs_a_sif_as_it_is_a_charliecloud_site_refuses_it(
    sshd, user_home, make_site, tmp_path
):
    """Apptainer: each push --install of a SIF is NAME@SHA.sif, the very upload the receiver
    checked; versions lists it as sif, --keep prunes it, rollback switches back to it, and the
    real Apptainer (where there is one) runs NAME.current. Charliecloud: refused before a byte
    is sent, in one line naming the fix."""
    one = busybox_sif(tmp_path / "v1" / "bb.sif", b"one")
    with pytest.raises(KitError, match="bb.sif is a SIF, which its runtime charliecloud") as err:
        push(one, make_site(), install=True)
    assert "kit image convert SRC OUT.sqfs" in str(err.value)
    assert not (tmp_path / "remote").exists()

    site = make_site(name="sshtest-apptainer", container={"runtime": "apptainer"}, keep_versions=1)
    images, current = tmp_path / "images", tmp_path / "images" / "bb.current"
    shas = []
    for image in (one, *(busybox_sif(tmp_path / v / "bb.sif", v.encode()) for v in ("2", "3"))):
        report = push(image, site, install=True)
        shas.append(report.sha256[:12])
        assert os.readlink(current) == f"bb@{shas[-1]}.sif"
        assert sha(current) == sha(image) == report.sha256
    assert report.pruned == [f"bb@{shas[0]}.sif"]
    found = installed_versions("bb", site).versions
    assert [(v.entry, v.format, v.current) for v in found] == [
        (f"bb@{shas[2]}.sif", "sif", True),
        (f"bb@{shas[1]}.sif", "sif", False),
    ]
    assert rollback("bb.sif", site).target == f"bb@{shas[1]}.sif"
    assert os.readlink(current) == f"bb@{shas[1]}.sif"
    assert not [p.name for p in images.iterdir() if p.name.startswith(".")], "no work file left"
    if apptainer.found() and os.geteuid() == 0:  # a SIF is loop-mounted here: root
        ran = apptainer.run("exec", current, "/bin/busybox", "cat", "/etc/kit-version")
        assert (ran.returncode, ran.stdout) == (0, "2"), ran.stderr


def test_pair_file_is_checked_against_the_site(sshd, user_home, make_site, tmp_path):
    site = make_site(name="sshtest")
    img = random_image(tmp_path / "p.tar.gz", MiB)
    present = tmp_path / "impi" / "lib"
    present.mkdir(parents=True)
    pair = tmp_path / "p.tar.gz.pair.yaml"
    pair.write_text(
        f"kit_pair: 1\nsite: sshtest\nbinds:\n- {present}:/opt/hostmpi/lib0\n"
        f"- /nonexistent/impi/lib:/opt/hostmpi/lib1\n"
    )
    dry = push(img, site, dry_run=True)
    assert len(dry.pair_warnings) == 1 and "/nonexistent/impi/lib" in dry.pair_warnings[0]
    assert str(present) not in dry.pair_warnings[0]
    report = push(img, site)
    assert (tmp_path / "remote" / "p.tar.gz.pair.yaml").read_text() == pair.read_text()
    assert any("missing on 127.0.0.1: /nonexistent/impi/lib" in line for line in report.lines())

    pair.write_text(f"kit_pair: 1\nsite: supermuc-ng\nbinds:\n- {present}:/opt/hostmpi/lib0\n")
    other = push(img, site)
    assert other.pair_warnings == [
        "p.tar.gz.pair.yaml pairs the image with site 'supermuc-ng', "
        "not 'sshtest'; re-run kit image convert --site sshtest"
    ]


def test_a_login_that_prints_before_the_command_does_not_break_the_push(tmp_path, repo):
    # Sites often echo a banner or module messages from the login files for every session;
    # ForceCommand makes this sshd do that before running what the client asked for.
    noisy = start_sshd(
        tmp_path / "noisy",
        extra_config='ForceCommand echo "Welcome to the site"; '
        'echo "module: intel-mpi loaded"; eval "$SSH_ORIGINAL_COMMAND"\n',
    )
    try:
        cfg = noisy.write_ssh_config(tmp_path / "ssh_config", alias="noisy")
        img = random_image(tmp_path / "n.tar.gz", 2 * MiB + 3)
        (
            tmp_path / "n.tar.gz.sha256"
        ).unlink()  # no sibling: SFTP would meet the forced command too
        site = tmp_path / "site.yaml"
        site.write_text((repo / "site-configs" / "laptop.yaml").read_text())
        report = push(img, site, host="noisy", remote_dir=str(tmp_path / "remote"), ssh_config=cfg)
        assert report.bytes_sent == img.stat().st_size
        assert sha(tmp_path / "remote" / "n.tar.gz") == sha(img)
    finally:
        noisy.stop()
