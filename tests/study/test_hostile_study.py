"""`kit study` attacked as an outsider would: numbers at and past their limits in the study file, the
ledger's header and records edited between two commands, results files with absurd objectives, study
paths of odd characters, and links swapped in for what the study made (its report directory, an
evaluation's directory or log). Each ends in one line (exit 1) or goes on; never an internal error
(exit 70), never a study that cannot go on, and nothing outside the study is written.

Evaluations are real `kit study run` evaluations (kit.study.evalproc processes, locks, logs) whose
command writes a chosen results file instead of training (tests/study/fakes.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kit.cli import main
from kit.study import ledger
from tests.study.fakes import fake_training, results_text, spec_file

BIG = "1" * 400  # a 400-digit number: JSON and YAML read it as an int no float holds


def _one_line_error(capsys, code: int, as_json: bool = False) -> str:
    """The one error line (with --json: one JSON object on stderr, its message)."""
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1, (code, err)
    if as_json:
        return json.loads(err)["error"]["message"]
    assert err.startswith("kit: error: "), err
    return err


def _planned(tmp_path: Path, name: str = "study", evaluations: int = 2) -> Path:
    d = tmp_path / name
    assert (
        main(
            [
                "study",
                "plan",
                str(spec_file(tmp_path, evaluations)),
                "--dir",
                str(d),
                "--site",
                "laptop",
                "-q",
            ]
        )
        == 0
    )
    return d


def _edit_header(d: Path, **changes) -> None:
    path = d / ledger.NAME
    lines = path.read_text().splitlines(keepends=True)
    header = json.loads(lines[0])
    header.update(changes)
    path.write_text(json.dumps(header) + "\n" + "".join(lines[1:]))


# -- the study file ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "top, field",
    [
        ({"seed": int(BIG)}, "seed"),
        (
            {"parameters": {"lr": {"type": "float", "low": 0.0001, "high": int(BIG)}}},
            "parameters.lr.high",
        ),
        (
            {"parameters": {"batch-size": {"type": "choice", "values": [4, int(BIG)]}}},
            "parameters.batch-size.values[1]",
        ),
        ({"budget": {"evaluations": int(BIG)}}, "budget.evaluations"),
        ({"strategy": {"type": "mbo", "trees": int(BIG)}}, "strategy.trees"),
    ],
)
def test_a_400_digit_number_in_a_study_file_is_one_line(tmp_path, capsys, top, field):
    spec = spec_file(tmp_path, **top)
    err = _one_line_error(
        capsys,
        main(
            [
                "study",
                "plan",
                str(spec),
                "--dir",
                str(tmp_path / "d"),
                "--site",
                "laptop",
                "--dry-run",
            ]
        ),
    )
    assert f"{spec}:" in err and f" {field}: " in err and "<1326-bit integer>" in err


def test_a_parameter_name_with_a_newline_is_one_line(tmp_path, capsys):
    spec = tmp_path / "nl.yaml"
    spec.write_text(spec_file(tmp_path).read_text().replace("  lr:", '  "l\\nr":'))
    err = _one_line_error(
        capsys, main(["study", "plan", str(spec), "--dir", str(tmp_path / "d"), "--site", "laptop"])
    )
    assert f"{spec}:3: parameters.'l\\nr': 'l\\nr' is not an option of gan3d train; fix: " in err
    assert not (tmp_path / "d").exists()


def test_a_duplicate_choice_value_is_refused_naming_the_file_and_line(tmp_path, capsys):
    spec = spec_file(
        tmp_path,
        parameters={"optimizer": {"type": "choice", "values": ["adam", "rmsprop", "adam"]}},
    )
    err = _one_line_error(
        capsys, main(["study", "plan", str(spec), "--dir", str(tmp_path / "d"), "--site", "laptop"])
    )
    assert f"{spec}:" in err and "parameters.optimizer.values: a choice lists a value twice" in err


# -- the ledger, edited between two commands --------------------------------------------------------


@pytest.mark.parametrize(
    "key, value",
    [
        ("parallel", 10**9),
        ("parallel", "2"),
        ("parallel", True),
        ("parallel", 0),
        ("parallel", int(BIG)),
        ("pilot", 2.5),
        ("walltime", 5),
        ("walltime", "1:00\nx"),
        ("python", ["python3"]),
        ("direction", "up"),
        ("site", None),
    ],
)
def test_a_ledger_header_edited_to_a_wrong_type_or_bound_is_one_line_for_every_command(
    tmp_path, capsys, key, value
):
    d = _planned(tmp_path)
    _edit_header(d, **{key: value})
    before = (d / ledger.NAME).read_bytes()
    for command in (
        ["run", "--poll", "0.05"],
        ["status"],
        ["status", "--json"],
        ["report"],
        ["cancel"],
    ):
        code = main(["study", command[0], str(d), *command[1:]])
        err = _one_line_error(capsys, code, "--json" in command)
        assert f"{d / ledger.NAME}:1: {key}: " in err and "; fix: " in err, command
    assert (d / ledger.NAME).read_bytes() == before and not (d / "evals").exists()


@pytest.mark.parametrize(
    "changes, message",
    [
        (
            {"site": "supermuc-ng", "pilot": 2},
            "key walltime is None, but site supermuc-ng needs a walltime",
        ),
        (
            {"site": "supermuc-ng", "walltime": "3-00:00:00"},
            "key walltime is '3-00:00:00', but site supermuc-ng",
        ),
        (
            {"site": "supermuc-ng", "walltime": "01:00:00", "pilot": 100_000},
            "key pilot is 100000, but site supermuc-ng",
        ),
        (
            {"walltime": "01:00:00"},
            "key walltime is '01:00:00', but site laptop runs evaluations on this machine",
        ),
        ({"pilot": 2}, "key pilot is 2, but site laptop runs evaluations on this machine"),
    ],
)
def test_a_ledger_header_that_no_longer_fits_its_site_is_one_line_before_any_job(
    tmp_path, capsys, changes, message
):
    """The header names the site file and what kit study plan chose for it: edited to a Slurm site without
    a walltime, a pilot on a machine without Slurm, or past the site's limits, kit study run stops in one
    line naming ledger.jsonl:1 before it renders a job (a pilot script with `--time=None` was submitted)."""
    from kit.site import load_site

    d = _planned(tmp_path)
    if "site" in changes:
        changes = {**changes, "site": str(load_site(changes["site"]).path)}
    _edit_header(d, **changes)
    err = _one_line_error(capsys, main(["study", "run", str(d), "--poll", "0.05"]))
    assert f"{d / ledger.NAME}:1: {message}" in err and "fix: restore the ledger.jsonl" in err
    assert not (d / "evals").exists() and not (d / "pilot").exists() and not (d / "queue").exists()


@pytest.mark.parametrize(
    "record, message",
    [
        (
            {"event": "proposed", "eval": "e0001", "config": {"lr": int(BIG)}},
            "not a flat mapping of numbers",
        ),
        (
            {
                "event": "proposed",
                "eval": "e0001",
                "config": {"lr": 0.001},
                "prediction": {"mean": int(BIG)},
            },
            "prediction.mean: <1326-bit integer> is not a finite number",
        ),
        (
            {"event": "finished", "eval": "e0001", "objective": int(BIG)},
            "objective: <1326-bit integer> is not a finite number",
        ),
        (
            {"event": "finished", "eval": "e0001", "objective": 1e308},
            "objective: must be at most 1e+15, got 1e+308",
        ),
        (
            {"event": "finished", "eval": "e0001", "objective": 1.0, "result": 5},
            "result: expected a string or null, got int 5",
        ),
        (
            {"event": "failed", "eval": "e0001", "error": {"x": 1}},
            "error: expected a string or null, got dict {'x': 1}",
        ),
        (
            {"event": "submitted", "eval": "e0001", "how": "slurm", "job": 123},
            "job: expected a string or null, got int 123",
        ),
        (
            {"event": "submitted", "eval": "e0001", "how": "local", "pid": int(BIG)},
            "pid: must be at most 2147483647, got <1326-bit integer>",
        ),
        (
            {"event": "submitted", "eval": "e0001", "how": "local", "attached": "yes"},
            "attached: expected true or false or null, got str 'yes'",
        ),
        ({"event": "started", "t": int(BIG)}, "t: <1326-bit integer> is not a finite number"),
    ],
)
def test_ledger_records_edited_to_wrong_types_or_huge_numbers_are_one_line(
    tmp_path, capsys, record, message
):
    d = _planned(tmp_path)
    with open(d / ledger.NAME, "a") as fh:
        if record.get("event") not in ("proposed", "started"):
            fh.write(
                json.dumps({"event": "proposed", "eval": "e0001", "config": {"lr": 0.001}}) + "\n"
            )
        fh.write(json.dumps(record) + "\n")
    line = len((d / ledger.NAME).read_text().splitlines())
    for command in (["status"], ["status", "--json"], ["report"], ["run", "--poll", "0.05"]):
        code = main(["study", *command[:1], str(d), *command[1:]])
        err = _one_line_error(capsys, code, "--json" in command)
        assert f"{d / ledger.NAME}:{line}: " in err and message in err, (command, err)


def test_a_400_digit_value_is_outside_every_range_of_the_space():
    """The space's own check (a ledger's configs go through it): an error naming the parameter, not
    an OverflowError from comparing the number as a float."""
    from kit.errors import KitError
    from kit.study.space import Space, integer, real

    space = Space([integer("steps-per-epoch", 1, 8), real("lr", 0.001, 0.1)])
    for config in (
        {"steps-per-epoch": int(BIG), "lr": 0.01},
        {"steps-per-epoch": 2, "lr": -int(BIG)},
    ):
        with pytest.raises(KitError, match=r"is outside \["):
            space.validate(config)


# -- results files with absurd objectives: the evaluation fails, the study goes on -------------------


def test_absurd_objectives_fail_their_evaluation_and_the_study_goes_on(
    tmp_path, capsys, monkeypatch
):
    objectives = {
        "e0001": BIG,
        "e0002": "1e308",
        "e0003": "-" + BIG,
        "e0004": '"fast"',
        "e0005": "1e999",
    }
    fake_training(monkeypatch, lambda eval_id: results_text(objectives.get(eval_id, "2.5")))
    d = _planned(tmp_path, evaluations=6)
    assert main(["study", "run", str(d), "--poll", "0.05", "-q"]) == 0
    led = ledger.read(d)
    states = {e.eval_id: e.state for e in led.evaluations.values()}
    assert states == {
        **{e: "failed" for e in objectives if e != "e0005"},
        "e0005": "failed",
        "e0006": "finished",
    }
    assert "showers_per_second: must be at most 1e+15, got 1e+308" in led.evaluations["e0002"].error
    assert "<1326-bit integer>" in led.evaluations["e0001"].error
    assert led.evaluations["e0006"].objective == 2.5
    capsys.readouterr()
    for command in (["status"], ["status", "--json"], ["report"], ["run", "--poll", "0.05"]):
        assert main(["study", *command[:1], str(d), *command[1:]]) == 0, capsys.readouterr().err


# -- odd characters in a study's path ---------------------------------------------------------------

ODD = (
    "st" + os.fsdecode(b"\xff\xfe") + "udy"
)  # bytes that are not UTF-8: Python holds them as surrogates


@pytest.mark.parametrize("name", ["st\nudy", ODD, "a b,c:d;e'f\"g$(x)"])
def test_a_study_path_of_odd_characters_plans_runs_and_reports(
    tmp_path, capsysbinary, monkeypatch, name
):
    fake_training(monkeypatch)
    d = tmp_path / name
    assert (
        main(["study", "plan", str(spec_file(tmp_path)), "--dir", str(d), "--site", "laptop", "-q"])
        == 0
    )
    assert os.fsencode(d) in capsysbinary.readouterr().out  # printed as the bytes it is
    assert main(["study", "run", str(d), "--poll", "0.05", "-q"]) == 0
    led = ledger.read(d)
    assert [e.state for e in led.evaluations.values()] == ["finished", "finished"], [
        e.error for e in led.evaluations.values()
    ]
    for command in (["status"], ["status", "--json"], ["report"]):
        assert main(["study", *command[:1], str(d), *command[1:]]) == 0, (
            command,
            capsysbinary.readouterr().err,
        )
    md = (d / "report" / "report.md").read_bytes()
    assert md.decode("utf-8") and b"e0001" in md  # escaped where the path is not UTF-8


def test_a_study_path_that_is_not_utf8_prints_under_a_utf8_locale(tmp_path):
    """The command as a shell runs it: stdout a pipe, a UTF-8 locale (Python's stdout is then
    strict).
    """
    import subprocess
    import sys

    d = tmp_path / ODD
    env = {
        **os.environ,
        "LC_ALL": "C.UTF-8",
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
    }
    env.pop("PYTHONIOENCODING", None)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "kit",
            "study",
            "plan",
            str(spec_file(tmp_path)),
            "--dir",
            os.fsencode(d),
            "--site",
            "laptop",
            "-q",
        ],
        capture_output=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0 and os.fsencode(d) + b"/study.yaml" in done.stdout, done.stderr


# -- links the kit did not make ---------------------------------------------------------------------


def _user_dir(tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    mine = tmp_path / "mine"
    mine.mkdir()
    for name in ("report.md", "notes.txt", "eval.log"):
        (mine / name).write_bytes(b"the user's " + name.encode())
    return mine, {p.name: p.read_bytes() for p in mine.iterdir()}


def _unchanged(mine: Path, before: dict[str, bytes]) -> None:
    assert {p.name: p.read_bytes() for p in mine.iterdir()} == before


def test_a_report_dir_or_report_file_swapped_for_a_link_is_never_written_through(
    tmp_path, capsys, monkeypatch
):
    fake_training(monkeypatch)
    d = _planned(tmp_path)
    assert main(["study", "run", str(d), "--poll", "0.05", "-q"]) == 0
    mine, before = _user_dir(tmp_path)
    (d / "report").symlink_to(mine)
    err = _one_line_error(capsys, main(["study", "report", str(d)]))
    assert f"{d / 'report'}: is a symlink, not the report directory" in err
    _unchanged(mine, before)
    (d / "report").unlink()
    assert (
        main(["study", "report", str(d)]) == 0 and main(["study", "report", str(d)]) == 0
    )  # its own: replaced
    report = d / "report" / "report.md"
    report.unlink()
    report.symlink_to(mine / "report.md")
    err = _one_line_error(capsys, main(["study", "report", str(d)]))
    assert "is a symlink that kit study report did not write" in err
    _unchanged(mine, before)
    report.unlink()
    report.write_text("my own notes")  # a user's file where the kit's report was: left alone
    err = _one_line_error(capsys, main(["study", "report", str(d)]))
    assert report.read_text() == "my own notes" and "did not write, so it is not replaced" in err


def _proposed_not_started(d: Path, eval_id: str = "e0001") -> None:
    """What a driver killed right after proposing leaves: the next run starts it."""
    ledger.append(d, "proposed", eval=eval_id, config={"lr": 0.001})


@pytest.mark.parametrize("plant", ["evals", "evaldir", "log", "results"])
def test_an_evaluation_dir_or_log_swapped_for_a_link_fails_that_evaluation_only(
    tmp_path, capsys, monkeypatch, plant
):
    fake_training(monkeypatch)
    d = _planned(tmp_path, evaluations=3)
    _proposed_not_started(d)
    mine, before = _user_dir(tmp_path)
    e = d / "evals" / "e0001"
    if plant == "evals":
        (d / "evals").symlink_to(mine)
    else:
        e.mkdir(parents=True)
        {
            "evaldir": lambda: (e.rmdir(), e.symlink_to(mine)),
            "log": lambda: (e / "eval.log").symlink_to(mine / "eval.log"),
            "results": lambda: (e / "results").symlink_to(mine),
        }[plant]()
    code = main(["study", "run", str(d), "--poll", "0.05", "-q"])
    _unchanged(mine, before)
    if (
        plant == "evals"
    ):  # every evaluation would go through it: the study stops, in one line, until moved
        err = _one_line_error(capsys, code)
        assert f"{d / 'evals'}: is a symlink" in err
        (d / "evals").unlink()
        assert main(["study", "run", str(d), "--poll", "0.05", "-q"]) == 0
    else:
        assert code == 0
        failed = ledger.read(d).evaluations["e0001"]
        assert (
            failed.state == "failed"
            and "kit study never writes through what it did not make" in failed.error
        )
    led = ledger.read(d)
    assert len(led.done()) == 3 and sum(e.state == "finished" for e in led.done()) >= 2
    _unchanged(mine, before)


def test_a_link_swapped_in_while_the_evaluation_runs_fails_it_when_polled(tmp_path, monkeypatch):
    """Between two runs of the driver: the evaluation's directory replaced by a link to a user's
    directory holding an exit file and results; none of it is taken, nothing is written there."""
    fake_training(monkeypatch)
    d = _planned(tmp_path, evaluations=2)
    _proposed_not_started(d)
    ledger.append(d, "submitted", eval="e0001", how="local", pid=1)
    mine, _ = _user_dir(tmp_path)
    (mine / "exit.json").write_text('{"code": 0, "step": 0}\n')
    (mine / "results").mkdir()
    (mine / "results" / "e0001.json").write_text(results_text(99.0))
    before = {p: p.read_bytes() for p in mine.rglob("*") if p.is_file()}
    (d / "evals").mkdir()
    (d / "evals" / "e0001").symlink_to(mine)
    assert main(["study", "run", str(d), "--poll", "0.05", "-q"]) == 0
    led = ledger.read(d)
    assert led.evaluations["e0001"].state == "failed" and led.evaluations["e0001"].objective is None
    assert {p: p.read_bytes() for p in mine.rglob("*") if p.is_file()} == before


def test_a_lost_attempts_checkpoints_are_moved_aside_before_the_evaluation_starts_again(
    tmp_path, capsys, monkeypatch
):
    """gan3d train refuses a fresh run into another run's checkpoints, and the kit deletes none: an
    evaluation started again (its earlier process lost, no exit status) finds its checkpoints directory
    free, the earlier attempt's kept beside it, untouched."""
    fake_training(monkeypatch)
    d = _planned(tmp_path)
    earlier = d / "evals" / "e0001" / "checkpoints" / "epoch-0001"
    earlier.mkdir(parents=True)
    (earlier / "meta.json").write_text('{"run_id": "earlier"}')
    assert main(["study", "run", str(d), "--poll", "0.05", "-q"]) == 0
    kept = d / "evals" / "e0001" / "checkpoints.before-attempt-1" / "epoch-0001" / "meta.json"
    assert kept.read_text() == '{"run_id": "earlier"}'
    assert not (d / "evals" / "e0001" / "checkpoints").exists()
    assert (
        json.loads((d / "evals" / "e0001" / "results" / "e0001.json").read_text())["status"] == "ok"
    )
