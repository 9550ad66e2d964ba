"""`kit mpi pair` on hostile images: links that climb out of the image (a chain of harmless
looking relative links, or absolute ones), FIFOs, link loops, overlong link targets and names
that are not UTF-8. Nothing outside the image is created, changed or read as the image's,
nothing blocks, and each run ends in a result or one clean error line (exit 0 or 1, never 70).
The images hold the real MPICH library of this machine; the CLI runs as a subprocess with a
time limit, so a hang fails the test instead of stopping the suite."""

from __future__ import annotations

import lzma
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from tests.mpi.hostile import (
    LIB_DIR,
    SYSTEM_MPICH,
    as_squash,
    as_tar,
    links,
    mpich_tree,
    site_file,
    snapshot,
)

REPO = Path(__file__).resolve().parents[2]  # the CLI under test is this checkout's
TARGET = "/opt/hostmpi"
LINK = f"{TARGET}/compat/libmpich.so.12"
ESC = "d/esc/.."  # from an image root at tmp/tmp/NAME: d/esc is tmp/tmp, d/esc/.. is tmp


@pytest.fixture
def canary(tmp_path) -> Path:
    """A host directory that looks like what the image's links want: a linker cache, and the
    pair's mount point and alias link (so reading through an escape would look "ready")."""
    host = tmp_path / "host"
    (host / "etc").mkdir(parents=True)
    (host / "etc/passwd").write_text("root:x:0:0::/root:/bin/sh\n")
    (host / "etc/ld.so.cache").write_bytes(Path("/etc/ld.so.cache").read_bytes())
    (host / "hostmpi/lib0").mkdir(parents=True)
    (host / "hostmpi/compat").mkdir()
    (host / "hostmpi/compat/libmpich.so.12").symlink_to("../lib0/libmpi.so.12")
    return host


def escapes(style: str, canary: Path) -> dict[str, str]:
    if style == "chain":  # each link alone stays inside the image, read lexically
        return {
            "d/up": "..",
            "d/esc": "up/..",
            "opt": f"{ESC}/host",
            "etc/ld.so.cache": f"../{ESC}/host/etc/ld.so.cache",
        }
    return {"opt": str(canary), "etc/ld.so.cache": str(canary / "etc/ld.so.cache")}


def kit(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """The real CLI; temp dirs (where tarballs are extracted) at tmp/tmp, beside the image."""
    env = dict(
        os.environ,
        TMPDIR=str(tmp_path / "tmp"),
        KIT_CRASH_DIR=str(tmp_path / "crash"),
        COLUMNS="500",
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    )
    (tmp_path / "tmp").mkdir(exist_ok=True)
    run = subprocess.run(
        [sys.executable, "-m", "kit", *args], capture_output=True, text=True, env=env, timeout=300
    )
    assert run.returncode in (0, 1), f"exit {run.returncode}: {run.stderr}"
    assert "Traceback" not in run.stderr and "internal error" not in run.stderr, run.stderr
    return run


def pair_doc(
    tmp_path: Path, image: Path, *extra: str
) -> tuple[subprocess.CompletedProcess, dict | None]:
    out = tmp_path / "out.pair.yaml"
    run = kit(
        tmp_path,
        "mpi",
        "pair",
        "--site",
        str(site_file(tmp_path)),
        str(image),
        "--out",
        str(out),
        *extra,
    )
    return run, (yaml.safe_load(out.read_text()) if run.returncode == 0 else None)


def image_of(kind: str, tmp_path: Path, table: dict[str, str], extra=()) -> Path:
    tree = mpich_tree(tmp_path / "tmp" / "img")
    links(tree, table)
    if kind == "dir":
        return tree
    if kind == "tar":
        return as_tar(tree, tmp_path / "img.tar", extra)
    return as_squash(tree, tmp_path / "img.sqfs")


def member(
    name: str, kind: str, data: bytes = b"", linkname: str = ""
) -> tuple[tarfile.TarInfo, bytes | None]:
    info = tarfile.TarInfo(name)
    info.type = {"d": tarfile.DIRTYPE, "f": tarfile.REGTYPE, "l": tarfile.SYMTYPE}[kind]
    info.mode, info.size, info.linkname = 0o755, len(data), linkname
    return info, data if kind == "f" else None


WRITE_THROUGH = [
    member("./opt/hostmpi/lib0", "d"),
    member("./opt/mpi/pwned.so", "f", b"pwned"),
    member("./opt/etc/passwd", "f", b"pwned"),
]


@pytest.mark.parametrize("style", ["chain", "absolute"])
@pytest.mark.parametrize("kind", ["dir", "tar", "sqfs"])
def test_links_out_of_the_image_are_resolved_inside_it(tmp_path, canary, kind, style):
    image = image_of(kind, tmp_path, escapes(style, canary), WRITE_THROUGH)
    before = snapshot(canary)
    run, doc = pair_doc(tmp_path, image)
    assert snapshot(canary) == before
    assert run.returncode == 0, run.stderr
    # the host's linker cache is not taken for the image's: the image has none of its own
    assert doc["container_mpi"]["found_via"] == "library scan"
    assert doc["container_mpi"]["library"] == f"/{LIB_DIR}/libmpich.so.12"
    # the host's mount point and link, reached through the image's links, do not count; the
    # tarball's own opt/hostmpi/lib0 member went where the chroot would put it: inside
    lib0 = [] if kind == "tar" else [f"{TARGET}/lib0"]
    assert doc["image_ready"] == {
        "ok": False,
        "missing": lib0 + [f"{LINK} -> {TARGET}/lib0/libmpi.so.12"],
    }


@pytest.mark.parametrize("style", ["chain", "absolute"])
def test_prepare_creates_inside_the_image_only(tmp_path, canary, style):
    table = {
        name: target for name, target in escapes(style, canary).items() if name != "etc/ld.so.cache"
    }
    image = image_of("dir", tmp_path, table)
    before = snapshot(canary)
    run, doc = pair_doc(tmp_path, image, "--prepare")
    assert run.returncode == 0, run.stderr
    assert snapshot(canary) == before
    # /opt resolved the way ch-run's chroot sees it: inside the image
    inside = image / ("host" if style == "chain" else str(canary).lstrip("/")) / "hostmpi"
    assert (inside / "lib0").is_dir() and not (inside / "lib0").is_symlink()
    assert os.readlink(inside / "compat/libmpich.so.12") == "../lib0/libmpi.so.12"
    run, doc = pair_doc(tmp_path, image)
    assert doc["image_ready"] == {"ok": True, "missing": []}
    assert snapshot(canary) == before


def test_a_later_tar_member_replaces_a_link_instead_of_writing_through_it(tmp_path, canary):
    """tar semantics (a later member wins) without tar's old hole: the first member is a link to
    a host file, the second a file of the same name; the link is replaced, the host file kept."""
    tree = mpich_tree(tmp_path / "tmp" / "img")
    lib = f"./{LIB_DIR}/{SYSTEM_MPICH.name}"
    os.unlink(tree / lib)
    tar = as_tar(
        tree,
        tmp_path / "img.tar",
        [
            member(lib, "l", linkname=str(canary / "etc/passwd")),
            member(lib, "f", SYSTEM_MPICH.read_bytes()),
        ],
    )
    before = snapshot(canary)
    run, doc = pair_doc(tmp_path, tar)
    assert snapshot(canary) == before
    assert run.returncode == 0, run.stderr
    assert doc["container_mpi"]["real_file"] == f"/{LIB_DIR}/{SYSTEM_MPICH.name}"


def test_prepare_refuses_a_file_where_the_alias_link_goes(tmp_path):
    image = mpich_tree(tmp_path / "tmp" / "img")
    (image / "opt/hostmpi/compat").mkdir(parents=True)
    (image / "opt/hostmpi/compat/libmpich.so.12").write_text("the image's own file\n")
    run, _doc = pair_doc(tmp_path, image, "--prepare")
    assert run.returncode == 1
    assert (
        "/opt/hostmpi/compat/libmpich.so.12 is already a file in the image; fix: remove it"
        in run.stderr
    )
    assert (image / "opt/hostmpi/compat/libmpich.so.12").read_text() == "the image's own file\n"


def test_fifos_where_files_are_expected_are_not_opened(tmp_path):
    image = mpich_tree(tmp_path / "tmp" / "img")
    (image / "var/lib/dpkg").mkdir(parents=True)
    (image / LIB_DIR / "mpich").mkdir()
    for fifo in (
        "etc/ld.so.cache",
        "var/lib/dpkg/status",
        f"{LIB_DIR}/mpich/libfifo.so",
        f"{LIB_DIR}/libmpi.so.12",
    ):
        os.mkfifo(image / fifo)
    run, doc = pair_doc(tmp_path, image)
    assert run.returncode == 0, run.stderr
    assert doc["container_mpi"]["library"] == f"/{LIB_DIR}/libmpich.so.12"
    out = " ".join(run.stdout.split())
    assert f"/{LIB_DIR}/mpich/libfifo.so: not a regular file; not opened" in out
    assert "/etc/ld.so.cache is a FIFO, not a regular file" in out


def test_an_image_that_is_a_fifo_is_refused(tmp_path):
    fifo = tmp_path / "img"
    os.mkfifo(fifo)
    run, _doc = pair_doc(tmp_path, fifo)
    assert run.returncode == 1 and "not a directory or a regular file" in run.stderr


def test_link_loops_and_dangling_links_beside_the_library(tmp_path):
    image = mpich_tree(tmp_path / "tmp" / "img")
    links(
        image,
        {
            f"{LIB_DIR}/libmpich.so.12.2.2.1": "libmpich.so.12.2.2.1",  # a loop
            f"{LIB_DIR}/libmpich.so.12.2.2.9": "nowhere",  # dangling
            "usr/lib/mpi-loop/a": "b",
            "usr/lib/mpi-loop/b": "a",
        },
    )
    run, doc = pair_doc(tmp_path, image)
    assert run.returncode == 0, run.stderr
    assert doc["container_mpi"]["abi_version"] == "12.2.2"


def test_overlong_link_target_in_a_tarball_is_skipped_with_a_note(tmp_path):
    image = mpich_tree(tmp_path / "tmp" / "img")
    longs = [member(f"./usr/lib/mpi-long{i}", "l", linkname="x/" * 3000) for i in range(150)]
    tar = as_tar(image, tmp_path / "img.tar", longs)
    run, doc = pair_doc(tmp_path, tar)
    assert run.returncode == 0, run.stderr
    assert doc["container_mpi"]["library"] == f"/{LIB_DIR}/libmpich.so.12"
    notes = [line.strip() for line in run.stdout.splitlines() if line.strip().startswith("note:")]
    assert notes[0].startswith("note: skipped member usr/lib/mpi-long0 of img.tar: ")
    assert len(notes) == 101 and notes[-1] == "note: (more skipped files not listed)"  # bounded


def test_names_that_are_not_utf8_are_skipped_with_a_note(tmp_path):
    image = mpich_tree(tmp_path / "tmp" / "img")
    odd = image / LIB_DIR / os.fsdecode(b"mpi\xff")
    odd.mkdir()
    (odd / "libmpichcxx.so.12").write_bytes(
        SYSTEM_MPICH.with_name("libmpichcxx.so.12").read_bytes()
    )
    run, doc = pair_doc(tmp_path, image)
    assert run.returncode == 0, run.stderr
    assert doc["container_mpi"]["used_by"] == []
    assert f"/{LIB_DIR}/mpi\\udcff/libmpichcxx.so.12: its name is not UTF-8; skipped" in run.stdout


@pytest.mark.parametrize(
    "version", ["unsquashfs version 4.4 (2019/08/29)", None], ids=["old", "missing"]
)
def test_squashfs_needs_an_unsquashfs_that_stays_in_its_destination(tmp_path, version):
    """squashfs-tools before 4.5.1 can be made to write outside -d; such a tool (here a script
    that answers -version like 4.4 would, first on PATH) or none at all is refused by name."""
    image = image_of("sqfs", tmp_path, {})
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if version:
        fake = bin_dir / "unsquashfs"
        fake.write_text(f"#!/bin/sh\necho '{version}'\n")
        fake.chmod(0o755)
    out = tmp_path / "out.pair.yaml"
    env = dict(
        os.environ,
        PATH=str(bin_dir),
        TMPDIR=str(tmp_path / "tmp"),
        KIT_CRASH_DIR=str(tmp_path / "crash"),
        PYTHONPATH=str(REPO),
    )
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "kit",
            "mpi",
            "pair",
            "--site",
            str(site_file(tmp_path)),
            str(image),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert run.returncode == 1, run.stderr
    expected = (
        "unsquashfs 4.4.0 can write outside its destination" if version else "unsquashfs not found"
    )
    assert expected in run.stderr and "squashfs-tools >= 4.5.1" in run.stderr
    assert not out.exists()


def test_a_corrupt_compressed_tarball_is_one_clean_line(tmp_path):
    """tarfile tries every compression and reports each failure on a line of its own."""
    tree = tmp_path / "tree"
    (tree / "etc").mkdir(parents=True)
    (tree / "etc/mpi.conf").write_bytes(os.urandom(4096))
    data = bytearray(lzma.compress(as_tar(tree, tmp_path / "img.tar").read_bytes(), preset=0))
    data[200] ^= 0xFF  # inside the first block: the xz check fails
    image = tmp_path / "img.tar.xz"
    image.write_bytes(bytes(data))
    run, _doc = pair_doc(tmp_path, image)
    assert run.returncode == 1
    assert run.stderr.count("\n") == 1 and f"{image}: cannot read the tarball: " in run.stderr


@pytest.mark.timeout(120)
@pytest.mark.parametrize("compress", ["plain", "gzip", "pax"])
def test_a_negative_tar_size_is_refused_as_kit_image_refuses_it(tmp_path, compress):
    """A member whose size field (base-256, or a pax `size` record) is negative sends tarfile's next
    header backwards: an endless loop. pair reads tarballs through kit.tarsafe, the reader of `kit
    image convert` and `inspect`, and refuses it in one line, naming the byte offset."""
    import gzip

    from tests.image import rawtar

    head = [
        rawtar.member("etc", kind="d"),
        rawtar.member("etc/ld.so.conf", b"include /etc/ld.so.conf.d/*.conf\n"),
    ]
    if compress == "pax":
        forged = rawtar.pax_member("opt/mpi.txt", rawtar.pax_record("size", b"-2048"))
    else:
        forged = rawtar.with_size_field(rawtar.member("opt/mpi.txt", b""), rawtar.base256(-1536))
    data = rawtar.archive(*head, forged)
    image = tmp_path / ("img.tar.gz" if compress == "gzip" else "img.tar")
    image.write_bytes(gzip.compress(data) if compress == "gzip" else data)
    run, _doc = pair_doc(tmp_path, image)
    assert run.returncode == 1 and run.stderr.count("\n") == 1, run.stderr
    assert f"{image}: cannot read the tarball: " in run.stderr and "negative" in run.stderr, (
        run.stderr
    )
    assert not (tmp_path / "out.pair.yaml").exists()
