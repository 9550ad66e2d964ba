"""Every numeric option of every `kit` command goes through the one bounded type
(kit.commands.common.number): NaN, inf and values out of range are usage errors (exit 2), never a
`--poll nan` that waits for ever or a `--timeout -1` that crashes."""

from __future__ import annotations

import pytest

from kit.cli import build_parser, leaves


def _actions():
    for leaf in leaves(build_parser()):
        for action in leaf._actions:
            yield leaf.prog, action


def test_no_option_of_any_command_takes_a_bare_int_or_float():
    bare = [
        f"{prog} {'/'.join(a.option_strings) or a.dest}"
        for prog, a in _actions()
        if a.type in (int, float)
    ]
    assert not bare, f"numeric options without kit.commands.common.number: {bare}"


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
        with pytest.raises(KitError, match="give a finite number of seconds"):
            sweep_jobs.wait(tmp_path, poll, timeout)
