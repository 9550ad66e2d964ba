"""The arguments several commands share are declared once (kit/commands/common.py): the number
type every bounded option uses, and the command-group pattern."""

from __future__ import annotations

import argparse
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kit.cli import build_parser
from kit.commands.common import number


@given(
    value=st.floats(allow_nan=True, allow_infinity=True),
    low=st.floats(-10, 10),
    span=st.floats(0, 10),
    bounded=st.booleans(),
)
def test_a_float_option_takes_exactly_the_finite_numbers_in_its_range(value, low, span, bounded):
    high = low + span if bounded else math.inf
    parse = number(low, float, high)
    if math.isfinite(value) and low <= value <= high:
        assert parse(repr(value)) == value
    else:
        with pytest.raises(argparse.ArgumentTypeError, match=r"give a number (>=|from) "):
            parse(repr(value))


@given(st.integers(-5, 5))
def test_a_count_option_takes_whole_numbers_from_its_minimum(value):
    parse = number(1)
    if value >= 1:
        assert parse(str(value)) == value
    else:
        with pytest.raises(argparse.ArgumentTypeError, match=r"give a number >= 1"):
            parse(str(value))
    with pytest.raises(argparse.ArgumentTypeError):
        parse(f"{value}.5")


def _groups(parser: argparse.ArgumentParser) -> dict[str, argparse._SubParsersAction]:
    top = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {
        name: next(a for a in sub._actions if isinstance(a, argparse._SubParsersAction))
        for name, sub in top.choices.items()
        if any(isinstance(a, argparse._SubParsersAction) for a in sub._actions)
    }


def test_every_command_group_parses_its_subcommand_into_name_command():
    """One pattern (add_group): `kit study` had its own, parsed into study_cmd."""
    groups = _groups(build_parser())
    assert {"image", "mpi", "scale", "site", "slurm", "study", "transfer"} <= set(groups)
    assert {name: leaves.dest for name, leaves in groups.items()} == {
        name: f"{name}_command" for name in groups
    }


def test_study_takes_the_shared_site_and_dry_run_arguments():
    args = build_parser().parse_args(
        [
            "study",
            "plan",
            "spec.yaml",
            "--dir",
            "d",
            "--site",
            "laptop",
            "--dry-run",
            "--parallel",
            "3",
        ]
    )
    assert (args.site, args.dry_run, args.parallel) == ("laptop", True, 3)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["study", "run", "dir", "--poll", "inf"])
