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
