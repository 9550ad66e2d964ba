"""The one loader-path rule for the MPICH family (kit.mpi.runtimes): this machine's Debian MPICH 4.0.2
(in the shared system dir /usr/lib/x86_64-linux-gnu, beside the host's libc) as the site's host MPI,
bound into the tests' MPICH image, 2 ranks under ch-run started by MPICH's own mpiexec (hydra); and
Intel MPI's dedicated dir (impi-rt), which keeps going on the path whole. Nothing is mocked."""

import dataclasses

import pytest

from kit.mpi import make_pair, run_check
from kit.mpi.hostlibs import image_sonames, shadowed
from kit.mpi.runtimes import MPICH, OPENMPI
from kit.rootfs import Root
from tests.support.hostmpi import SYSTEM, TARGET

pytestmark = pytest.mark.slow
# the image's; the host's is under /opt/hostmpi/lib0
IMAGE_LIBC = "/usr/lib/x86_64-linux-gnu/libc.so.6"


@pytest.mark.parametrize(
    "name",
    [
        "libmpich.so.12",
        "libmpichcxx.so.12",
        "libmpichfort.so.12",
        "libmpi.so.12",
        "libmpicxx.so.12",
        "libmpifort.so.12",
        "libmpi_ilp64.so.4",
        "libmpi_abi.so.1",
        "libfabric.so.1",
        "libhwloc.so.15",
        "libucp.so.0",
        "libucs.so.0",
        "libpmi2.so.0",
        "libpmix.so.2",
    ],
)
def test_the_mpich_runtime_table_claims_the_mpi_and_its_transports(name):
    assert MPICH.libs.fullmatch(name)


@pytest.mark.parametrize(
    "name",
    [
        "libc.so.6",
        "libm.so.6",
        "libstdc++.so.6",
        "libgfortran.so.5",
        "libz.so.1",
        "libgcc_s.so.1",
        "libpthread.so.0",
        "libmpich.so",
        "libtcp-fi.so",
    ],
)
def test_no_family_claims_the_system_libraries(name):
    assert not MPICH.libs.fullmatch(name) and not OPENMPI.libs.fullmatch(name)


def test_pair_links_only_mpich_and_its_runtime_from_the_system_dir(mpich_host_site, mpich_paired):
    pair = make_pair(mpich_host_site, mpich_paired)
    assert pair.env_prepend == {"LD_LIBRARY_PATH": [f"{TARGET}/compat"]}
    links = {link.removeprefix(f"{TARGET}/compat/"): target for link, target in pair.links.items()}
    # libmpich's closure that must be the host's (hwloc, UCX), and the bindings the image carries
    assert {
        "libmpich.so.12",
        "libhwloc.so.15",
        "libucp.so.0",
        "libucs.so.0",
        "libmpichcxx.so.12",
        "libmpichfort.so.12",
    } <= set(links), links
    assert links["libmpich.so.12"] == f"{TARGET}/lib0/libmpich.so.12.2.2"
    assert not {"libc.so.6", "libm.so.6", "libstdc++.so.6", "libgfortran.so.5", "libz.so.1"} & set(
        links
    )
    assert all(t.startswith(f"{TARGET}/lib0/") for t in links.values())
    assert any(
        r.startswith("the host's library dirs also hold") and "libc.so.6" in r
        for r in pair.verdict.reasons
    )


def test_check_maps_the_hosts_mpich_and_the_images_libc(mpich_host_site, mpich_paired):
    """/proc/self/maps of each rank inside ch-run: libmpich from the bind, libc from the image."""
    result = run_check(make_pair(mpich_host_site, mpich_paired))
    assert result.ok, (result.problems, result.output[-2000:])
    assert [r.rank for r in result.ranks] == [0, 1]
    for r in result.ranks:
        assert r.library_version.startswith("MPICH Version:") and "4.0.2" in r.library_version
        assert r.mapped == [f"{TARGET}/lib0/libmpich.so.12.2.2"] and r.sum == 3
        assert r.libc == [IMAGE_LIBC]


def test_check_fails_when_the_whole_system_dir_is_on_the_loader_path(mpich_host_site, mpich_paired):
    """The old MPICH binding: /usr/lib/x86_64-linux-gnu whole on LD_LIBRARY_PATH gives every rank
    the host's libc, and the check says so."""
    pair = make_pair(mpich_host_site, mpich_paired)
    whole_dir = dataclasses.replace(
        pair, env_prepend={"LD_LIBRARY_PATH": [f"{TARGET}/compat", f"{TARGET}/lib0"]}
    )
    result = run_check(whole_dir, timeout=120)
    assert result.ranks and all(r.libc == [f"{TARGET}/lib0/libc.so.6"] for r in result.ranks), (
        result.output[-2000:]
    )
    assert not result.ok and any(
        "the C library mapped from the host bind" in p for p in result.problems
    )


def test_intel_mpis_dedicated_dir_stays_on_the_path_whole_and_overrides_nothing(
    impi_site, impi_prefix, mpich_image
):
    """impi-rt's lib holds Intel MPI, libfabric and its providers only: whole on the path it overrides
    none of the image's libraries (the system dir would: libc), so the pair keeps it, and the ranks
    run Intel MPI on the image's libc."""
    with Root(mpich_image) as tree:
        image_has = image_sonames(tree)
    assert shadowed([str(impi_prefix / "lib")], image_has, MPICH.libs) == []
    assert "libc.so.6" in shadowed([str(SYSTEM)], image_has, MPICH.libs)
    pair = make_pair(impi_site, mpich_image)
    assert pair.env_prepend == {"LD_LIBRARY_PATH": [f"{TARGET}/compat", f"{TARGET}/lib0"]}
    assert pair.links == {f"{TARGET}/compat/libmpich.so.12": f"{TARGET}/lib0/libmpi.so.12"}
    result = run_check(pair)
    assert result.ok, (result.problems, result.output[-2000:])
    assert all(
        r.libc == [IMAGE_LIBC] and r.mapped == [f"{TARGET}/lib0/libmpi.so.12"] for r in result.ranks
    ), [(r.libc, r.mapped) for r in result.ranks]
