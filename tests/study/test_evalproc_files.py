"""An evaluation's eval.json and exit.json are read through kit.schema: a file kit study did not
write (or one edited since) is one line naming every bad key, and the fix."""

from __future__ import annotations

import json

import pytest

from kit.errors import KitError
from kit.study import evalproc


def test_an_exit_file_is_read_as_written_and_every_bad_key_named(tmp_path):
    (tmp_path / evalproc.EXIT).write_text(json.dumps({"code": 0, "step": 1}))
    assert evalproc.exit_status(tmp_path) == {"code": 0, "step": 1}
    (tmp_path / evalproc.EXIT).write_text(json.dumps({"code": 300, "step": 8, "cod": 1}))
    with pytest.raises(KitError) as exc:
        evalproc.exit_status(tmp_path)
    line, path = str(exc.value), tmp_path / evalproc.EXIT
    assert line.startswith(f"{path}: invalid evaluation exit file (3 problem(s)): ")
    for named in (
        "code: must be at most 255, got 300",
        "step: must be at most 7, got 8",
        "cod: unknown key; did you mean 'code'?",
    ):
        assert f"{path}: {named}" in line
    assert line.endswith("; fix: move it aside to run it again") and "\n" not in line


@pytest.mark.parametrize(
    "plan, named",
    [
        ({"commands": [["gan3d", "train"], []]}, "commands[1]: holds 0 entries, expected 1.."),
        ({"commands": [["gan3d", 7]]}, "commands[0][1]: expected a string, got 7"),
        ({"commands": [["x"]] * 9}, "commands: holds 9 entries, expected 0..8"),
        ([["gan3d"]], "(top level): expected a mapping with keys commands"),
    ],
)
def test_an_evaluation_plan_kit_study_did_not_write_is_refused_by_key(tmp_path, plan, named):
    (tmp_path / evalproc.PLAN).write_text(json.dumps(plan))
    with pytest.raises(KitError) as exc:
        evalproc.run(tmp_path)
    assert str(exc.value).startswith(f"{tmp_path / evalproc.PLAN}: {named}")
    assert "; fix: kit study run writes it" in str(exc.value)
    assert not (tmp_path / evalproc.EXIT).exists()


@pytest.mark.parametrize("planted", ["symlink", "world-writable", "group-writable dir", "own"])
def test_an_evaluation_runs_commands_only_from_the_kits_own_plan(tmp_path, planted):
    """eval.json is code: one someone else could have written (a link, a file or a directory others
    can write) is refused and nothing of it runs."""
    eval_dir, ran = tmp_path / "e0001", tmp_path / "ran"
    eval_dir.mkdir(mode=0o700)
    plan = json.dumps({"commands": [["touch", str(ran)]]})
    if planted == "symlink":
        (tmp_path / "theirs.json").write_text(plan)
        (eval_dir / evalproc.PLAN).symlink_to(tmp_path / "theirs.json")
    else:
        (eval_dir / evalproc.PLAN).write_text(plan)
        (eval_dir / evalproc.PLAN).chmod(0o666 if planted == "world-writable" else 0o644)
        eval_dir.chmod(0o770 if planted == "group-writable dir" else 0o700)
    if planted == "own":
        assert evalproc.run(eval_dir) == 0 and ran.exists()
        assert evalproc.exit_status(eval_dir) == {"code": 0, "step": 0}
        return
    with pytest.raises(KitError) as exc:
        evalproc.run(eval_dir)
    said = {"symlink": "is a symlink", "world-writable": "is writable by others (mode 0666)"}
    assert said.get(planted, "is writable by others (mode 0770)") in str(exc.value)
    assert "; fix: " in str(exc.value) and not ran.exists()
    assert not (eval_dir / evalproc.EXIT).exists()
