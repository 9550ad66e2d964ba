"""Find a site config by name or path, and load it validated into a typed Site."""

from __future__ import annotations

import difflib
import os
from pathlib import Path

from kit.data import shipped
from kit.excerpt import shown
from kit.readfile import read_text
from kit.site.model import NAME_RE, SCHEMA, Site
from kit.site.schema import SiteError, check_document

SHIPPED_DIR = shipped("site-configs")
MAX_SITE_BYTES = 2**20  # a site config is a few kilobytes
MAX_LISTED = 20  # known sites named in an error: a search dir may hold hundreds of files


def user_dir() -> Path:
    """A user's own site configs: $XDG_CONFIG_HOME/kit/sites (default ~/.config/kit/sites)."""
    config = os.environ.get("XDG_CONFIG_HOME", "")
    base = Path(config) if os.path.isabs(config) else Path("~/.config").expanduser()
    return base / "kit" / "sites"


def search_dirs() -> list[Path]:
    """Where a site *name* is looked up, first match wins: the $KIT_SITE_PATH dirs
    (os.pathsep-separated, in order), then the user's dir, then the configs shipped with the
    kit; so a user's file of the same name overrides a shipped one. A path is never searched."""
    extra = [
        Path(os.path.expanduser(p))
        for p in os.environ.get("KIT_SITE_PATH", "").split(os.pathsep)
        if p
    ]
    return extra + [user_dir(), SHIPPED_DIR]


def available_sites() -> list[str]:
    """The names a site can be loaded by; a file whose stem is no valid name is not one of them
    (and its name, which may hold line breaks, never reaches an error message)."""
    names: set[str] = set()
    for directory in search_dirs():
        names.update(p.stem for p in directory.glob("*.yaml") if NAME_RE.fullmatch(p.stem))
    return sorted(names)


def unknown_site(name: str) -> SiteError:
    """The one-line error for a name no search dir holds: the closest known name, then them all."""
    known = available_sites()
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else ";"
    listed = ", ".join(known[:MAX_LISTED]) or "none"
    if len(known) > MAX_LISTED:
        listed += f", ... ({len(known) - MAX_LISTED} more)"
    where = ", ".join(shown(str(d)) for d in search_dirs())
    return SiteError(
        f"unknown site {name!r}{hint} known sites: {listed} (searched {where}; "
        "a path to a site config works too)"
    )


def resolve_site(name_or_path: str | os.PathLike) -> Path:
    """A value naming an existing file, or containing '/' or ending in .yaml/.yml, is a path."""
    text = os.fspath(name_or_path)
    if "\0" in text:  # no path or name holds one (argv cannot; the library API can)
        raise SiteError(
            f"{shown(text)}: a NUL byte is in the site name or path",
            fix="give a site name or the path of a site config",
        )
    candidate = Path(os.path.expanduser(text))  # ~unknown-user stays as typed; Path's would raise
    if candidate.is_file() or "/" in text or text.endswith((".yaml", ".yml")):
        if not candidate.exists():  # a FIFO or a device is refused when read, by what it is
            raise SiteError(
                f"{shown(text)}: no such site config file",
                fix="check the path, or give a name kit site list shows",
            )
        return candidate
    if not NAME_RE.fullmatch(text):
        raise SiteError(
            f"{shown(text)} is neither a site config file nor a valid site name",
            fix="give a name kit site list shows, or the path of a site config",
        )
    for directory in search_dirs():
        path = directory / f"{text}.yaml"
        # not only regular files: a FIFO here is refused by what it is, not skipped
        if path.exists():
            return path
    raise unknown_site(text)


def load_site(name_or_path: str | os.PathLike | Site) -> Site:
    """Load and validate a site config; SiteError names file, line and key on any problem.
    A Site passes through, so every API taking a site takes a name, a path or a Site."""
    if isinstance(name_or_path, Site):
        return name_or_path
    path = resolve_site(name_or_path)
    try:
        text = read_text(path, "site config", limit=MAX_SITE_BYTES, error=SiteError)
    except FileNotFoundError:
        raise SiteError("no such site config file", fix="check the path", where=str(path)) from None
    return Site.from_dict(check_document(text, path, SCHEMA), path=path)
