"""kit.sizes.parse_size: the byte sizes a command line takes (kit image convert --max-size)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kit.cli import main
from kit.sizes import UNITS, parse_size


@given(
    number=st.integers(0, 10**9),
    unit=st.sampled_from(sorted(UNITS)),
    tail=st.sampled_from(["", "b", "ib"]),
    upper=st.booleans(),
)
def test_a_whole_number_with_a_unit_is_that_many_bytes(number, unit, tail, upper):
    text = f"{number}{unit}{tail if unit else ''}"
    assert parse_size(text.upper() if upper else text) == number * UNITS[unit]


@given(st.text(max_size=40))
def test_any_text_is_a_size_or_one_valueerror_never_a_negative_or_other_error(text):
    try:
        size = parse_size(text)
    except ValueError as exc:
        assert "is not a size (e.g. 64G, 500M)" in str(exc)
    else:
        assert size >= 0


@pytest.mark.parametrize("text", ["infG", "inf", "nan", "-5G", "1e3G", "G", "", "64Q"])
def test_what_is_not_a_size_is_refused(text):
    with pytest.raises(ValueError, match="is not a size"):
        parse_size(text)


def test_convert_refuses_an_infinite_max_size_as_a_usage_error(tmp_path, capsys):
    """A usage error (exit 2), not an OverflowError (float('inf') has no int) in the crash
    handler.
    """
    with pytest.raises(SystemExit) as exit_:
        main(
            ["image", "convert", str(tmp_path / "src"), str(tmp_path / "out"), "--max-size", "infG"]
        )
    assert exit_.value.code == 2
    assert "--max-size: 'infG' is not a size (e.g. 64G, 500M)" in capsys.readouterr().err
