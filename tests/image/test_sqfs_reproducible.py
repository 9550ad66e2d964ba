"""`.sqfs` outputs are byte-reproducible: same image in, same bytes out, whenever and however run.

Real mksquashfs writes every image and real unsquashfs reads it back; ch-run mounts one.
"""

from __future__ import annotations

import io
import os
import struct
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from kit.errors import KitError
from kit.image import convert
from kit.image.flatten import Entry
from kit.image.sqfs_root import set_root_mtime
from kit.image.writers import SquashWriter
from tests.image.chtools import ch_run, need


def _root_line(image: Path) -> list[str]:
    """unsquashfs's listing of the root directory: mode, uid/gid, size, date, time, name."""
    need("unsquashfs")
    out = subprocess.run(
        ["unsquashfs", "-lln", str(image)], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    return [line for line in out.splitlines() if line.endswith("squashfs-root")][0].split()


def _root_stat(image: Path, where: Path) -> os.stat_result:
    """The root directory's mode and mtime, as real unsquashfs unpacks them."""
    tree = where / "x"
    subprocess.run(
        ["unsquashfs", "-q", "-no-xattrs", "-d", str(tree), str(image)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return os.stat(tree)


def test_two_conversions_at_different_times_are_byte_identical(rich, tmp_path):
    """Different seconds, packagings and thread counts: one .sqfs, root 0755 with the newest
    mtime.
    """
    a = convert(rich / "docker.tar", tmp_path / "a.sqfs", threads=1)
    time.sleep(1.1)  # mksquashfs 4.5.1 stamps the root with time(NULL): make the seconds differ
    b = convert(rich / "oci", tmp_path / "b.sqfs", threads=2)
    assert (tmp_path / "a.sqfs").read_bytes() == (tmp_path / "b.sqfs").read_bytes()
    assert a.sha256 == b.sha256
    mode, owner = _root_line(tmp_path / "a.sqfs")[:2]
    assert (mode, owner) == ("drwxr-xr-x", "0/0")
    convert(rich / "oci", tmp_path / "c.tar")
    with tarfile.open(tmp_path / "c.tar") as tar:
        newest = max(int(m.mtime) for m in tar)
    root = _root_stat(tmp_path / "a.sqfs", tmp_path)
    assert (root.st_mode & 0o7777, int(root.st_mtime)) == (0o755, newest)
    out = ch_run(tmp_path / "b.sqfs", "/bin/sh", "-c", "cat /data/keep.txt; ls -ld / | cut -c1-10")
    assert out == "keep\ndrwxr-xr-x\n"


_names = st.text("abcxyz._-", min_size=1, max_size=12).filter(lambda n: n not in (".", ".."))
_files = st.dictionaries(
    _names, st.tuples(st.integers(0, (1 << 32) - 1), st.binary(max_size=300)), max_size=12
)


@given(files=_files, dir_mtime=st.integers(0, (1 << 32) - 1), threads=st.integers(2, 4))
@example(files={}, dir_mtime=0, threads=2)  # nothing newer than the epoch: root at 0
@example(
    files={"f": ((1 << 32) - 1, b"x")}, dir_mtime=5, threads=4
)  # the last second SquashFS keeps
def test_written_bytes_depend_on_entries_only(files, dir_mtime, threads):
    """Whatever the entries and threads: same bytes as one thread; root 0755, root-owned, newest
    mtime.
    """
    with tempfile.TemporaryDirectory() as tmp:
        entries = {"": (dir_mtime, b"")}
        entries.update(files)
        work = Path(tmp)
        (work / "one").mkdir()
        (work / "many").mkdir()
        one = _write_tree(entries, work / "one", 1)
        many = _write_tree(entries, work / "many", threads)
        assert one.read_bytes() == many.read_bytes()
        assert _root_line(one)[:2] == ["drwxr-xr-x", "0/0"]
        root = _root_stat(one, work)
        newest = max(mtime for mtime, _ in entries.values())
        assert (root.st_mode & 0o7777, int(root.st_mtime)) == (0o755, newest)


def _write_tree(entries: dict[str, tuple[int, bytes]], work: Path, threads: int) -> Path:
    """Directory ``d`` (its mtime under the key "") holding the files, as the flattener emits it."""
    writer = SquashWriter(work, 6, threads)
    try:
        info = tarfile.TarInfo("d")
        info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, entries[""][0]
        writer.add(Entry(info, None))
        for name, (mtime, data) in sorted(entries.items()):
            if name:
                info = tarfile.TarInfo(f"d/{name}")
                info.size, info.mtime, info.mode = len(data), mtime, 0o644
                writer.add(Entry(info, io.BytesIO(data)))
        return writer.finish()
    except BaseException:
        writer.abort()
        raise


# -- the root-inode stamp on its own ------------------------------------------------------------


def _mksquashfs(members: list[tarfile.TarInfo], out: Path, *opts: str) -> Path:
    need("mksquashfs")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info in members:
            tar.addfile(info, io.BytesIO(b"x" * info.size))
    subprocess.run(
        [
            "mksquashfs",
            "-",
            str(out),
            "-tar",
            "-noappend",
            "-quiet",
            "-no-progress",
            "-processors",
            "1",
            *opts,
        ],
        input=buf.getvalue(),
        check=True,
        capture_output=True,
        timeout=60,
    )
    return out


def _spanning_image(out: Path) -> Path:
    """254 one-byte files and a 30-byte symlink put the root inode 10 bytes before a metadata
    block's end (8192): its mtime's bytes are split between two blocks."""
    members = []
    for k in range(254):
        info = tarfile.TarInfo(f"f{k:04d}")
        info.size, info.mtime = 1, 100
        members.append(info)
    link = tarfile.TarInfo("link")
    link.type, link.linkname, link.mtime = tarfile.SYMTYPE, "t" * 30, 100
    return _mksquashfs(members + [link], out, "-noI")


def test_stamp_reaches_a_root_inode_split_across_metadata_blocks(tmp_path):
    image = _spanning_image(tmp_path / "span.sqfs")
    ref = struct.unpack_from("<Q", image.read_bytes(), 32)[0]
    assert (ref >> 16, ref & 0xFFFF) == (0, 8182)  # the layout this test is about
    before = image.read_bytes()
    set_root_mtime(image, 1234567890)
    after = image.read_bytes()
    changed = [i for i, (x, y) in enumerate(zip(before, after)) if x != y]
    assert len(before) == len(after) and 0 < len(changed) <= 4
    assert _root_stat(image, tmp_path).st_mtime == 1234567890


def test_stamp_refuses_a_compressed_inode_table_and_leaves_it(tmp_path):
    info = tarfile.TarInfo("f")
    info.size = 1
    image = _mksquashfs([info], tmp_path / "c.sqfs")
    before = image.read_bytes()
    with pytest.raises(KitError, match=r"compressed inode table.*fix: "):
        set_root_mtime(image, 5)
    assert image.read_bytes() == before


def test_stamp_refuses_a_fifo_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "p.sqfs")
    with pytest.raises(KitError, match="not a regular file"):
        set_root_mtime(tmp_path / "p.sqfs", 5)


@given(data=st.data())
@example(data=None)  # the image as mksquashfs wrote it
def test_stamp_on_damaged_images_is_clean(data, tmp_path_factory):
    """Bytes overwritten anywhere in the superblock or inode table: a stamp or a KitError, no
    crash.
    """
    base = tmp_path_factory.getbasetemp() / "span-base.sqfs"
    if not base.exists():
        _spanning_image(base)
    raw = bytearray(base.read_bytes())
    if data is not None:
        inode_end = struct.unpack_from("<Q", raw, 72)[0]
        for _ in range(data.draw(st.integers(1, 8))):
            raw[data.draw(st.integers(0, inode_end - 1))] = data.draw(st.integers(0, 255))
    with tempfile.TemporaryDirectory() as tmp:
        image = Path(tmp) / "d.sqfs"
        image.write_bytes(raw)
        try:
            set_root_mtime(image, 77)
        except KitError as err:
            assert "\n" not in str(err) and "fix: " in str(err)
            assert image.read_bytes() == raw
        else:
            assert len(image.read_bytes()) == len(raw)
