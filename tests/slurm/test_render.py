"""Batch scripts: what the site allows, what goes into #SBATCH, and how values are quoted.
Rendering for SuperMUC-NG's 768 nodes needs no such machine: only the script is checked."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest

from kit.cli import main
from kit.errors import KitError
from kit.mpi import convert_paired, make_pair, write_pair
from kit.mpi.pair_reader import read_pair_file
from kit.site import load_site
from kit.slurm import RunFiles, RunSpec, check_run, render, write_run
from tests.support.chrun_join import join_tags
from tests.support.hostmpi import TARGET
from tests.support.sites import slurm_site_dict, write_site
from tests.support.training import tiny_train_args

SNG = load_site("supermuc-ng")


@pytest.fixture(scope="module")
def sng_pair(mpich_oci, tmp_path_factory) -> Path:
    """The test MPICH image converted for SuperMUC-NG (its Intel MPI): the pair file convert
    writes.
    """
    return convert_paired(mpich_oci, tmp_path_factory.mktemp("pair") / "gan3d.tar", SNG).pair_file


def _spec(nodes=4, rpn=4, threads=12, **kw) -> RunSpec:
    return RunSpec(
        kw.pop("run_id", f"n{nodes}"), nodes, rpn, threads, kw.pop("walltime", "02:00:00"), **kw
    )


def _last_line(script: str) -> list[str]:
    return shlex.split(script.rstrip("\n").splitlines()[-1])


def test_supermuc_script_binds_the_host_intel_mpi_on_768_nodes(sng_pair, tmp_path):
    pair = read_pair_file(sng_pair, SNG)
    files = RunFiles(Path("/hppfs/work/pr/run1"), "n768")
    script = render(SNG, check_run(SNG, _spec(768, 4, 12, run_id="n768")), files, pair=pair)
    assert (
        "#SBATCH --nodes=768\n#SBATCH --ntasks-per-node=4\n#SBATCH --cpus-per-task=12\n" in script
    )
    assert (
        "#SBATCH --partition=general" in script
        and "#SBATCH --output=/hppfs/work/pr/run1/logs/n768-%j.out" in script
    )
    assert (
        "module load charliecloud mpi.intel/2019" in script
        and "export OMP_NUM_THREADS=12" in script
    )
    words = _last_line(script)
    assert words[:3] == ["/lrz/sys/intel/impi2019u7/impi/2019.7.217/bin/mpiexec", "-n", "${NRANKS}"]
    assert words[3:5] == ["ch-run", "--join-ct=${RANKS_PER_NODE}"]
    assert (
        f"--bind=/lrz/sys/intel/impi2019u7/impi/2019.7.217/intel64/lib/release:{TARGET}/lib0"
        in words
    )
    assert "--set-env=FI_PROVIDER=psm2" in words
    i = words.index("--")
    assert (
        words[i - 1] == "~/images/gan3d.current" and script.count(" ~/images/gan3d.current ") == 1
    )  # ~ expands
    assert words[i + 1 : i + 5] == ["python3", "-m", "gan3d", "train"]
    assert words[words.index("--results") + 1] == "/hppfs/work/pr/run1/results/n768.json"
    assert words[words.index("--ranks") + 1] == "3072"  # 768 x 4: checked by every rank
    # the job start's own peer group: a group a killed job left on a node (ch-run's default tag is the
    # step id, "0" in every job; a job id repeats too) would stop this one
    assert words[5] == "--join-tag=${KIT_JOIN_TAG}"
    [first], [again] = (
        join_tags(script, "4242"),
        join_tags(script, "4242"),
    )  # two starts of job 4242
    assert (
        re.fullmatch(r"--join-tag=kit-4242-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", first)
        and first != again
    )
    assert words[6] == "--set-env"  # the image's ENV first (recipe's PATH), then the pair's
    assert (
        "#SBATCH --hint=nomultithread" in script
    )  # 4 x 12 on whole cores, not 24 cores x 2 threads
    assert (
        "SRUN_CPUS_PER_TASK" not in script
    )  # Hydra starts its proxies with srun: no per-task CPU limit
    assert "export FI_PROVIDER=psm2" in script  # the host launcher sees the host MPI's settings too
    assert script.index("module load") < script.index(
        "set -euo pipefail"
    )  # module scripts break under -u
    assert 'module load charliecloud mpi.intel/2019 || { echo "kit: module load failed' in script
    digest = (sng_pair.parent / "gan3d.tar.sha256").read_text().split()[0]
    assert f"export KIT_IMAGE_DIGEST=sha256:{digest}\n" in script  # the result names the image
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0


def test_hyperthreads_are_allowed_up_to_the_hardware_threads_and_then_refused():
    run = check_run(SNG, _spec(8, 2, 48))  # the paper's Table 2 layout
    assert run.hyperthreads and "hyperthreads" in run.warnings[0]
    script = render(SNG, run, RunFiles(Path("/scratch/r"), "n8"), pair=None)
    assert "#SBATCH --hint=multithread" in script and "--oversubscribe" in _last_line(script)
    assert not check_run(SNG, _spec(8, 4, 12)).hyperthreads
    with pytest.raises(
        KitError, match=r"2 rank\(s\) per node x 49 thread\(s\) = 98.*= 96; fix: --threads 48"
    ):
        check_run(SNG, _spec(8, 2, 49))
    with pytest.raises(KitError, match="fix: at most 96 ranks per node"):
        check_run(SNG, _spec(1, 97, 1))


@pytest.mark.parametrize(
    "spec, message",
    [
        (_spec(769), r"--nodes 769: site supermuc-ng .* allows 1\.\.768 \(scheduler\.max_nodes\)"),
        (
            _spec(walltime="49:00:00"),
            r"--walltime 49:00:00: .* at most 48:00:00 \(scheduler\.max_walltime\)",
        ),
        (
            _spec(train_args=("--threads=4",)),
            r"training arguments --threads=4: the batch script sets",
        ),
        (_spec(run_id="a b"), r"run id 'a b'"),
        (_spec(walltime="2h"), r"--walltime '2h': not a walltime; fix: write HH:MM:SS"),
        (
            _spec(walltime="1\n:00:00"),
            r"--walltime '1\\n:00:00': not a walltime; fix: write HH:MM:SS",
        ),  # would end the #SBATCH block
        (
            _spec(train_args=("--thread", "4")),
            r"training arguments --thread: the batch script sets",
        ),  # a prefix
    ],
)
def test_what_the_site_cannot_run_is_refused_with_the_field(spec, message):
    with pytest.raises(KitError, match=message):
        check_run(SNG, spec)


def test_a_site_without_slurm_has_no_batch_script_but_its_sweeps_run_here():
    laptop = load_site("laptop")
    with pytest.raises(KitError, match="scheduler.type is 'local', not slurm.*`kit scale plan`"):
        check_run(laptop, _spec(1, 1, 1))
    assert check_run(laptop, _spec(1, 1, 2, walltime="00:10:00"), here=True).spec.ranks == 1
    with pytest.raises(KitError, match="--nodes 2: site laptop has no scheduler.*fix: --nodes 1"):
        check_run(laptop, _spec(2, 1, 1, walltime="00:10:00"), here=True)


def test_hostile_values_stay_single_words(tmp_path):
    site = load_site(write_site(tmp_path, slurm_site_dict()))
    evil = "/data/$(touch /tmp/pwned) x;y"
    run = check_run(site, _spec(1, 2, 1, walltime="00:10:00", train_args=("--data", evil)))
    script = render(
        site, run, RunFiles(tmp_path, "r"), pair=None, python="/opt/my python/bin/python"
    )
    words = _last_line(script)
    assert words[:2] == ["srun", "--mpi=pmi2"] and words[2] == "/opt/my python/bin/python"
    assert (
        "export SRUN_CPUS_PER_TASK=1\n" in script and "--hint" not in script
    )  # 1 thread per core here
    assert words[words.index("--data") + 1] == evil
    with pytest.raises(KitError, match="use an absolute path of letters"):
        render(site, run, RunFiles(tmp_path / "my runs", "r"), pair=None)
    bad = slurm_site_dict("badpart")
    bad["scheduler"]["partition"] = "debug\n#SBATCH --uid=0"
    with pytest.raises(
        KitError, match=r"badpart.yaml:\d+: scheduler.partition: .* contains a control character"
    ):
        load_site(
            write_site(tmp_path, bad)
        )  # refused where it is written, not when a job is rendered
    with pytest.raises(KitError, match="scheduler.partition 'debug#x': not a Slurm name"):
        render(
            site,
            check_run(site, _spec(1, 2, 1, walltime="00:10:00", partition="debug#x")),
            RunFiles(tmp_path, "r"),
            pair=None,
        )


def test_container_paths_are_translated_and_the_run_dir_must_be_bound(mpich_system_oci, tmp_path):
    site_doc = slurm_site_dict("boundslurm")
    site_doc["container"]["binds"] = [f"{tmp_path}/work:/work"]
    site = load_site(write_site(tmp_path, site_doc))
    pair_file = convert_paired(mpich_system_oci, tmp_path / "img.tar", site).pair_file
    pair = read_pair_file(pair_file, site)
    run = check_run(
        site,
        _spec(
            1,
            2,
            1,
            walltime="00:10:00",
            train_args=tiny_train_args([tmp_path / "work" / f"f{i}.h5" for i in range(3)]),
        ),
    )
    script = render(site, run, RunFiles(tmp_path / "work" / "sweep", "r"), pair=pair)
    words = _last_line(script)
    train = words[words.index("--") + 1 :]
    assert train[train.index("--data") + 1] == "/work/f0.h5,/work/f1.h5"
    option = render(
        site,
        check_run(
            site,
            _spec(
                1,
                1,
                1,
                walltime="00:10:00",
                train_args=(f"--validation-data={tmp_path}/work/v.h5",),
            ),
        ),
        RunFiles(tmp_path / "work" / "sweep", "r"),
        pair=pair,
    )
    assert "--validation-data=/work/v.h5" in _last_line(option)
    assert train[train.index("--results") + 1] == "/work/sweep/results/r.json"
    assert (
        train[train.index("--site") + 1] == "/work/sweep/scripts/r.site.yaml"
    )  # each run its own copy
    for data in (f"{tmp_path}/elsewhere/f.h5", "calo/f.h5"):  # elsewhere, relative
        with pytest.raises(
            KitError, match=r"training argument --data .*: the container sees only absolute paths"
        ):
            render(
                site,
                check_run(site, _spec(1, 1, 1, walltime="00:10:00", train_args=("--data", data))),
                RunFiles(tmp_path / "work" / "sweep", "r"),
                pair=pair,
            )
    with pytest.raises(
        KitError, match=r"run dir .* is not under any directory img.tar.pair.yaml binds"
    ):
        render(site, run, RunFiles(tmp_path / "elsewhere", "r"), pair=pair)
    with pytest.raises(
        KitError, match=r"key site is 'boundslurm', but the job runs at 'supermuc-ng'"
    ):
        read_pair_file(pair_file, SNG)
    pair_file.write_text("kit_pair: 1\nsite: boundslurm\n")
    with pytest.raises(
        KitError,
        match=r"img.tar.pair.yaml: invalid pair file \(5 problem\(s\)\): "
        r".*img.tar.pair.yaml:1: binds: missing required key",
    ):
        read_pair_file(pair_file, site)


def test_write_run_gives_the_job_the_site_it_was_rendered_from(slurm_site, tmp_path):
    site = load_site(slurm_site)
    files = write_run(
        site,
        check_run(site, _spec(1, 1, 2, run_id="one", walltime="00:10:00")),
        tmp_path / "d",
        pair=None,
    )
    assert (
        files.script.stat().st_mode & 0o111
        and files.site_file.read_text() == slurm_site.read_text()
    )
    assert (files.run_dir / "logs").is_dir() and (files.run_dir / "results").is_dir()


@pytest.mark.parametrize("sub", ["scripts", "logs", "results"])
def test_a_link_at_a_run_directorys_subdirectory_is_refused_and_nothing_written_through_it(
    slurm_site, tmp_path, sub
):
    """scripts/, logs/ and results/ are the kit's (the job writes its log and result there): a link swapped
    in at one of them between two submits is refused in one line, its target left empty."""
    site = load_site(slurm_site)
    run = check_run(site, _spec(1, 1, 2, run_id="one", walltime="00:10:00"))
    write_run(site, run, tmp_path / "d", pair=None)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for p in (tmp_path / "d" / sub).iterdir():
        p.unlink()
    (tmp_path / "d" / sub).rmdir()
    (tmp_path / "d" / sub).symlink_to(elsewhere)
    with pytest.raises(
        KitError, match=f"d/{sub}: is a symlink, not the run directory's {sub}/"
    ) as caught:
        write_run(site, run, tmp_path / "d", pair=None)
    assert "\n" not in str(caught.value) and list(elsewhere.iterdir()) == []


def test_cli_render_dry_run_prints_the_script_and_writes_nothing(slurm_site, tmp_path, capsys):
    rc = main(
        [
            "slurm",
            "render",
            "--site",
            str(slurm_site),
            "--no-container",
            "--ranks-per-node",
            "2",
            "--dir",
            str(tmp_path / "d"),
            "--dry-run",
            "--",
            "--epochs",
            "3",
        ]
    )
    out, err = capsys.readouterr()
    assert rc == 0 and "dry run: nothing written" in err and not (tmp_path / "d").exists()
    assert (
        "#SBATCH --ntasks-per-node=2\n#SBATCH --cpus-per-task=1\n" in out
    )  # 2 cores shared by 2 ranks
    assert _last_line(out)[-2:] == ["--epochs", "3"]
    assert (
        main(["slurm", "render", "--site", "laptop", "--no-container", "--dir", str(tmp_path)]) == 1
    )
    assert "not slurm" in capsys.readouterr().err


def test_a_pair_whose_image_lacks_the_mount_points_is_refused_before_queueing(
    mpich_image, tmp_path
):
    """`kit mpi pair` on an image converted without --site: the binds would fail in every job."""
    pair_file = write_pair(make_pair(SNG, mpich_image), tmp_path / "img.pair.yaml")
    with pytest.raises(
        KitError,
        match=r"key image_ready: the image lacks /opt/hostmpi/lib1, /opt/hostmpi/lib2, "
        r"/hppfs, so its ch-run --bind would fail; fix: convert the source image",
    ):
        read_pair_file(pair_file, SNG)


def test_a_relative_image_in_the_pair_is_taken_from_the_pair_files_directory(
    mpich_image, tmp_path, monkeypatch
):
    """`kit mpi pair` on `gan3d` (a relative path): the job must not depend on where sbatch ran."""
    monkeypatch.chdir(mpich_image.parent)
    pair = make_pair(SNG, mpich_image.name)
    pair.missing = []  # only the image path is under test here; missing mount points are refused above
    pair_file = write_pair(pair, tmp_path / "img.pair.yaml")
    assert read_pair_file(pair_file, SNG).site_image == str(tmp_path / mpich_image.name)
