"""Every numeric option of every `kit` command goes through the one bounded type
(kit.commands.common.number): NaN, inf and values out of range are usage errors (exit 2), never a
`--poll nan` that waits for ever or a `--timeout -1` that crashes."""

from __future__ import annotations

from pathlib import Path

import pytest

from kit.cli import build_parser, leaves
from kit.commands import common


def _actions():
    for leaf in leaves(build_parser()):
        for action in leaf._actions:
            yield leaf.prog, action


# Types that take no number, or a size: kit.sizes.parse_size bounds its own text (tests/test_sizes.py).
NOT_NUMBERS = {
    ("kit.commands.common", "comma_words"),  # --precision fp32,bf16, --itex off,on: words
    ("kit.commands.scale", "_table"),  # --reference table4 (or 4): a name
    ("kit.commands.image", "_size"),
}
BOUNDED = {"number.<locals>.parse", "numbers.<locals>.parse"}


def test_every_typed_option_of_every_command_is_a_path_or_a_bounded_number():
    """A bare int or float, or a type of its own that converts numbers, fails here."""
    unbounded = []
    for prog, a in _actions():
        if a.type is None or a.type is Path:
            continue
        module, name = getattr(a.type, "__module__", ""), getattr(a.type, "__qualname__", "")
        if (module, name) in NOT_NUMBERS or (module == common.__name__ and name in BOUNDED):
            continue
        unbounded.append(f"{prog} {'/'.join(a.option_strings) or a.dest}: {a.type!r}")
    assert not unbounded, f"options without kit.commands.common.number(s): {unbounded}"


def test_the_walk_sees_the_commands_numeric_options():
    """The check above walks real options: it finds the bounded types where they are."""
    seen = {
        (prog, a.option_strings[0])
        for prog, a in _actions()
        if a.option_strings and getattr(a.type, "__qualname__", "") in BOUNDED
    }
    assert {("kit scale collect", "--poll"), ("kit scale plan", "--nodes")} <= seen


@pytest.mark.parametrize(
    "argv",
    [
        ["scale", "plan", "--site", "laptop", "--no-container", "--nodes", "0"],
        ["scale", "plan", "--site", "laptop", "--no-container", "--nodes", "1,-2"],
        ["scale", "plan", "--site", "laptop", "--no-container", "--threads", "4,1e400"],
        ["scale", "plan", "--site", "laptop", "--no-container", "--ranks-per-node", "9" * 400],
        ["scale", "predict", "D", "--nodes", "16,nan"],
        ["scale", "predict", "D", "--nodes", ",".join(["1"] * 65)],
        ["scale", "predict", "D", "--nodes", ","],
    ],
)
def test_count_lists_are_bounded_counts(argv, capsys):
    with pytest.raises(SystemExit) as done:
        build_parser(argv).parse_args(argv)
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert "give comma-separated whole numbers from 1 to 1000000 (at most 64)" in err, err


def test_count_lists_take_whole_numbers_in_their_order():
    argv = ["scale", "plan", "--site", "laptop", "--no-container", "--nodes", "8, 1,,2,"]
    assert build_parser(argv).parse_args(argv).nodes == [8, 1, 2]


@pytest.mark.parametrize(
    "argv",
    [
        ["scale", "collect", "D", "--wait", "--poll", "nan"],
        ["scale", "collect", "D", "--wait", "--poll", "-1"],
        ["scale", "collect", "D", "--wait", "--timeout", "inf"],
        ["scale", "collect", "D", "--timeout", "-5"],
        ["scale", "collect", "D", "--timeout", "nan"],
        ["study", "run", "D", "--poll", "nan"],
    ],
)
def test_nan_inf_and_negative_waits_are_usage_errors(argv, capsys):
    with pytest.raises(SystemExit) as done:
        build_parser(argv).parse_args(argv)
    assert done.value.code == 2 and "give a number" in capsys.readouterr().err


def test_the_wait_itself_refuses_an_unbounded_poll_or_timeout(tmp_path):
    from kit.errors import KitError
    from kit.scale import sweep_jobs

    for poll, timeout in (
        (float("nan"), None),
        (1.0, float("inf")),
        (-1.0, None),
        (1.0, float("nan")),
    ):
        with pytest.raises(KitError, match="not a number of seconds; fix: give a finite number"):
            sweep_jobs.wait(tmp_path, poll_seconds=poll, timeout=timeout)
