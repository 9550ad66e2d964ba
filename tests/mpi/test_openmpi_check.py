"""End to end on one node: this machine's Open MPI 4.1.4 (Debian) as the site's host MPI, bound
into an image whose own Open MPI it replaces, 2 ranks under ch-run started by (a) Open MPI's own
mpirun and (b) the test Slurm's srun --mpi=pmix. The 2-node run is the virtual cluster's test."""

import dataclasses
import shutil

import pytest
import yaml

from kit.cli import main
from kit.errors import KitError
from kit.mpi import make_pair, run_check
from tests.support.hostmpi import TARGET, openmpi_site_dict
from tests.support.parts import require

pytestmark = pytest.mark.slow
COMPONENTS = f"{TARGET}/ompi-components/"
IMAGE_LIBC = "/usr/lib/x86_64-linux-gnu/libc.so.6"  # the image's (bookworm): the host's is under /opt/hostmpi
# Debian's Open MPI 4.1.4: libmpi's closure and its components' that must be the host's
RUNTIME = {
    "libmpi.so.40",
    "libopen-rte.so.40",
    "libopen-pal.so.40",
    "libhwloc.so.15",
    "libevent_core-2.1.so.7",
    "libevent_pthreads-2.1.so.7",
    "libpmix.so.2",
    "libucp.so.0",
    "libucs.so.0",
    "libfabric.so.1",
    "libmpi_cxx.so.40",
    "libmpi_mpifh.so.40",
}  # the last two: bindings the image carries


@pytest.fixture(autouse=True)
def _charliecloud():
    require(
        shutil.which("ch-run") is not None, "ch-run not installed (Debian package charliecloud)"
    )


def _site(tmp_path, name="ompi-variant", **host_mpi):
    site = openmpi_site_dict()
    site["name"] = name
    site["host_mpi"].update(host_mpi)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(site, sort_keys=False))
    return path


def _host_open_mpi_ran(result):
    assert result.ok, (result.problems, result.output[-2000:])
    assert [r.rank for r in result.ranks] == [0, 1]
    for r in result.ranks:
        assert r.library_version.startswith("Open MPI v4.1.4") and r.sum == 3 and r.size == 2
        libs = [m for m in r.mapped if "/mca_" not in m]
        components = [m for m in r.mapped if "/mca_" in m]
        assert libs == [f"{TARGET}/lib0/libmpi.so.40.30.4"]
        assert r.libc == [IMAGE_LIBC]  # the host's Open MPI on the image's C library
        # Open MPI's dlopen'ed parts came from the host's component dir, none from the image's
        assert f"{COMPONENTS}mca_pml_ob1.so" in components and all(
            c.startswith(COMPONENTS) for c in components
        )


def test_pair_binds_the_host_open_mpi_components_help_files_and_pmix(
    openmpi_site, openmpi_image, tmp_path
):
    out = tmp_path / "img.pair.yaml"
    assert (
        main(["mpi", "pair", "--site", str(openmpi_site), str(openmpi_image), "--out", str(out)])
        == 0
    )
    doc = yaml.safe_load(out.read_text())
    assert (doc["container_mpi"]["vendor"], doc["container_mpi"]["version"]) == ("openmpi", "4.1.4")
    assert doc["verdict"]["status"] == "accepted"
    assert "same Open MPI series: host 4.1.4, image 4.1.4" in doc["verdict"]["reasons"]
    assert doc["binds"] == [
        f"/usr/lib/x86_64-linux-gnu:{TARGET}/lib0",
        f"/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3:{TARGET}/ompi-components",
        f"/usr/share/openmpi:{TARGET}/ompi-help",
        f"/usr/lib/x86_64-linux-gnu/pmix2/lib/pmix:{TARGET}/pmix-components",
    ]
    assert doc["env"]["set"] == {
        "OMPI_MCA_btl": "self,vader,tcp",
        "OMPI_MCA_pml": "ob1",
        "OPAL_PKGLIBDIR": f"{TARGET}/ompi-components",
        "OPAL_PKGDATADIR": f"{TARGET}/ompi-help",
        "PMIX_PKGLIBDIR": f"{TARGET}/pmix-components",
        "UCX_MODULE_DIR": f"{TARGET}/lib0/ucx",
    }  # UCX's transports: the host's too
    assert doc["launch"].startswith(
        "/usr/bin/mpirun.openmpi -n ${NRANKS} --map-by "
        "ppr:${RANKS_PER_NODE}:node:PE=${OMP_NUM_THREADS} --bind-to core "
        "--allow-run-as-root -x OMP_NUM_THREADS"
    )
    assert (
        " ch-run --join --join-tag=${KIT_JOIN_TAG} --set-env " in doc["launch"]
        and "--join-ct" not in doc["launch"]
    )
    # only the runtime's libraries are on the loader's path, as links into the bound host dir
    assert doc["env"]["prepend"] == {"LD_LIBRARY_PATH": [f"{TARGET}/compat"]}
    links = {
        link.removeprefix(f"{TARGET}/compat/"): target for link, target in doc["links"].items()
    }
    assert RUNTIME <= set(links), RUNTIME - set(links)
    assert links["libmpi.so.40"] == f"{TARGET}/lib0/libmpi.so.40.30.4"
    assert (
        links["libpmix.so.2"] == f"{TARGET}/lib0/pmix2/lib/libpmix.so.2.6.2"
    )  # Debian's external PMIx
    assert not {"libc.so.6", "libm.so.6", "libstdc++.so.6", "libz.so.1", "libgcc_s.so.1"} & set(
        links
    )
    assert all(t.startswith(f"{TARGET}/lib0/") for t in links.values())


def test_check_under_open_mpis_own_mpirun(openmpi_site, openmpi_image, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")  # one table row per line: nothing folded
    _host_open_mpi_ran(run_check(make_pair(openmpi_site, openmpi_image)))
    assert main(["mpi", "check", "--site", str(openmpi_site), str(openmpi_image)]) == 0
    out = capsys.readouterr().out
    assert "Open MPI v4.1.4" in out and "MCA components from" in out and "PASS" in out
    assert f"C library: {IMAGE_LIBC}" in out


def test_check_under_srun_mpi_pmix(slurm, openmpi_image, tmp_path):
    require(shutil.which("srun") is not None, "Slurm not installed")
    site = openmpi_site_dict("srun")
    site["name"] = "ompi-slurm"
    site["scheduler"] = {
        "type": "slurm",
        "partition": "debug",
        "max_nodes": 1,
        "max_walltime": "00:10:00",
        "mpi_plugin": "pmix",
    }
    path = tmp_path / "ompi-slurm.yaml"
    path.write_text(yaml.safe_dump(site, sort_keys=False))
    _host_open_mpi_ran(run_check(make_pair(path, openmpi_image)))


def test_check_fails_when_the_image_open_mpi_is_what_runs(openmpi_site, openmpi_image):
    pair = make_pair(openmpi_site, openmpi_image)
    unbound = dataclasses.replace(pair, binds=[], links={}, env_prepend={}, env_set={})
    result = run_check(unbound, timeout=60)
    assert not result.ok
    assert any(
        "not from the host bind" in p for p in result.problems
    )  # the image's /usr/lib... mapped


def test_check_fails_when_the_whole_host_dir_is_on_the_loader_path(openmpi_site, openmpi_image):
    """The old binding (the host's /usr/lib/x86_64-linux-gnu on LD_LIBRARY_PATH): the ranks then run
    on the host's libc beside the image's loader, and the check says so."""
    pair = make_pair(openmpi_site, openmpi_image)
    whole_dir = dataclasses.replace(pair, env_prepend={"LD_LIBRARY_PATH": [f"{TARGET}/lib0"]})
    result = run_check(whole_dir, timeout=120)
    assert result.ranks and all(r.libc == [f"{TARGET}/lib0/libc.so.6"] for r in result.ranks), (
        result.output[-2000:]
    )
    assert not result.ok and any(
        "the C library mapped from the host bind" in p for p in result.problems
    )


def test_mpirun_as_root_only_where_the_site_allows_it(openmpi_image, tmp_path):
    site = _site(
        tmp_path, openmpi={**openmpi_site_dict()["host_mpi"]["openmpi"], "allow_run_as_root": False}
    )
    result = run_check(make_pair(site, openmpi_image), timeout=60)
    assert not result.ok and "--allow-run-as-root" not in result.command
    assert "root" in result.output  # mpirun's own refusal


def test_a_host_older_than_the_image_is_refused_with_the_fix(openmpi_image, tmp_path):
    site = _site(tmp_path, version="4.0.7")
    with pytest.raises(
        KitError,
        match=r"the host's Open MPI 4\.0\.7 is older than the image's 4\.1\.4: .*fix: "
        r"put Open MPI 4\.0\.x \(the host's major",
    ):
        make_pair(site, openmpi_image)


def test_a_two_node_check_needs_slurm_and_two_nodes_is_the_most(
    openmpi_site, openmpi_image, monkeypatch, capsys
):
    """Refused before anything starts: the one-node site has no Slurm to reach a second node."""
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    pair = make_pair(openmpi_site, openmpi_image)
    with pytest.raises(
        KitError, match=r"site ompi-host: a 2-node check needs Slurm .*; fix: .*--nodes 1"
    ):
        run_check(pair, nodes=2)
    with pytest.raises(KitError, match=r"--nodes 3: the check runs 2 ranks; fix: give one of 1, 2"):
        run_check(pair, nodes=3)
    with pytest.raises(SystemExit) as usage:
        main(["mpi", "check", "--site", str(openmpi_site), str(openmpi_image), "--nodes", "3"])
    assert usage.value.code == 2 and "give a number from 1 to 2" in capsys.readouterr().err
