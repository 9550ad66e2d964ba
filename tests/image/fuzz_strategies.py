"""Generated archive members and byte mutations, shared by the converter's property tests and the
remote installer's: both unpackers meet the same hostile archives."""

from __future__ import annotations

from hypothesis import event as _event
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context

PLAIN = ["a", "b", "c", "d"]
WEIRD = ["..", "x" * 300, "bad\udcff"]  # what no image may hold
ODD = [".", "", "é", "sp ace", "y" * 255]  # what an image may hold
plain = st.sampled_from(PLAIN)
# Mostly plain names, so layers collide; now and then odd or unsafe ones.
component = st.sampled_from(PLAIN * 40 + ODD * 3 + WEIRD)
leaf = st.sampled_from(["e", "f", "g", "a"] * 40 + ODD * 3 + WEIRD)  # files rarely shadow dirs
whiteout = st.one_of(
    st.sampled_from(PLAIN + ["e", "f"]).map(lambda c: ".wh." + c), st.just(".wh..wh..opq")
)


@st.composite
def names(draw, last=component) -> str:
    parts = draw(st.lists(component, max_size=2)) + [draw(last)]
    if draw(st.integers(0, 5)) == 0:
        parts[-1] = draw(whiteout)
    prefix = draw(st.sampled_from(["", "", "", "", "/", "./"]))
    return prefix + "/".join(parts)


@st.composite
def member(draw, earlier: list[str]) -> tuple:
    """One member; hard links mostly name a member drawn before (in this or a lower layer)."""
    kind = draw(st.sampled_from("ffffddllhh"))
    name = draw(names(component if kind == "d" else leaf))
    earlier.append(name)
    if kind == "f":
        size = draw(st.sampled_from([0, 1, 7, 512, 3000]))
        return (
            name,
            "f",
            draw(st.binary(min_size=size, max_size=size))
            if size < 600
            else bytes([draw(st.integers(0, 255))]) * size,
        )
    if kind == "d":
        return (name, "d", None)
    if kind == "h":
        return (
            name,
            "h",
            draw(st.one_of(st.sampled_from(earlier), st.sampled_from(earlier), names(leaf))),
        )
    target = draw(
        st.one_of(
            names(),
            names().map(lambda n: "/" + n.lstrip("/")),
            names().map(lambda n: "../" + n),
            st.just("/"),
            st.sampled_from(["a" * 5000] + ["a/b"] * 20),
        )
    )
    return (name, "l", target)


@st.composite
def layer_lists(draw) -> list[list[tuple]]:
    earlier: list[str] = []
    return [draw(st.lists(member(earlier), max_size=8)) for _ in range(draw(st.integers(1, 3)))]


def event(text: str) -> None:
    """Tally outcomes in --hypothesis-show-statistics (corpus replays run outside hypothesis)."""
    if currently_in_test_context():
        _event(text)


mutation = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 1 << 20), st.integers(1, 255)),
    st.tuples(
        st.just("set"), st.integers(0, 1 << 20), st.sampled_from([0, 0x30, 0x37, 0x80, 0xFF, 0x7B])
    ),
    st.tuples(st.just("truncate"), st.integers(0, 1 << 20), st.just(0)),
    st.tuples(st.just("insert"), st.integers(0, 1 << 20), st.integers(0, 255)),
)


def mutate(data: bytes, ops: list[tuple]) -> bytes:
    buf = bytearray(data)
    for op, where, value in ops:
        if not buf:
            break
        # Most positions fall into a header block or a JSON document: they are most of a
        # small archive. Aim half of them at the first 200 bytes of some 512-byte block.
        pos = (
            where % len(buf)
            if where % 2
            else (where // 2 % (len(buf) // 512 + 1)) * 512 + where % 200
        )
        pos = min(pos, len(buf) - 1)
        if op == "flip":
            buf[pos] ^= value
        elif op == "set":
            buf[pos] = value
        elif op == "truncate":
            del buf[pos:]
        else:
            buf[pos:pos] = bytes([value]) * (1 + where % 512)
    return bytes(buf)
