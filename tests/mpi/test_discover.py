"""MPI discovery in real images of every input kind, without running anything from them."""

import shutil
import subprocess
from pathlib import Path

import pytest

from kit.errors import KitError
from kit.mpi import find_image_mpi, make_pair
from kit.mpi.imagefs import open_image_tree
from tests.support.parts import require

pytestmark = pytest.mark.slow


def _expect_debian_mpich(found):
    lib = found.primary
    assert (lib.vendor, lib.mpi_version, lib.soname, lib.file_version) == (
        "mpich",
        "4.0.2",
        "libmpich.so.12",
        "12.2.2",
    )
    assert found.source == "ld.so.cache"
    assert any(p.endswith("mpi4py/MPI.cpython-311-x86_64-linux-gnu.so") for p in found.users)


def test_directory_image(mpich_image):
    _expect_debian_mpich(find_image_mpi(mpich_image))


def test_squashfs_image(mpich_squash):
    _expect_debian_mpich(find_image_mpi(mpich_squash))


def test_source_oci_archive_through_kit_image(mpich_oci):
    _expect_debian_mpich(find_image_mpi(mpich_oci))
    with open_image_tree(mpich_oci) as tree:  # flattened for the MPI files only, not unpacked whole
        root = tree.root
        assert (root / "etc/ld.so.cache").is_file() and (root / "usr/bin/mpichversion").is_file()
        assert (root / "lib").is_symlink()  # merged /usr: every symlink is kept, paths cross them
        assert not (root / "usr/bin/python3.11").exists() and not (root / "usr/bin/bash").exists()


def test_open_mpi_tarball(openmpi_tar):
    lib = find_image_mpi(openmpi_tar).primary
    assert (lib.vendor, lib.soname, lib.mpi_version) == ("openmpi", "libmpi.so.40", "4.1.4")


def test_without_linker_cache_the_standard_dirs_are_scanned(mpich_image, tmp_path):
    image = tmp_path / "img"
    lib_dir = image / "usr/lib/x86_64-linux-gnu"
    lib_dir.mkdir(parents=True)
    real = mpich_image / "usr/lib/x86_64-linux-gnu/libmpich.so.12.2.2"
    shutil.copy(real, lib_dir / real.name)
    (lib_dir / "libmpich.so.12").symlink_to(real.name)
    found = find_image_mpi(image)
    assert found.source == "library scan"
    assert found.primary.real_path == "/usr/lib/x86_64-linux-gnu/libmpich.so.12.2.2"


def test_open_mpi_image_is_refused_with_what_to_install(impi_site, openmpi_dir):
    with pytest.raises(KitError) as err:
        make_pair(impi_site, openmpi_dir)
    msg = str(err.value)
    assert "openmpi 4.1.4 (libmpi.so.40" in msg and "ABI families differ" in msg
    assert "fix: put an MPICH-ABI MPI with libmpi.so.12" in msg and "minor <= 0" in msg


def test_image_without_mpi_gets_a_clear_message(impi_site, tmp_path):
    image = tmp_path / "busybox"
    (image / "bin").mkdir(parents=True)
    shutil.copy(shutil.which("busybox"), image / "bin/busybox")
    with pytest.raises(KitError, match=r"no MPI library found .*install the MPI"):
        make_pair(impi_site, image)


def test_statically_linked_mpi_is_refused(impi_site, tmp_path):
    archive = Path("/usr/lib/x86_64-linux-gnu/libmpich.a")
    require(archive.is_file() and shutil.which("gcc"), "libmpich-dev / gcc missing")
    image = tmp_path / "static"
    (image / "usr/local/bin").mkdir(parents=True)
    src = tmp_path / "app.c"
    src.write_text(
        "#include <mpi.h>\nint main(int c, char **v) { MPI_Init(&c, &v); return MPI_Finalize(); }\n"
    )
    # A real executable with MPICH's archive linked in (never run: unresolved externals allowed).
    subprocess.run(
        [
            "gcc",
            "-I/usr/include/x86_64-linux-gnu/mpich",
            "-o",
            str(image / "usr/local/bin/mpi_app"),
            str(src),
            str(archive),
            "-Wl,--unresolved-symbols=ignore-all",
        ],
        check=True,
    )
    found = find_image_mpi(image)
    assert found.static == ["/usr/local/bin/mpi_app"] and found.primary is None
    with pytest.raises(KitError, match=r"linked statically into /usr/local/bin/mpi_app"):
        make_pair(impi_site, image)
