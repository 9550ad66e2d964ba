"""The remote receiver of `kit transfer push` (remote_script.py push), driven over local pipes
exactly as sshd drives it: probe line out, plan line in, then the bytes, then COMMIT."""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.parts import require
from tests.support.receiver import SCRIPT
from tests.support.transfer import cached_bytes, direct_io_works

MiB = 1 << 20


def receive(
    directory: Path,
    data: bytes,
    chunk: int,
    *,
    send: bytes | None = None,
    keep: str = "",
    direct: bool = True,
) -> subprocess.CompletedProcess:
    """Run the receiver for an image `data`, feeding it `send` (default: all of `data`)."""
    sha = hashlib.sha256(data).hexdigest()
    payload = data if send is None else send
    stdin = f"KEEP {keep}\n".encode() + payload
    if send is None:
        stdin += f"COMMIT {sha}\n".encode()
    return subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "push",
            str(directory),
            "img.tar.gz",
            str(len(data)),
            sha,
            str(chunk),
            "1" if direct else "0",
        ],
        input=stdin,
        capture_output=True,
    )


@pytest.mark.parametrize("chunk", [2 * MiB, 3000], ids=["aligned-direct", "unaligned-buffered"])
def test_odd_sizes_arrive_exactly(tmp_path, chunk):
    # 9 MiB + 123 bytes: several 4 MiB write blocks and an unaligned tail (written without
    # O_DIRECT); a chunk size that is no multiple of 4096 takes the buffered path throughout.
    data = os.urandom(9 * MiB + 123)
    res = receive(tmp_path, data, chunk)
    assert res.returncode == 0, res.stderr.decode()
    assert json.loads(res.stdout.splitlines()[-1])["direct_io"] is (
        chunk % 4096 == 0 and direct_io_works(tmp_path)
    )
    assert (tmp_path / "img.tar.gz").read_bytes() == data
    assert json.loads(res.stdout.splitlines()[-1])["sha256"] == hashlib.sha256(data).hexdigest()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["img.tar.gz"]


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "buffered"])
def test_direct_io_bypasses_the_page_cache(tmp_path, direct):
    require(direct_io_works(tmp_path), "the test filesystem does not take O_DIRECT")
    data = os.urandom(16 * MiB + 5)
    res = receive(tmp_path, data, 4 * MiB, direct=direct)
    assert res.returncode == 0, res.stderr.decode()
    assert json.loads(res.stdout.splitlines()[-1])["direct_io"] is direct
    cached = cached_bytes(tmp_path / "img.tar.gz")
    # O_DIRECT: the 16 MiB went from the receiver's buffers to the device, not via the cache
    assert cached < MiB if direct else cached > 8 * MiB
    assert (tmp_path / "img.tar.gz").read_bytes() == data


def test_cut_stream_keeps_what_arrived_for_the_next_push(tmp_path):
    chunk = MiB
    data = os.urandom(6 * chunk + 777)
    res = receive(tmp_path, data, chunk, send=data[: 3 * chunk + 4097])
    assert res.returncode == 3, res.stderr.decode()
    assert b"upload stream ended at offset" in res.stderr
    part = tmp_path / ".img.tar.gz.part"
    assert (
        part.read_bytes() == data[: 3 * chunk + 4097]
    )  # exactly what arrived: no O_DIRECT padding
    assert not (tmp_path / "img.tar.gz").exists()

    # the next session's probe offers the three complete chunks; keep them, send the rest
    sha = hashlib.sha256(data).hexdigest()
    probe = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "probe",
            str(tmp_path),
            "img.tar.gz",
            str(len(data)),
            sha,
            str(chunk),
        ],
        capture_output=True,
        check=True,
    )
    ours = [hashlib.sha256(data[i * chunk : (i + 1) * chunk]).hexdigest() for i in range(3)]
    assert json.loads(probe.stdout)["chunk_hashes"][:3] == ours
    res = receive(
        tmp_path, data, chunk, send=data[3 * chunk :] + f"COMMIT {sha}\n".encode(), keep="0,1,2"
    )
    assert res.returncode == 0, res.stderr.decode()
    assert (tmp_path / "img.tar.gz").read_bytes() == data


def test_wrong_bytes_are_refused_and_removed(tmp_path):
    data = os.urandom(5 * MiB)
    bad = bytearray(data)
    bad[4 * MiB + 1] ^= 1
    sha = hashlib.sha256(data).hexdigest()
    res = receive(tmp_path, data, MiB, send=bytes(bad) + f"COMMIT {sha}\n".encode())
    assert res.returncode == 4 and b"sha256 of the received file" in res.stderr
    assert list(tmp_path.iterdir()) == [], "nothing may remain under any name"


def _write_through(path: Path, data: bytes, monkeypatch, refuse: str) -> bool:
    """Write `data` with the receiver's Writer on a filesystem that refuses O_DIRECT at `refuse`
    ("open" or "write"). tmpfs before Linux 6.6 and some network filesystems do; this machine's
    do not, so the refusal is simulated here (the only stand-in in this file)."""
    from kit.transfer import remote_receive as rs

    real_open, real_pwrite = os.open, os.pwrite

    def fake_open(p, flags, *mode):
        if refuse == "open" and flags & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_open(p, flags, *mode)

    def fake_pwrite(fd, view, offset):
        if refuse == "write" and fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_pwrite(fd, view, offset)

    monkeypatch.setattr(rs.os, "open", fake_open)
    monkeypatch.setattr(rs.os, "pwrite", fake_pwrite)
    writer = rs.Writer(str(path), True, MiB, True)
    for offset in range(0, len(data), rs.BLOCK):
        buf = writer.take()
        piece = data[offset : offset + rs.BLOCK]
        buf[: len(piece)] = piece
        writer.put(buf, len(piece), offset)
    writer.finish(len(data))
    return writer.direct


@pytest.mark.parametrize("refuse", ["open", "write"])
def test_filesystems_without_direct_io_get_buffered_writes(tmp_path, monkeypatch, refuse):
    data = os.urandom(9 * MiB + 77)
    assert _write_through(tmp_path / "part", data, monkeypatch, refuse) is False
    assert (tmp_path / "part").read_bytes() == data
