"""An Apptainer site on the two virtual nodes, as root with a SIF image (Apptainer mounts it from a
loop device): `kit mpi check --nodes 2` puts one rank on each node through `srun --mpi=pmi2 …
apptainer exec`, each mapping the cluster's Intel MPI from the bind; and a 1-epoch tiny `gan3d train`
sweep of 2 ranks on 2 nodes goes through `kit scale plan|submit|collect`.

The host MPI is the cluster's Intel MPI runtime started by srun (its vcluster.yaml); the image is the
MPICH test image converted to a SIF paired for this site, with the .current link batch jobs run (what
`kit transfer push --install` leaves). As for Charliecloud, the ranks run this checkout and the
venv's TensorFlow and Horovod, bound in (tests/vcluster/conftest.py); Apptainer passes the job's
environment on."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest
import yaml

from kit import mpi
from kit.cli import main
from tests.support import apptainer
from tests.support.hostmpi import TARGET
from tests.support.parts import require
from tests.support.vcluster_runs import check_crossed

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]
WAIT = 2000  # seconds: a tiny 2-node training on a loaded 2-core machine
IMAGE_LIBC = "/usr/lib/x86_64-linux-gnu/libc.so.6"  # the image's own: no host dir on its path


@pytest.fixture(scope="module")
def apptainer_site(vcluster, tmp_path_factory) -> Path:
    """The cluster's srun site (Intel MPI over libfabric tcp on vc0) with Apptainer as its runtime,
    its own image_dir, the same binds."""
    executable = apptainer.apptainer()  # skip, naming why, where there is none
    srun_site = Path(vcluster.directory) / "vcluster.yaml"
    require(srun_site.is_file(), "no vcluster.yaml: Slurm's PMI-2 library is missing (libpmi2-0)")
    doc = yaml.safe_load(srun_site.read_text())
    doc["name"] = f"{doc['name']}-apptainer"
    doc["container"] = {
        "runtime": "apptainer",
        "image_dir": str(Path(vcluster.directory) / "images" / doc["name"]),
        "binds": doc["container"]["binds"],
        "mpi_target": doc["container"]["mpi_target"],
        "apptainer": {"executable": str(executable)},
    }
    path = tmp_path_factory.mktemp("apptainer-site") / "vcluster-apptainer.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def sif(apptainer_site, mpich_oci) -> Path:
    """`kit image convert IMAGE gan3d.sif --site SITE` of the MPICH test image into the site's
    image_dir, and gan3d.current -> gan3d.sif."""
    from kit.mpi import convert_paired
    from kit.site import load_site

    images = Path(load_site(str(apptainer_site)).container.image_dir)
    images.mkdir(parents=True)
    done = convert_paired(mpich_oci, images / "gan3d.sif", apptainer_site, fmt="sif", level=1)
    assert not done.pair.missing, done.pair.missing
    (images / "gan3d.current").symlink_to("gan3d.sif")
    return images / "gan3d.sif"


def test_kit_mpi_check_puts_an_apptainer_rank_on_each_node(
    on_vcluster, apptainer_site, sif, monkeypatch, capsys
):
    """Through the command line: its verdict, and the result it judged (kept on the way)."""
    results = []
    real = mpi.run_check

    def kept(*args, **kwargs):
        results.append(real(*args, **kwargs))
        return results[-1]

    monkeypatch.setattr(mpi, "run_check", kept)
    monkeypatch.setenv("COLUMNS", "1000")  # the table's header on one line
    argv = ["mpi", "check", "--site", str(apptainer_site), str(sif), "--nodes", "2"]
    code = main([*argv, "--timeout", "600"])
    out = " ".join(capsys.readouterr().out.split())  # rich wraps at the terminal's width
    [result] = results
    print("launch line:", shlex.join(result.command))  # kept in the report (pytest -rP)
    assert code == 0 and "allreduce across 2 nodes is right" in out, out[-3000:]
    assert result.command[:2] == ["srun", "--mpi=pmi2"], result.command
    start = result.command.index(str(apptainer.apptainer()))
    assert result.command[start + 1] == "exec" and str(sif) in result.command[start:]
    assert "MPI library (inside apptainer)" in out
    nodes = [n["name"] for n in on_vcluster.nodes]
    assert [(r.rank, r.host) for r in result.ranks] == list(enumerate(nodes))
    for r in result.ranks:
        assert r.library_version.startswith("Intel(R) MPI Library") and r.size == 2, r
        assert r.libraries == [f"{TARGET}/lib0/libmpi.so.12"], r  # the host's, from the bind
        assert r.libc == [IMAGE_LIBC], r


def test_a_two_node_sweep_trains_through_apptainer(
    on_vcluster, apptainer_site, sif, vc_data, vcluster_work, capsys
):
    """The batch script's srun line starts each rank with `apptainer exec` of gan3d.current (the
    image's environment read through that link from the SIF's partition); Horovod trains across
    the nodes over Intel MPI's tcp provider; the results name the runtime."""
    sweep = vcluster_work / "sweep-apptainer"
    train = (
        *("--data", f"{vc_data[0]},{vc_data[1]}", "--validation-data", str(vc_data[2])),
        *("--preset", "tiny", "--batch-size", "4", "--epochs", "1"),
        *("--steps-per-epoch", "2", "--validation-steps", "1", "--seed", "3"),
    )
    plan = ["scale", "plan", "--site", str(apptainer_site), "--image", str(sif)]
    plan += ["--nodes", "2", "--ranks-per-node", "1", "--python", sys.executable]
    assert main([*plan, "--walltime", "00:15:00", "--dir", str(sweep), "--", *train]) == 0
    assert main(["scale", "submit", str(sweep)]) == 0
    capsys.readouterr()
    collect = ["scale", "collect", str(sweep), "--wait", "--poll", "3", "--timeout", str(WAIT)]
    code = main([*collect, "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["problems"] == 0, [r["problem"] for r in doc["runs"]]
    (run,) = doc["runs"]
    launch = (sweep / "scripts" / f"{run['run']}.sbatch").read_text().splitlines()[-1]
    words = shlex.split(launch)
    assert words[:2] == ["srun", "--mpi=pmi2"] and words[2:4] == [
        str(apptainer.apptainer()),
        "exec",
    ]
    assert str(Path(sif).with_name("gan3d.current")) in words, launch
    result = check_crossed(run, sweep, [n["name"] for n in on_vcluster.nodes], 1)
    assert result["container"] == "apptainer" and result["ranks"] == 2
