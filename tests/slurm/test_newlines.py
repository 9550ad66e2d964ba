"""Every value that reaches a batch script, with a line break at its end or inside it, is refused
with one KitError line: sbatch stops reading #SBATCH at the first line that is no comment, and a
value split over two lines can end the block early or start a directive or a command of its own."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kit.errors import KitError
from kit.site import load_site
from kit.slurm import RunFiles, RunSpec, check_run, render
from tests.support.sites import slurm_site_dict

BREAKS = ("\n", "\n#SBATCH --uid=0", "\r", "\u2028", "\x85")


def _site(key: str, value: str) -> dict:
    site = slurm_site_dict("nl")
    site["scheduler"]["constraint"] = "skx"
    site["scheduler"]["account"] = "pr1"
    site["modules"] = ["charliecloud"]
    site["host_mpi"]["env"] = {"FI_PROVIDER": "psm2"}
    if key == "modules":
        site["modules"].append(value)
    elif key == "env.name":
        site["host_mpi"]["env"][value] = "1"
    elif key == "env.value":
        site["host_mpi"]["env"]["FI_PROVIDER"] = value
    else:
        section, _, leaf = key.rpartition(".")
        (site[section] if section else site)[leaf] = value
    return site


SITE_FIELDS = {  # key: a clean value it may take
    "name": "nl",
    "scheduler.partition": "debug",
    "scheduler.account": "pr1",
    "scheduler.constraint": "skx",
    "scheduler.max_walltime": "00:20:00",
    "modules": "mpi.intel/2019",
    "env.name": "I_MPI_FABRICS",
    "env.value": "shm:ofi",
    "host_mpi.launcher": "srun",
    "host_mpi.prefix": "/usr",
}
RUN_FIELDS = {
    "run_id": "r1",
    "walltime": "00:10:00",
    "partition": "debug",
    "account": "pr1",
    "python": "/usr/bin/python3",
    "train_args": "--epochs",
    "run_dir": "/scratch/runs",
}


def _script(tmp_path: Path, site: dict, **run) -> str:
    """Load, check and render as `kit slurm render` does; KitError on any refusal."""
    path = tmp_path / "nl.yaml"  # not named after the (broken) site name
    path.write_text(yaml.safe_dump(site))
    loaded = load_site(path)
    spec = RunSpec(
        run.get("run_id", "r1"),
        1,
        1,
        1,
        run.get("walltime", "00:10:00"),
        (run.get("train_args", "--epochs"), "1"),
        run.get("partition"),
        run.get("account"),
    )
    return render(
        loaded,
        check_run(loaded, spec),
        RunFiles(Path(run.get("run_dir", "/scratch/runs")), spec.run_id),
        pair=None,
        python=run.get("python", "python3"),
    )


def _outcome(tmp_path: Path, site: dict, **run) -> str:
    try:
        _script(tmp_path, site, **run)
    except KitError as exc:
        assert "\n" not in str(exc) and "\r" not in str(exc), (
            f"error message of {len(str(exc).splitlines())} lines"
        )
        return "refused"
    return "rendered"


@pytest.mark.parametrize("brk", BREAKS, ids=repr)
def test_every_batch_script_field_with_a_line_break_is_refused(tmp_path, brk):
    for (
        key,
        value,
    ) in SITE_FIELDS.items():  # each field's clean value renders: the break is what is refused
        assert _outcome(tmp_path, _site(key, value)) == "rendered", key
    for key, value in RUN_FIELDS.items():
        assert _outcome(tmp_path, _site("name", "nl"), **{key: value}) == "rendered", key
    accepted = []
    for key, value in SITE_FIELDS.items():
        for broken in (value + brk, value[:1] + brk + value[1:]):
            if key == "env.name" and brk == "\n":
                broken = broken.replace("\n", "_\n")  # still not a name either way
            if _outcome(tmp_path, _site(key, broken)) != "refused":
                accepted.append((key, broken))
    for key, value in RUN_FIELDS.items():
        for broken in (value + brk, value[:1] + brk + value[1:]):
            if _outcome(tmp_path, _site("name", "nl"), **{key: broken}) != "refused":
                accepted.append((key, broken))
    assert accepted == []


def test_refusals_name_the_field(tmp_path):
    cases = [
        ({"run_id": "r1\n"}, "run id 'r1\\n'"),
        ({"walltime": "00:10:00\n"}, "--walltime '00:10:00\\n'"),
        ({"partition": "debug\n"}, "partition 'debug\\n': not a Slurm name"),
        ({"run_dir": "/scratch/runs\n"}, "run dir '/scratch/runs\\n'"),
        ({"python": "python3\n"}, "--python 'python3\\n' contains a control character"),
        (
            {"train_args": "--epochs\n"},
            "training argument '--epochs\\n' contains a control character",
        ),
    ]
    for run, words in cases:
        with pytest.raises(KitError) as err:
            _script(tmp_path, _site("name", "nl"), **run)
        assert words in str(err.value)
    with pytest.raises(
        KitError, match=r"nl.yaml:\d+: modules: 'mpi\\nx' contains a control character"
    ):
        _script(tmp_path, _site("modules", "mpi\nx"))
