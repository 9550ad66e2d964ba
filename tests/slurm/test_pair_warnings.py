"""A pair file's warnings, printed by `kit slurm render`, are text the kit did not write: a
megabyte-long one renders in bounded time and output, rich markup in one prints as the text it
is, its control characters come out escaped, and a flood of them is cut to a count."""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from kit.cli import main
from kit.mpi.pair_reader import WARNING_LIMIT, WARNINGS_KEPT
from tests.support.pairs import GOOD
from tests.support.printing import MAX_OUTPUT, raw_controls
from tests.support.sites import slurm_site_dict, write_site


def render(tmp_path: Path, capsys, warnings: list) -> tuple[int, str]:
    """`kit slurm render --dry-run` with a pair file holding ``warnings``: exit code, stderr."""
    pair: dict[str, Any] = copy.deepcopy(GOOD)
    pair["binds"].append(f"{tmp_path}:{tmp_path}")  # the run directory is under a bind
    pair["verdict"]["warnings"] = warnings
    path = tmp_path / "img.pair.yaml"
    path.write_text(yaml.safe_dump(pair))
    site = write_site(tmp_path, slurm_site_dict())
    argv = ["slurm", "render", "--site", str(site), "--image", str(path)]
    code = main([*argv, "--dir", str(tmp_path / "runs"), "--dry-run"])
    return code, capsys.readouterr().err


@pytest.mark.timeout(60)
def test_a_megabyte_warning_renders_in_bounded_time_and_output(tmp_path, capsys):
    start = time.monotonic()
    code, err = render(tmp_path, capsys, ["x" * (1 << 20)])  # one word: rich folds it, slowly
    seconds = time.monotonic() - start
    assert code == 0 and seconds < 10, (code, seconds, err[-300:])
    assert len(err) < MAX_OUTPUT and "x" * (WARNING_LIMIT - 3) + "..." in err.replace("\n", "")


def test_markup_and_controls_in_a_warning_print_as_escaped_text(tmp_path, capsys):
    code, err = render(tmp_path, capsys, ["see [/] and [bold]x \x1b[2J\x07\r\u202e end", 7])
    assert code == 0, err
    assert "warning: see [/] and [bold]x \\x1b[2J\\x07\\r\\u202e end\n" in err
    assert "warning: 7\n" in err  # a number is a warning too
    assert not raw_controls(err)


def test_a_flood_of_warnings_is_cut_to_a_count(tmp_path, capsys):
    code, err = render(tmp_path, capsys, [f"w{i}" for i in range(1000)])
    assert code == 0, err
    shown = [line for line in err.splitlines() if line.startswith("warning: w")]
    assert shown == [f"warning: w{i}" for i in range(WARNINGS_KEPT)]
    assert f"warning: ... {1000 - WARNINGS_KEPT} more (in the pair file's verdict.warnings)" in err
