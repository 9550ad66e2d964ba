"""kit/pins.py on any input: the pin blocks it writes read back the same, and any other text is
either pins or one PinError (never another exception)."""

from __future__ import annotations

import string
import sys

from hypothesis import example, given
from hypothesis import strategies as st

from tests.support.paths import REPO

sys.path.insert(0, str(REPO / "kit"))
import pins  # noqa: E402  (a script beside the package: stdlib only, run before anything is installed)

sys.path.pop(0)

names = st.from_regex(r"[A-Za-z][A-Za-z0-9._-]{0,20}[A-Za-z0-9]", fullmatch=True)
versions = st.from_regex(
    r"[0-9]{1,3}(\.[0-9]{1,3}){0,3}(\.post[0-9]|rc[0-9]|\+local)?", fullmatch=True
)
markers = st.sampled_from(
    [
        None,
        "python_full_version < '3.10'",
        "python_full_version >= '3.10' and python_full_version < '3.12'",
        "sys_platform == 'win32'",
        "(python_version >= '3.11') or implementation_name != 'PyPy'",
    ]
)
hashes = st.lists(
    st.text(alphabet="0123456789abcdef", min_size=64, max_size=64), min_size=1, max_size=4
)
pin_lists = st.lists(st.builds(pins.Pin, names, versions, markers, hashes.map(tuple)), max_size=8)


@given(pin_lists, st.sampled_from(["", "# comment\n", "    # via\n    #   numpy\n"]))
def test_written_pins_read_back_the_same(tmp_path_factory, written, between):
    path = tmp_path_factory.mktemp("pins") / "constraints.txt"
    path.write_text("# header\n" + between.join(p.block() + "\n" for p in written))
    assert pins.read_pins(path) == written


@given(st.text(alphabet=string.printable + "\x00é", max_size=400))
@example("pyyaml==6.0.3 \\")
@example("pyyaml==6.0.3 --hash=sha256:" + "a" * 64 + " --hash=")
@example("==1 --hash=sha256:" + "a" * 64)
def test_any_text_is_pins_or_one_pin_error(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("pins") / "constraints.txt"
    path.write_text(text, encoding="utf-8")
    try:
        found = pins.read_pins(path)
    except pins.PinError as exc:
        assert "\n" not in str(exc) and str(path) in str(exc)
    else:
        assert all(p.hashes and pins.PIN.fullmatch(f"{p.name}=={p.version}") for p in found)
