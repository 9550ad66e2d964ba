"""`.sif` outputs: the kit's SIF writer checked against Debian's real siftool and ch-run, its
bounded reader fuzzed. (A real Apptainer runs one in tests/image/test_sif_apptainer.py.)"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from kit.errors import KitError
from kit.image import convert, sif
from tests.image.chtools import ch_run, need

SIF_SUFFIX = ".sif"
_TIMES = struct.Struct("<qq")  # created, modified


@pytest.fixture(scope="module")
def sifs(rich, tmp_path_factory) -> Path:
    """The rich image as a.sif (from its docker-archive), b.sif (from its OCI layout, another
    thread count) and a.sqfs: three conversions shared by the tests below."""
    out = tmp_path_factory.mktemp("sif")
    convert(rich / "docker.tar", out / "a.sif", threads=1)
    convert(rich / "oci", out / "b.sif", threads=2)
    convert(rich / "docker.tar", out / "a.sqfs")
    return out


def siftool(*args: str | Path) -> str:
    need("siftool")
    proc = subprocess.run(["siftool", *map(str, args)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"siftool {args}: {proc.stderr}"
    return proc.stdout


def test_the_same_image_gives_the_same_sif_and_siftool_reads_it(sifs, tmp_path):
    """Byte-identical from two packagings of one image; siftool lists the three objects; the
    partition siftool dumps is the .sqfs byte for byte, and it runs under ch-run."""
    a, b = (sifs / "a.sif").read_bytes(), (sifs / "b.sif").read_bytes()
    assert a == b
    assert a[:32].rstrip(b"\0") == sif.LAUNCH and os.stat(sifs / "a.sif").st_mode & 0o777 == 0o755
    listing = siftool("list", sifs / "a.sif")
    rows = [line.split("|") for line in listing.splitlines() if line[:1].isdigit()]
    assert [(r[0].strip(), r[-1].strip()) for r in rows] == [
        ("1", "Def.FILE"),
        ("2", "JSON.Labels"),
        ("3", "FS (Squashfs/*System/amd64)"),
    ]
    info = siftool("info", "3", sifs / "a.sif")
    assert "Partition Type:   *System" in info and "Filesystem Type:  Squashfs" in info
    squash = (sifs / "a.sqfs").read_bytes()
    part = tmp_path / "part.sqfs"
    part.write_bytes(subprocess.run(
        ["siftool", "dump", "3", str(sifs / "a.sif")], capture_output=True, check=True, timeout=60
    ).stdout)  # fmt: skip
    assert part.read_bytes() == squash
    start = int(rows[2][3].split("-")[0])
    assert start % sif.ALIGN == 0 and a[start:] == squash
    labels = json.loads(siftool("dump", "2", sifs / "a.sif"))
    assert labels["org.example"] == "demo"  # the image's own label, carried over
    assert "Bootstrap: scratch" in siftool("dump", "1", sifs / "a.sif")
    assert ch_run(part, "/bin/sh", "-c", "cat /data/keep.txt; ls -d /mnt/0") == "keep\n/mnt/0\n"


def test_siftool_builds_the_same_file_from_the_same_objects(sifs, tmp_path):
    """`siftool new` + `siftool add` of the kit's three objects: the kit's SIF apart from the
    launch line, the UUID and the times (header and descriptors)."""
    kit_sif = sifs / "a.sif"
    objects = []
    for ident in ("1", "2", "3"):
        path = tmp_path / f"object{ident}"
        path.write_bytes(subprocess.run(
            ["siftool", "dump", ident, str(kit_sif)], capture_output=True, check=True, timeout=60
        ).stdout)  # fmt: skip
        objects.append(path)
    theirs = tmp_path / "theirs.sif"
    siftool("new", theirs)
    siftool("add", theirs, objects[0], "--datatype", "1", "--groupid", "1")
    siftool("add", theirs, objects[1], "--datatype", "3", "--groupid", "1")
    siftool("add", theirs, objects[2], "--datatype", "4", "--parttype", "2", "--partfs", "1",
            "--partarch", "2", "--groupid", "1")  # fmt: skip
    assert _without_ids(theirs.read_bytes()) == _without_ids(kit_sif.read_bytes())


def _without_ids(data: bytes) -> bytes:
    """The file with the launch line, UUID and every time zeroed."""
    raw = bytearray(data)
    raw[0:32] = bytes(32)
    raw[48:64] = bytes(16)
    _TIMES.pack_into(raw, 64, 0, 0)
    for slot in range(3):  # created, modified: the 9th and 10th fields of a descriptor
        _TIMES.pack_into(raw, sif.DESCRIPTORS_AT + slot * sif.DESCRIPTOR.size + 41, 0, 0)
    return bytes(raw)


def test_kit_image_inspect_reads_a_sif(sifs):
    proc = subprocess.run(
        [sys.executable, "-m", "kit", "image", "inspect", "--json", str(sifs / "a.sif")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert (doc["kind"], doc["architecture"]) == ("sif", "amd64")
    assert doc["labels"]["org.example"] == "demo"
    part = doc["objects"][2]
    assert (part["type"], part["partition"], part["filesystem"]) == (
        "partition",
        "primary system",
        "squashfs",
    )
    assert part["size"] == (sifs / "a.sqfs").stat().st_size


def test_the_mpi_reader_reads_a_sif_as_it_reads_its_sqfs(sifs, tmp_path):
    """kit.mpi's image reader (kit mpi pair, kit mpi check) extracts from a SIF's partition, at
    its offset, what it extracts from the same .sqfs; a SIF without its suffix is told by its
    magic."""
    from kit.mpi.imagefs import image_kind, open_image_tree

    def tree(image: Path) -> dict[str, bytes | None]:
        with open_image_tree(image) as t:
            return {
                str(p.relative_to(t.root)): p.read_bytes() if p.is_file() else None
                for p in t.root.rglob("*")
            }

    unnamed = tmp_path / "image"
    unnamed.symlink_to(sifs / "a.sif")
    assert image_kind(unnamed) == "sif"
    got = tree(unnamed)
    assert got == tree(sifs / "a.sqfs") and got["ch/environment"]


# -- the reader, fuzzed ------------------------------------------------------------------------

_PARTITION = b"hsqs" + bytes(4092)
_SMALL = (
    sif.prefix(
        definition=b"Bootstrap: scratch\n",
        labels=b'{"a":"b"}',
        partition_size=len(_PARTITION),
        partition_sha256="0" * 64,
        arch=sif.arch_code("amd64"),
        mtime=1,
    )
    + _PARTITION
)
_TABLE_END = sif.DESCRIPTORS_AT + 3 * sif.DESCRIPTOR.size
# the header, the three used descriptors, the unused ones, the definition and labels
_REGIONS = [(0, 128), (sif.DESCRIPTORS_AT, _TABLE_END), (_TABLE_END, sif.DATA_AT),
            (sif.DATA_AT, sif.DATA_AT + 28)]  # fmt: skip
_TOTAL_AT, _SIZE_AT = 88, 104  # the header's descriptor count and its table's size


def _patched(at: int, fmt: str, value: int) -> bytes:
    raw = bytearray(_SMALL)
    struct.pack_into(fmt, raw, at, value)
    return bytes(raw)


def _parse(data: bytes) -> tuple[sif.Sif | None, str | None, int]:
    """parse() over DATA through a pread that fails the test if asked past the end; the result
    or the one-line error, and how many bytes it read."""
    read = [0]

    def pread(n: int, offset: int) -> bytes:
        assert 0 <= offset and n >= 0 and offset + n <= len(data), (offset, n)
        read[0] += n
        return data[offset : offset + n]

    try:
        return sif.parse(pread, len(data), "x.sif"), None, read[0]
    except KitError as exc:
        return None, str(exc), read[0]


def test_the_reader_reads_the_writers_file():
    found, error, _ = _parse(_SMALL)
    assert error is None and found is not None
    assert [o.type_name for o in found.objects] == ["definition", "labels", "partition"]
    assert (found.labels, found.primary().offset) == ({"a": "b"}, len(_SMALL) - len(_PARTITION))


@given(data=st.data())
@example(data=None)
def test_the_reader_never_crashes_nor_reads_past_a_bound(data):
    """Bytes overwritten in the header, the table or the objects, or the file cut short: a SIF
    whose every object lies inside the file, or one line of error; never a read past the end
    or beyond MAX_READ."""
    raw = bytearray(_SMALL)
    if data is not None:
        for _ in range(data.draw(st.integers(1, 6))):
            lo, hi = data.draw(st.sampled_from(_REGIONS))
            raw[data.draw(st.integers(lo, hi - 1))] = data.draw(st.integers(0, 255))
        raw = raw[: data.draw(st.sampled_from([len(raw)] * 4 + [sif.DATA_AT + 64, 200, 100]))]
    found, error, read = _parse(bytes(raw))
    assert read <= sif.MAX_READ
    if error is not None:
        assert "\n" not in error and error.startswith("x.sif: ") and "; fix: " in error
    else:
        assert found is not None
        assert all(o.offset + o.size <= len(raw) for o in found.objects)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (_patched(_TOTAL_AT, "<q", 1 << 40), "descriptors"),  # a huge table: refused unread
        (_patched(_SIZE_AT, "<q", -585), "descriptor table"),
        (_patched(sif.DESCRIPTORS_AT + 2 * sif.DESCRIPTOR.size + 25, "<q", 1 << 62), "do not fit"),
        (_SMALL[:127], "shorter than its 128-byte header"),
        (b"\0" * 4096, "no SIF_MAGIC"),
    ],
)
def test_hostile_headers_are_refused_in_one_line(data, expected):
    found, error, read = _parse(data)
    assert found is None and error is not None and expected in error
    assert read <= sif.DATA_AT  # the header and at most the table, never an object


def test_a_fifo_is_refused_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "p.sif")
    with pytest.raises(KitError, match="is a FIFO, not a SIF file"):
        sif.read_sif(tmp_path / "p.sif")


def test_an_architecture_sif_cannot_name_is_refused():
    assert sif.arch_code("arm64") == b"04\0"
    with pytest.raises(KitError, match="'sparc': SIF has no code for it"):
        sif.arch_code("sparc")
