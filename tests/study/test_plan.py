"""`kit study plan`: everything checked before anything runs; DIR written only when new or empty."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil

import pytest
import yaml

from kit.cli import main
from kit.errors import KitError
from kit.study import ledger
from kit.study.studydir import SPEC_NAME, plan_study
from tests.support.sites import slurm_site_dict, write_site
from tests.support.studies import study_yaml

PARAMS = {"lr": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True}}


def test_plan_copies_the_spec_and_starts_an_empty_ledger(showers, tmp_path):
    spec = study_yaml(tmp_path, showers, "random", 3, PARAMS)
    d = tmp_path / "s"
    assert main(["study", "plan", str(spec), "--dir", str(d), "--site", "laptop", "--dry-run"]) == 0
    assert not d.exists()
    assert (
        main(["study", "plan", str(spec), "--dir", str(d), "--site", "laptop", "--parallel", "3"])
        == 0
    )
    assert (d / SPEC_NAME).read_bytes() == spec.read_bytes()
    led = ledger.read(d)
    assert (
        not led.evaluations and led.header["parallel"] == 3 and led.header["site_name"] == "laptop"
    )
    assert led.header["objective"] == "validation.g_loss" and led.header["direction"] == "minimize"


def test_plan_never_writes_into_a_directory_it_did_not_make(showers, tmp_path, capsys):
    spec = study_yaml(tmp_path, showers, "random", 3, PARAMS)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    assert main(["study", "plan", str(spec), "--dir", str(mine), "--site", "laptop"]) == 1
    err = capsys.readouterr().err
    assert "holds notes.txt, which kit study did not make" in err and err.count("\n") == 1
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]
    d = tmp_path / "s"
    plan_study(spec, "laptop", d)
    before = (d / ledger.NAME).read_bytes()
    with pytest.raises(KitError, match="a study is planned there already; fix: kit study run"):
        plan_study(spec, "laptop", d)
    assert (d / ledger.NAME).read_bytes() == before


def test_what_the_site_cannot_do_is_refused_before_anything_runs(showers, tmp_path):
    spec = study_yaml(tmp_path, showers, "random", 3, PARAMS)
    with pytest.raises(KitError, match="--pilot 1: site laptop has no Slurm"):
        plan_study(spec, "laptop", tmp_path / "a", pilot=1)
    slurm = write_site(tmp_path, slurm_site_dict())
    with pytest.raises(KitError, match="--pilot 2: site localslurm allows 1..1 nodes"):
        plan_study(spec, str(slurm), tmp_path / "b", pilot=2)
    wide = study_yaml(
        tmp_path,
        showers,
        "random",
        3,
        {"ranks-per-node": {"type": "choice", "values": [4]}},
        file="wide.yaml",
    )
    with pytest.raises(
        KitError, match=r"4 rank\(s\) per node x 1 thread\(s\) = 4, but a localslurm node has 2"
    ):
        plan_study(wide, str(slurm), tmp_path / "d", walltime="00:10:00")
    with pytest.raises(KitError, match="--walltime 02:00:00: .* allows at most 00:20:00"):
        plan_study(spec, str(slurm), tmp_path / "e", walltime="02:00:00")
    assert not any((tmp_path / n).exists() for n in "abde")


def test_commands_on_a_directory_without_a_study_are_one_line(tmp_path, capsys):
    for argv in (
        ["run", str(tmp_path)],
        ["status", str(tmp_path)],
        ["report", str(tmp_path)],
        ["cancel", str(tmp_path)],
    ):
        assert main(["study", *argv]) == 1
        err = capsys.readouterr().err
        assert "no study here; fix: kit study plan" in err and err.count("\n") == 1, argv


def test_status_json_of_a_planned_study(showers, tmp_path, capsys):
    spec = study_yaml(tmp_path, showers, "random", 3, PARAMS)
    d = tmp_path / "s"
    plan_study(spec, "laptop", d)
    ledger.append(d, "proposed", eval="e0001", config={"lr": 0.001})
    ledger.append(d, "finished", eval="e0001", objective=5.0)
    ledger.append(d, "proposed", eval="e0002", config={"lr": 0.002})
    ledger.append(d, "finished", eval="e0002", objective=3.0)
    capsys.readouterr()
    assert main(["study", "status", str(d), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "kit-study-status/1" and doc["best"] == {
        "eval": "e0002",
        "objective": 3.0,
    }
    assert [e["state"] for e in doc["evaluations"]] == ["finished", "finished"] and doc["done"] == 2


def test_cancel_stops_a_local_evaluations_whole_process_group_and_marks_it(
    showers, tmp_path, capsys
):
    """The evaluation here runs `sleep` under kit.study.evalproc (a training would only be slower):
    cancel finds the lock holder through /proc/locks and ends its process group, children included."""
    import subprocess
    import sys
    import time

    from kit.study import evalproc

    spec = study_yaml(tmp_path, showers, "random", 3, PARAMS)
    d = tmp_path / "s"
    plan_study(spec, "laptop", d)
    ledger.append(d, "proposed", eval="e0001", config={"lr": 0.001})
    e = d / "evals" / "e0001"
    e.mkdir(parents=True)
    (e / evalproc.PLAN).write_text(json.dumps({"commands": [["sh", "-c", "sleep 300 & wait"]]}))
    proc = subprocess.Popen(
        [sys.executable, "-m", "kit.study.evalproc", str(e)], start_new_session=True
    )
    ledger.append(d, "submitted", eval="e0001", how="local", pid=proc.pid)
    deadline = time.monotonic() + 60
    while not evalproc.is_running(e) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert evalproc.is_running(e)
    assert main(["study", "cancel", str(d), "--dry-run"]) == 0
    assert (
        "would cancel e0001" in capsys.readouterr().out
        and ledger.read(d).evaluations["e0001"].state == "submitted"
    )
    assert main(["study", "cancel", str(d)]) == 0
    assert proc.wait(timeout=60) != 0 and not evalproc.is_running(e)
    deadline = (
        time.monotonic() + 60
    )  # the group's processes end (and are reaped) a moment after the signal
    while (
        left := subprocess.run(["pgrep", "-s", str(proc.pid)], capture_output=True)
    ).returncode == 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert left.returncode == 1, (
        left.stdout
    )  # no process of its session is left (the sleep included)
    assert (
        ledger.read(d).evaluations["e0001"].state == "cancelled" and evalproc.exit_status(e) is None
    )


@pytest.mark.parametrize(
    "config", [{"lr": 0.5}, {"lr": 0.001, "results": "/etc/passwd"}, {}, {"lr": "0.001"}]
)
def test_a_ledger_config_outside_the_space_is_refused_naming_its_line(
    showers, tmp_path, capsys, config
):
    """A config edited into the ledger would become gan3d train arguments: refused before any
    command.
    """
    spec = study_yaml(tmp_path, showers, "random", 3, PARAMS)
    d = tmp_path / "s"
    plan_study(spec, "laptop", d)
    ledger.append(d, "proposed", eval="e0001", config={"lr": 0.001})
    ledger.append(d, "proposed", eval="e0002", config=config)
    for argv in (["status", str(d)], ["report", str(d)], ["run", str(d)]):
        assert main(["study", *argv]) == 1
        err = capsys.readouterr().err
        assert "ledger.jsonl:3: e0002's config is not a point of the study's space" in err, err
        assert err.count("\n") == 1
    assert not (d / "evals").exists() and not (d / "report").exists()


def test_a_study_file_edited_after_planning_names_the_ledger_line_it_no_longer_fits(
    showers, tmp_path, capsys
):
    """The copy in DIR is what run reads; narrowed after e0001 was proposed, e0001's lr lies
    outside.
    """
    spec = study_yaml(tmp_path, showers, "random", 3, PARAMS)
    d = tmp_path / "s"
    plan_study(spec, "laptop", d)
    ledger.append(d, "proposed", eval="e0001", config={"lr": 0.0002})
    (d / SPEC_NAME).write_text((d / SPEC_NAME).read_text().replace("0.0001", "0.001"))
    for argv in (["run", str(d)], ["status", str(d)]):
        assert main(["study", *argv]) == 1
        err = capsys.readouterr().err
        assert (
            f"ledger.jsonl:2: e0001's config is not a point of the study's space in {d / SPEC_NAME} "
            in err
        ), err
        assert (
            "parameter lr: 0.0002 is outside [0.001, 0.01]" in err
            and "fix: restore study.yaml" in err
        )
        assert err.count("\n") == 1
    assert not (d / "evals").exists()


def test_a_pilot_in_an_image_runs_each_step_through_the_pair_and_needs_its_dirs_bound(
    mpich_system_oci, showers, tmp_path
):
    """The pilot's steps as a batch script words them: srun with the step's ranks, ch-run with the
    pair's binds, paths as the container sees them (/work), a ch-run peer group per evaluation, and
    the physics validation as a one-rank step in the same image. A study dir outside the binds is
    refused at plan, before anything is queued."""
    import shlex

    from kit.mpi import convert_paired
    from kit.mpi.pair_reader import read_pair_file
    from kit.site import load_site
    from kit.study.evaluate import eval_run
    from kit.study.pilot import inside_commands, render_pilot
    from kit.study.spec import load_study
    from tests.support.chrun_join import join_tags

    work = tmp_path / "work"
    work.mkdir()
    doc = slurm_site_dict("boundslurm")
    doc["container"]["binds"] = [f"{work}:/work"]
    site_file = write_site(tmp_path, doc)
    image = tmp_path / "img.tar"
    pair_file = convert_paired(mpich_system_oci, image, load_site(site_file)).pair_file
    for i, shower_file in enumerate(showers):  # inside the bound directory
        shutil.copy(shower_file, work / f"f{i}.h5")
    spec = study_yaml(
        work,
        [work / f"f{i}.h5" for i in range(3)],
        "random",
        2,
        {"ranks-per-node": {"type": "choice", "values": [2]}},
        objective="physics_score",
        direction="maximize",
        threads=1,
    )
    with pytest.raises(
        KitError, match=r"run dir .*/elsewhere/evals/e0001 is not under any directory img.tar.pair"
    ):
        plan_study(
            spec,
            str(site_file),
            tmp_path / "elsewhere",
            pilot=1,
            image=str(image),
            walltime="00:10:00",
        )
    assert not (tmp_path / "elsewhere").exists()
    plan_study(spec, str(site_file), work / "s", pilot=1, image=str(image), walltime="00:10:00")
    site = load_site(site_file)
    runs = [
        eval_run(e, {"ranks-per-node": 2}, load_study(spec), site=site) for e in ("e0001", "e0002")
    ]
    [train, validate], [other, _] = (
        inside_commands(r, work / "s", site, python="py", pair=read_pair_file(pair_file, site))
        for r in runs
    )
    for step, ranks in ((train, 2), (validate, 1)):
        assert step[:2] == ["bash", "-c"]
        words = shlex.split(step[2].splitlines()[-1])
        assert words[:6] == [
            "srun",
            "--mpi=pmi2",
            "--nodes=1",
            f"--ntasks={ranks}",
            "--cpus-per-task=1",
            "--exact",
        ]
        assert words[6:9] == ["ch-run", "--join", "--join-tag=${KIT_JOIN_TAG}-e0001"]
        assert (
            f"--bind={work}:/work" in words
        )  # the installed image the pair names, as a batch script runs it
        assert words[words.index("--") - 1] == read_pair_file(pair_file, site).site_image
    inside = shlex.split(train[2].splitlines()[-1])
    inside = inside[inside.index("--") + 1 :]
    assert inside[inside.index("--results") + 1] == "/work/s/evals/e0001/results/e0001.json"
    assert inside[inside.index("--site") + 1] == "/work/s/evals/e0001/scripts/e0001.site.yaml"
    assert inside[inside.index("--data") + 1] == "/work/f0.h5,/work/f1.h5" and "--threads" in inside
    assert "gan3d validate" in validate[2] and "--data /work/f2.h5" in validate[2]
    # the pilot's start draws the tag and exports it; each step's bash expands it with its suffix: the
    # steps of one evaluation share a peer group, two side by side do not, a second start of job 31 differs
    pilot = render_pilot(
        site, work / "s", nodes=1, workers=2, walltime="00:10:00", python="py", join=True
    )
    steps = "\n".join(c[2] for c in (train, validate, other))
    (train_tag, validate_tag, other_tag), again = (
        join_tags(pilot, "31", steps),
        join_tags(pilot, "31", steps),
    )
    assert train_tag == validate_tag == other_tag.removesuffix("-e0002") + "-e0001" != again[0]
    assert train_tag.startswith("--join-tag=kit-31-") and again[0].endswith("-e0001")
    assert "KIT_JOIN_TAG" not in render_pilot(
        site, work / "s", nodes=1, workers=2, walltime="00:10:00", python="py"
    )  # bare steps: no join


def test_the_pilot_job_asks_for_the_same_nodes_as_a_run_and_refuses_a_bad_constraint(tmp_path):
    """The pilot's #SBATCH lines come from the one place batch scripts take them: the site's
    partition, account and constraint (a pilot without the constraint would land on other nodes)."""
    from kit.site import load_site
    from kit.study.pilot import render_pilot

    site_dict = slurm_site_dict()
    site_dict["scheduler"] |= {"account": "proj42", "constraint": "skylake"}
    site = load_site(str(write_site(tmp_path, site_dict)))
    script = render_pilot(
        site, tmp_path / "study", nodes=1, workers=2, walltime="00:10:00", python="python3"
    )
    assert {
        "#SBATCH --partition=debug",
        "#SBATCH --account=proj42",
        "#SBATCH --constraint=skylake",
    } <= set(script.splitlines())
    bad = dataclasses.replace(site, scheduler=dataclasses.replace(site.scheduler, constraint="a b"))
    with pytest.raises(KitError, match="scheduler.constraint 'a b'"):
        render_pilot(
            bad, tmp_path / "study", nodes=1, workers=2, walltime="00:10:00", python="python3"
        )


def test_a_fifo_planted_at_the_studys_lock_is_refused_without_hanging(showers, tmp_path, capsys):
    """The driver's lock is opened non-blocking and must be a regular file: a FIFO at its name
    (which a plain O_WRONLY open waits on forever; non-blocking, the open fails at once) is one
    line, exit 1."""
    from kit.study.run import DRIVER_LOCK

    spec = study_yaml(tmp_path, showers, "random", 3, PARAMS)
    assert (
        main(["study", "plan", str(spec), "--dir", str(tmp_path / "st"), "--site", "laptop"]) == 0
    )
    os.mkfifo(tmp_path / "st" / DRIVER_LOCK)
    capsys.readouterr()
    assert main(["study", "run", str(tmp_path / "st")]) == 1
    err = capsys.readouterr().err.strip()
    assert (
        f"{DRIVER_LOCK}: " in err
        and err.endswith("fix: remove what is at that name")
        and "\n" not in err
    )


def test_data_files_too_small_for_a_config_are_refused_at_plan_naming_the_file_and_counts(
    showers, tmp_path, capsys
):
    """Shower files are counted from their headers at plan: the events held out by test-fraction
    (as gan3d.data.split_events holds them out) and those left to train on must each give every
    rank a batch for every config of the space; else one line names the file, its count, the need."""
    import h5py

    from gan3d.data import split_events

    one = showers[0]
    with h5py.File(one, "r") as h5:
        events = h5["ECAL"].shape[0]
    layout = {"ranks-per-node": {"type": "choice", "values": [1, 4]}, **PARAMS}
    spec = study_yaml(tmp_path, showers, "random", 3, layout, file="held.yaml")  # batch size 4
    doc = yaml.safe_load(spec.read_text())
    doc["fixed"].pop("validation-data")
    doc["fixed"].update(data=str(one), **{"test-fraction": 0.1})
    spec.write_text(yaml.safe_dump(doc, sort_keys=False))
    held = sum(b - a for _, a, b in split_events([events], 0.1, doc["fixed"]["seed"]).test)
    assert 4 <= held < 4 * 4 <= events - held  # with 4 ranks the share held out is what is short
    assert main(["study", "plan", str(spec), "--dir", str(tmp_path / "a"), "--site", "laptop"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and not (tmp_path / "a").exists()
    assert re.search(
        r"held.yaml:\d+: parameters.ranks-per-node: "
        r"with batch-size 4 and 4 rank\(s\) per node a step needs 16 showers \(ranks x batch size\), "
        rf"but data {re.escape(str(one))} \({events} events\) .*with test-fraction 0.1 have {held} held out; "
        r"fix: .*raise test-fraction",
        err,
    ), err

    doc["fixed"].update(
        **{"batch-size": events // 2, "validation-data": f"{showers[1]},{showers[2]}"}
    )
    doc["parameters"]["ranks-per-node"] = {
        "type": "int",
        "low": 1,
        "high": 3,
    }  # 3 x 32 > the 64 to train on
    spec.write_text(yaml.safe_dump(doc, sort_keys=False))
    with pytest.raises(
        KitError,
        match=r"held.yaml:\d+: parameters.ranks-per-node: "
        rf"with batch-size {events // 2} and 3 rank\(s\) per node a step needs {3 * (events // 2)} "
        rf"showers .* have {events} left to train on; fix: lower batch-size or ranks-per-node, "
        r"or give more data showers$",
    ):
        plan_study(spec, "laptop", tmp_path / "b")
    doc["parameters"]["ranks-per-node"]["high"] = 2  # 2 x 32 = 64: one batch a rank
    spec.write_text(yaml.safe_dump(doc, sort_keys=False))
    plan_study(spec, "laptop", tmp_path / "c")


def test_data_files_that_are_not_there_or_not_showers_are_refused_at_plan(showers, tmp_path):
    spec = study_yaml(tmp_path, showers, "random", 3, PARAMS)
    doc = yaml.safe_load(spec.read_text())
    (tmp_path / "notes.h5").write_text("not HDF5\n")
    for data, problem in (
        (str(tmp_path / "missing.h5"), "not found: "),
        (str(tmp_path / "notes.h5"), "is not an HDF5 file"),
    ):
        doc["fixed"]["data"] = data
        spec.write_text(yaml.safe_dump(doc, sort_keys=False))
        with pytest.raises(
            KitError, match=rf"study.yaml:\d+: fixed.data: .*{problem}.*; fix: "
        ) as exc:
            plan_study(spec, "laptop", tmp_path / "s")
        assert "\n" not in str(exc.value) and not (tmp_path / "s").exists()
