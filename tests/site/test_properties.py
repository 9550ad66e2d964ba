"""Property: any mutation of a real site config either loads into a Site whose every string is one
line of printable text, or is refused with one short SiteError line -- through load_site and through
`kit site validate` -- never a traceback, a hang, or an expanded value in the message."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import tempfile
import unicodedata
from pathlib import Path
from typing import Any

from hypothesis import example, given

from kit.cli import main
from kit.site import Site, SiteError, load_site
from tests.site.hostile_yaml import site_bytes

MAX_MESSAGE = 2000  # characters besides the file name (which appears once per listed problem)


def broken(text: str) -> bool:
    """A control character or a line/paragraph separator: what splits a line of a script or a
    log.
    """
    return any(unicodedata.category(c) in ("Cc", "Zl", "Zp") for c in text)


def strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if dataclasses.is_dataclass(value):
        return [s for f in dataclasses.fields(value) for s in strings(getattr(value, f.name))]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in strings(v)]
    if isinstance(value, dict):
        return [s for kv in value.items() for v in kv for s in strings(v)]
    return []


def check_outcome(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "site.yaml"
        path.write_bytes(data)
        try:
            site = load_site(path)
        except SiteError as exc:
            message = str(exc)
            assert "\n" not in message and "\r" not in message, message
            assert len(message.replace(str(path), "")) < MAX_MESSAGE, message[:300]
        else:
            assert isinstance(site, Site)
            bad = [s for s in strings(site) if broken(s)]
            assert bad == [], bad


@given(site_bytes())
@example(b"name: laptop\nmodules: [\"a\\nb\"]\n")
@example(b"name: laptop\nnode:\n  sockets: " + b"9" * 5000 + b"\n")
@example(b"a: \x01")
@example(b"\xff")
@example(b"name: !!python/object/apply:os.system ['true']\n")
def test_any_mutated_site_loads_clean_or_is_one_line(data):
    check_outcome(data)


@given(site_bytes())
def test_kit_site_validate_never_crashes(data):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "site.yaml"
        path.write_bytes(data)
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            rc = main(["site", "validate", str(path)])
        assert rc in (0, 1)
        assert err.getvalue().count("\n") == (1 if rc else 0), err.getvalue()[:500]
        assert "internal error" not in err.getvalue()
