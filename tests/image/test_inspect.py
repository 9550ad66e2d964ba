"""kit image inspect: config, layers, and MPI libraries (SONAME read from the real ELF file)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from hypothesis import example, given, settings
from hypothesis import strategies as st

from kit.mpi.elf import ElfError, open_elf
from kit.mpi.inspect import inspect_image, mpi_libraries
from tests.image.builders import oci_layout, tar_bytes
from tests.support.parts import require

LIBDIR = Path("/usr/lib/x86_64-linux-gnu")
MPICH = LIBDIR / "libmpich.so.12.2.2"


def mpi_tree(root: Path) -> Path:
    """An image tree holding the host's real MPICH library under two names and some links."""
    require(MPICH.is_file(), "libmpich-dev not installed (scripts/setup.sh)")
    lib = root / "usr/lib/x86_64-linux-gnu"
    lib.mkdir(parents=True)
    shutil.copy(MPICH, lib / MPICH.name)
    os.symlink(MPICH.name, lib / "libmpich.so.12")
    os.symlink("libmpich.so.12", lib / "libmpich.so")
    os.symlink("/usr/lib/x86_64-linux-gnu/libmpich.so.12", lib / "libmpi.so.12")
    vendor = root / "opt/vendor/lib"
    vendor.mkdir(parents=True)
    shutil.copy(MPICH, vendor / "libmpi.so.12.5.0")  # file name and SONAME disagree
    (lib / "libmpi_fake.so.1").write_bytes(b"not an ELF file")
    return root


def test_inspect_reports_the_mpi_the_linker_would_load(tmp_path):
    """kit.mpi's answer, the one `kit mpi pair` decides from: one library file with the names the
    linker finds it under; a copy outside the linker's directories (no ld.so.cache names it) is not
    the image's MPI. (Before, inspect had its own scan and listed that copy too.)"""
    libs = mpi_libraries(mpi_tree(tmp_path / "tree"))
    assert [l["path"] for l in libs] == ["/usr/lib/x86_64-linux-gnu/libmpich.so.12.2.2"]
    [mpich] = libs
    assert (mpich["soname"], mpich["version"], mpich["vendor"]) == (
        "libmpich.so.12",
        "12.2.2",
        "mpich",
    )
    assert sorted(mpich["names"]) == [
        "/usr/lib/x86_64-linux-gnu/libmpi.so.12",
        "/usr/lib/x86_64-linux-gnu/libmpich.so.12",
    ]


def test_inspect_layered_image_sees_flattened_tree(tmp_path):
    """A library deleted by a later layer is not reported; config and layers are."""
    tree = mpi_tree(tmp_path / "tree")
    subprocess.run(["tar", "-C", str(tree), "-cf", str(tmp_path / "l0.tar"), "."], check=True)
    top = tar_bytes([("opt/vendor/lib/.wh.libmpi.so.12.5.0", "f", b"")])
    src = oci_layout(
        tmp_path / "img",
        [(tmp_path / "l0.tar").read_bytes(), top],
        env=("PATH=/usr/bin", "MPI=mpich"),
        gzip_layers=False,
    )
    info = inspect_image(src)
    assert info["env"] == ["PATH=/usr/bin", "MPI=mpich"] and info["architecture"] == "amd64"
    assert [l["index"] for l in info["layers"]] == [0, 1]
    assert info["layers"][0]["size"] > 1_000_000
    assert [l["path"] for l in info["mpi_libraries"]] == [
        "/usr/lib/x86_64-linux-gnu/libmpich.so.12.2.2"
    ]
    cli = subprocess.run(
        [sys.executable, "-m", "kit", "image", "inspect", str(src)], capture_output=True, text=True
    )
    assert cli.returncode == 0, cli.stderr
    assert "SONAME libmpich.so.12, version 12.2.2" in cli.stdout and "env MPI=mpich" in cli.stdout
    as_json = subprocess.run(
        [sys.executable, "-m", "kit", "image", "inspect", "--json", str(src)],
        capture_output=True,
        text=True,
    )
    assert json.loads(as_json.stdout)["mpi_libraries"][0]["soname"] == "libmpich.so.12"


def test_names_are_matched_whole():
    """`$` also matches before a trailing newline: a name with one is no image name."""
    import pytest

    from kit.errors import KitError
    from kit.image_names import image_name
    from kit.mpi.discover import MPI_LIB_RE

    assert image_name("gan3d") == "gan3d" and image_name("/x/gan3d.sqfs") == "gan3d"
    for bad in ("gan3d\n", "gan3d\n.sqfs", ".hidden", "a/b"):
        with pytest.raises(KitError, match="image name"):
            image_name(bad)
    assert MPI_LIB_RE.fullmatch("libmpi.so.12") and not MPI_LIB_RE.fullmatch("libmpi.so.12\n")


LIBZ = LIBDIR / "libz.so.1"


@settings(max_examples=max(40, settings.default.max_examples))
@given(
    edits=st.lists(
        st.tuples(st.one_of(st.integers(0, 63), st.integers(-2048, -1)), st.integers(0, 255)),
        min_size=1,
        max_size=8,
    )
)
@example(edits=[(41, 73)])  # e_shoff past 2**63: pyelftools raised OverflowError
def test_soname_of_a_corrupt_elf_is_a_name_or_none(edits):
    """Byte edits in the ELF header and the section headers (at the end of the file)."""
    require(LIBZ.is_file(), "zlib not installed")
    data = bytearray(LIBZ.read_bytes())
    for pos, value in edits:
        data[pos] = value
    with tempfile.TemporaryFile() as fh:  # the reader kit image inspect and kit mpi pair share
        fh.write(bytes(data))
        fh.flush()
        try:
            with open_elf(fh, "libz.so.1") as elf:
                name = elf.facts().soname
        except ElfError:
            return
    assert name is None or isinstance(name, str)
