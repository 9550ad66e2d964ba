"""A remote side that is slow or stuck, over the real loopback sshd: the resumed push's re-hash of
the kept part, and the remote install. A slow or hung remote filesystem cannot be made on demand,
so it is simulated: strace delays the remote receiver's reads of the part (by 1 s each: slow but
moving; or by 600 s: stuck), and a fake `ch-convert` on the remote PATH only sleeps (a stuck
install). Each ends with a result or one clean KitError within the bounds the test sets; nothing
is timed."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from kit.errors import KitError
from kit.transfer import push
from tests.support.parts import require
from tests.support.transfer import busybox_image, kit_leftovers, live_processes, random_image
from tests.transfer.sshd import Sshd, start_sshd

pytestmark = pytest.mark.system  # an sshd of its own, or files of another user: root

MiB = 1 << 20
BOUND = 300  # s: a push that blocks is stopped here (and the test fails)
KEPT = 6  # chunks of 1 MiB already on the remote side: the resumed push re-hashes them
STALL = 5  # s: the test's watchdog; the slow re-hash below takes longer than this, in steps of ~1 s


def partial_upload(img: Path, remote: Path) -> None:
    """What an interrupted push leaves: the first KEPT chunks in .NAME.part and its state file."""
    remote.mkdir(parents=True)
    data = img.read_bytes()
    (remote / f".{img.name}.part").write_bytes(data[: KEPT * MiB])
    state = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data), "chunk": MiB}
    (remote / f".{img.name}.part.state").write_text(json.dumps(state))


def receiver_pid(sshd: Sshd) -> int:
    """The remote receiver (remote_script.py push) this sshd started."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for pid in descendants(sshd.proc.pid):
            try:
                if b"push" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0"):
                    return pid
            except OSError:
                continue
        time.sleep(0.005)
    raise AssertionError("no receiver started")


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                children.setdefault(
                    int((proc / "stat").read_bytes().rsplit(b")", 1)[1].split()[1]), []
                ).append(int(proc.name))
            except (OSError, IndexError, ValueError):
                continue
    found, todo = [], [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


@contextlib.contextmanager
def slowed_reads(sshd: Sshd, remote: Path, part: Path, delay: str, first: int = 1):
    """Every read(2) of `part` by the push's receiver (from the `first`-th on) waits `delay`
    (strace's fault injection): a slow filesystem under the kept part or, with a long delay, a
    hung one. The test holds the receiver's directory lock until strace is attached (the receiver
    waits for it up to PUSH_WAIT s), so the re-hash cannot begin untraced."""
    require(shutil.which("strace") is not None, "strace not installed (scripts/setup.sh)")
    lock = os.open(remote, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(lock, fcntl.LOCK_EX)
    tracers: list[subprocess.Popen] = []

    def attach() -> None:
        try:
            pid = receiver_pid(sshd)
            tracers.append(
                subprocess.Popen(
                    [
                        "strace",
                        "-f",
                        "-qq",
                        "-o",
                        "/dev/null",
                        "-p",
                        str(pid),
                        "-P",
                        str(part),
                        "-e",
                        "trace=read",
                        "-e",
                        f"inject=read:delay_enter={delay}:when={first}+",
                    ],
                    stderr=subprocess.DEVNULL,
                )
            )
            while (
                "TracerPid:\t0\n" in Path(f"/proc/{pid}/status").read_text()
                and tracers[0].poll() is None
            ):
                time.sleep(0.005)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)

    thread = threading.Thread(target=attach, daemon=True)
    thread.start()
    try:
        yield
    finally:
        thread.join()
        os.close(lock)
        for tracer in tracers:
            tracer.terminate()  # strace detaches; a delayed read goes on
            tracer.wait(timeout=60)


@pytest.mark.timeout(BOUND)
def test_a_slow_rehash_of_the_kept_part_is_not_taken_for_a_hang(
    sshd, user_home, make_site, tmp_path
):
    """Each 1 MiB read of the kept part takes 1 s: its re-hash (before the probe line, and again
    as the receiver reads the kept chunks) takes about 2 x STALL, but says after each chunk that
    it moves. Before, the watchdog stopped such a push after STALL s."""
    img = random_image(tmp_path / "slow.tar.gz", 8 * MiB + 77)
    remote = tmp_path / "remote"
    partial_upload(img, remote)
    part = remote / ".slow.tar.gz.part"
    with slowed_reads(sshd, remote, part, "1s"):
        report = push(img, make_site(direct_io=False), chunk_size=MiB, stall=STALL)
    assert report.bytes_skipped == KEPT * MiB and report.resent_chunks == []
    assert (remote / "slow.tar.gz").read_bytes() == img.read_bytes() and not part.exists()


@pytest.mark.timeout(BOUND)
def test_a_rehash_that_is_stuck_ends_the_push_and_keeps_the_part(
    sshd, user_home, make_site, tmp_path
):
    """The second read of the kept part never returns (within the test): the watchdog ends the
    push after STALL s with one line, and the part stays for the next push to resume from."""
    img = random_image(tmp_path / "stuck.tar.gz", 8 * MiB + 77)
    remote = tmp_path / "remote"
    partial_upload(img, remote)
    part = remote / ".stuck.tar.gz.part"
    with slowed_reads(sshd, remote, part, "600s", first=2), pytest.raises(KitError) as err:
        push(img, make_site(direct_io=False), chunk_size=MiB, stall=STALL)
    message = str(err.value)
    assert "\n" not in message and f"moved no byte for {STALL} s after 0 bytes" in message
    assert "no re-hash progress" in message and err.value.fix and "--stall" in err.value.fix
    assert part.read_bytes() == img.read_bytes()[: KEPT * MiB], "the next push resumes from it"


@pytest.fixture
def sshd_with_fake_ch_convert(tmp_path):
    """An sshd whose sessions find a `ch-convert` on PATH that only sleeps (a stuck remote install:
    it never reads or writes, but the remote watchdog allows it 900 s of that)."""
    fake = tmp_path / "fakebin" / "ch-convert"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\nexec sleep 3602\n")
    fake.chmod(0o755)
    server = start_sshd(
        tmp_path / "stuck-sshd",
        extra_config=f"SetEnv PATH={fake.parent}:/usr/local/bin:/usr/bin:/bin\n",
    )
    yield server, server.write_ssh_config(tmp_path / "ssh_config", alias="stuck")
    server.stop()


@pytest.mark.timeout(BOUND)
def test_an_install_that_never_ends_is_stopped_by_the_local_timeout(
    sshd_with_fake_ch_convert, make_site, tmp_path
):
    server, config = sshd_with_fake_ch_convert
    img = busybox_image(tmp_path / "bb.tar.gz")
    images = tmp_path / "images"
    with pytest.raises(KitError) as err:
        push(
            img,
            make_site(images=images),
            host="stuck",
            ssh_config=config,
            install=True,
            install_timeout=3,
        )
    assert "\n" not in str(err.value) and err.value.where == f"{server.host}:{images}"
    assert err.value.what.startswith("installing bb: no answer within 3 s")
    assert "bb.current is unchanged" in err.value.what and "--install-timeout" in err.value.fix
    assert (tmp_path / "remote" / "bb.tar.gz").read_bytes() == img.read_bytes(), (
        "the upload is kept"
    )

    # The installer saw its session end: it stopped the fake ch-convert and removed its work dir.
    def leftovers() -> list[str]:
        return live_processes("sleep 3602") + (kit_leftovers(images) if images.exists() else [])

    deadline = time.monotonic() + 60  # a bound on the wait, not an assertion about speed
    while leftovers() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert leftovers() == []
    assert not (images / "bb.current").exists()


@pytest.mark.parametrize("bounds", [{"stall": 0}, {"install_timeout": -1}])
def test_a_bound_that_is_no_number_of_seconds_is_refused_before_connecting(
    make_site, tmp_path, bounds
):
    img = random_image(tmp_path / "b.tar.gz", 1000)
    with pytest.raises(
        KitError, match=r"--stall .* / --install-timeout .*: not a number of seconds > 0; fix: "
    ):
        push(img, make_site(), host="nowhere.invalid", **bounds)
