"""An image whose linker cache lists the MPI library under hundreds of names (libmpi.so.0,
libmpi.so.1, ...: each a valid MPI name, all leading to this machine's real 40 MB MPICH): the
reader looks at a bounded number of them, reads the file once, says what it left out, and
still pairs the image. (A full read of the library per name would be unbounded: a 16 MiB cache holds
half a million names.)"""

from __future__ import annotations

import os

from kit.mpi import find_image_mpi, make_pair
from kit.mpi.discover import MAX_MPI_NAMES
from tests.mpi.hostile import LIB_DIR, cache_bytes, mpich_tree, site_file


def test_a_cache_listing_the_library_under_hundreds_of_names_is_bounded(tmp_path):
    image = mpich_tree(tmp_path / "img")
    lib = image / LIB_DIR
    os.link(lib / "libmpich.so.12.2.2", lib / "libmpich.so.99")  # a hard link: the same file again
    names = [b"libmpich.so.12", b"libmpich.so.99"] + [
        b"libmpi.so.%d" % i for i in range(MAX_MPI_NAMES + 40)
    ]
    entries = [
        (
            n,
            f"/{LIB_DIR}/{'libmpich.so.99' if n == b'libmpich.so.99' else 'libmpich.so.12'}".encode(),
        )
        for n in names
    ]
    (image / "etc/ld.so.cache").write_bytes(cache_bytes(entries))

    found = find_image_mpi(image)
    assert found.source == "ld.so.cache"
    assert len(found.libraries) == MAX_MPI_NAMES
    assert (
        f"{len(names)} MPI library names listed (ld.so.cache); only the first {MAX_MPI_NAMES} were looked at"
        in found.notes
    )
    assert {lib.real_path for lib in found.libraries} == {
        f"/{LIB_DIR}/libmpich.so.12.2.2",
        f"/{LIB_DIR}/libmpich.so.99",
    }
    assert {(lib.vendor, lib.soname) for lib in found.libraries} == {("mpich", "libmpich.so.12")}
    assert (
        found.libraries[0].name == "libmpich.so.12" and found.libraries[0].file_version == "12.2.2"
    )
    pair = make_pair(site_file(tmp_path), image)
    assert pair.verdict.ok and pair.container.soname == "libmpich.so.12"
