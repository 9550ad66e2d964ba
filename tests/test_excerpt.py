"""Text the kit quotes in an error is one bounded line, whatever a tool, library or user wrote."""

from hypothesis import given
from hypothesis import strategies as st

from kit.excerpt import clipped, one_line, shown


@given(text=st.text(), limit=st.integers(10, 400), tail=st.booleans())
def test_one_line_is_one_bounded_line(text, limit, tail):
    out = one_line(text, limit, tail)
    assert "\n" not in out and "\r" not in out and "\u2028" not in out and "\x1b" not in out
    if len(" ".join(text.split())) > limit:  # cut, and the cut marked on the side that was dropped
        assert out.startswith("...") if tail else out.endswith("...")


def test_one_line_keeps_where_the_reason_is():
    stderr = "progress\n" * 100 + "error: disk full"
    assert one_line(stderr, 40, tail=True).endswith("error: disk full")
    assert one_line(ValueError("bad\nvalue"), 40) == "bad value"
    assert one_line("a" * 50, 20) == "a" * 17 + "..."


@given(
    value=st.recursive(
        st.text() | st.integers(), lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner)
    )
)
def test_shown_and_clipped_are_one_bounded_line(value):
    for out in (shown(value), clipped(str(value))):
        assert "\n" not in out and len(out) <= 80
