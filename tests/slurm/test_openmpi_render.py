"""Batch scripts for an Open MPI site (the shipped openmpi-cluster, 128 nodes it is not): the
rendered launch line is parsed back and its words checked; only the script is tested here."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from kit.cli import main
from kit.mpi import convert_paired
from kit.mpi.pair_reader import read_pair_file
from kit.site import load_site
from kit.slurm import RunFiles, RunSpec, check_run, render
from tests.support.chrun_join import join_tags
from tests.support.hostmpi import OPENMPI_IMAGE_PACKAGES, TARGET
from tests.support.rootfs import debian_rootfs_tar

SITE = load_site("openmpi-cluster")
OMPI = "/opt/openmpi/4.1.5"


@pytest.fixture(scope="module")
def ompi_pair(tmp_path_factory) -> Path:
    """Debian's Open MPI 4.1.4 image converted for the site (host 4.1.5: same series, newer
    release).
    """
    return convert_paired(
        debian_rootfs_tar(OPENMPI_IMAGE_PACKAGES),
        tmp_path_factory.mktemp("pair") / "gan3d.tar",
        SITE,
    ).pair_file


def _launch(script: str) -> list[str]:
    return shlex.split(script.rstrip("\n").splitlines()[-1])


def test_mpirun_maps_ranks_per_node_binds_threads_and_exports_the_jobs_variables(ompi_pair):
    pair = read_pair_file(ompi_pair, SITE)
    run = check_run(SITE, RunSpec("n64", 64, 4, 32, "02:00:00"))
    script = render(SITE, run, RunFiles(Path("/scratch/me/run1"), "n64"), pair=pair)
    words = _launch(script)
    chrun = words.index("ch-run")
    head = words[:chrun]
    assert head[:7] == [
        f"{OMPI}/bin/mpirun",
        "-n",
        "${NRANKS}",
        "--map-by",
        "ppr:${RANKS_PER_NODE}:node:PE=${OMP_NUM_THREADS}",
        "--bind-to",
        "core",
    ]
    exported = [head[i + 1] for i, w in enumerate(head) if w == "-x"]
    assert exported == ["OMP_NUM_THREADS", "TF_CPP_MIN_LOG_LEVEL", "KIT_RUN_ID", "KIT_IMAGE_DIGEST"]
    assert "--allow-run-as-root" not in words  # the site does not allow it
    # ch-run reads OMPI_COMM_WORLD_LOCAL_SIZE; the peer group is the job's own (a killed job's is never met)
    assert words[chrun + 1 : chrun + 4] == ["--join", "--join-tag=${KIT_JOIN_TAG}", "--set-env"]
    # expanded by the batch script's shell before mpirun starts a rank: every rank gets the one value
    [first], [again] = join_tags(script, "9"), join_tags(script, "9")
    assert (
        first.startswith("--join-tag=kit-9-")
        and again.startswith("--join-tag=kit-9-")
        and first != again
    )
    assert (
        f"--bind={OMPI}/lib:{TARGET}/lib0" in words
        and f"--bind=/opt/ucx/1.14.1/lib:{TARGET}/lib1" in words
    )
    assert f"--bind={OMPI}/lib/openmpi:{TARGET}/ompi-components" in words
    assert f"--set-env=OPAL_PKGLIBDIR={TARGET}/ompi-components" in words
    assert f"--set-env=OPAL_PKGDATADIR={TARGET}/ompi-help" in words
    assert not any(w.startswith("--set-env=PMIX_PKGLIBDIR") for w in words)  # PMIx inside Open MPI
    # the MCA parameters reach mpirun from the script and the ranks through ch-run
    assert "export OMPI_MCA_pml=ucx\n" in script and "export OMPI_MCA_btl='^openib,uct'\n" in script
    assert "--set-env=OMPI_MCA_oob_tcp_if_include=ib0" in words
    assert "module load charliecloud openmpi/4.1.5" in script and "SRUN_CPUS_PER_TASK" not in script
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0


def test_hyperthreads_bind_hardware_threads(ompi_pair):
    pair = read_pair_file(ompi_pair, SITE)
    run = check_run(SITE, RunSpec("ht", 2, 4, 64, "01:00:00"))  # 4 x 64 = 256 hardware threads
    assert run.hyperthreads
    words = _launch(render(SITE, run, RunFiles(Path("/scratch/me/ht"), "ht"), pair=pair))
    i = words.index("--map-by")
    assert words[i : i + 5] == [
        "--map-by",
        "ppr:${RANKS_PER_NODE}:node:PE=${OMP_NUM_THREADS}",
        "--use-hwthread-cpus",
        "--bind-to",
        "hwthread",
    ]


def test_srun_with_pmix_starts_open_mpi_ranks_directly(ompi_pair, tmp_path):
    text = Path(SITE.path).read_text().replace("launcher: mpirun ", "launcher: srun   ")
    site_file = tmp_path / "openmpi-cluster.yaml"
    site_file.write_text(text)
    site = load_site(site_file)
    script = render(
        site,
        check_run(site, RunSpec("s", 2, 4, 32, "01:00:00")),
        RunFiles(Path("/scratch/s"), "s"),
        pair=read_pair_file(ompi_pair, site),
    )
    words = _launch(script)
    assert words[:3] == ["srun", "--mpi=pmix", "ch-run"] and words[3] == "--join"
    assert "-x" not in words and "export SRUN_CPUS_PER_TASK=32" in script


def test_cli_dry_run_renders_the_open_mpi_line(ompi_pair, capsys):
    assert (
        main(
            [
                "slurm",
                "render",
                "--site",
                "openmpi-cluster",
                "--image",
                str(ompi_pair),
                "--nodes",
                "2",
                "--ranks-per-node",
                "4",
                "--threads",
                "32",
                "--dir",
                "/scratch/me/dry",
                "--dry-run",
                "--",
                "--data",
                "/scratch/me/calo",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith(f"{OMPI}/bin/mpirun "))
    words = shlex.split(line)
    assert words[words.index("--") + 1 : words.index("--") + 5] == [
        "python3",
        "-m",
        "gan3d",
        "train",
    ]
    assert (
        words[words.index("--data") + 1] == "/scratch/me/calo"
        and not Path("/scratch/me/dry").exists()
    )


def test_paired_where_the_host_open_mpi_is_absent_its_dirs_stay_on_the_loader_path(ompi_pair):
    """Converted outside the perimeter (no /opt/openmpi here): which host libraries libmpi needs is
    unknown, so its library dirs go on LD_LIBRARY_PATH whole, and the pair says so with the fix."""
    import yaml

    doc = yaml.safe_load(ompi_pair.read_text())
    assert doc["env"]["prepend"] == {"LD_LIBRARY_PATH": [f"{TARGET}/lib0", f"{TARGET}/lib1"]}
    assert not any("/compat/" in link for link in doc["links"])
    assert doc["verdict"]["status"] == "accepted with warnings"
    assert any(
        w.startswith("the host's libmpi.so.40 is not in host_mpi.library_dirs on this machine")
        and "fix: make the pair where the site's Open MPI is installed" in w
        for w in doc["verdict"]["warnings"]
    )
