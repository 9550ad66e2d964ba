"""Where the kit keeps its cache and its state: one rule, so the kit, gan3d, the tests and the
shell scripts never disagree about a directory.

The cache is `$KIT_CACHE` when set (the kit's directory itself, as scripts/setup.sh and
scripts/lock.sh read it), else `$XDG_CACHE_HOME/secure-site-kit`, else
`~/.cache/secure-site-kit`. The state (crash reports) is `$XDG_STATE_HOME/secure-site-kit`, else
`~/.local/state/secure-site-kit`. A relative or empty XDG variable is ignored, as the XDG Base
Directory specification says: its meaning would change with the working directory. Standard
library only: gan3d imports it inside the image.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

NAME = "secure-site-kit"  # the kit's directory under each XDG base


def _base(value: str, home: str, default: tuple[str, ...]) -> Path:
    """An XDG base directory: VALUE if it is an absolute path, else HOME/DEFAULT (HOME empty: as
    Path.home() finds it)."""
    if os.path.isabs(value):
        return Path(value)
    return Path(home or os.path.expanduser("~")).joinpath(*default)


def cache_base(environ: Mapping[str, str] | None = None) -> Path:
    """The directory above the kit's cache: where a check of who may write above it starts."""
    return kit_cache(environ).parent


def kit_cache(environ: Mapping[str, str] | None = None) -> Path:
    """The kit's cache directory: $KIT_CACHE, else $XDG_CACHE_HOME/secure-site-kit, else
    ~/.cache/secure-site-kit (``environ``: os.environ where None)."""
    env = os.environ if environ is None else environ
    moved = env.get("KIT_CACHE", "")
    if moved:
        return Path(moved)
    return _base(env.get("XDG_CACHE_HOME", ""), env.get("HOME", ""), (".cache",)) / NAME


def kit_state(environ: Mapping[str, str] | None = None) -> Path:
    """The kit's state directory: $XDG_STATE_HOME/secure-site-kit, else
    ~/.local/state/secure-site-kit."""
    env = os.environ if environ is None else environ
    return _base(env.get("XDG_STATE_HOME", ""), env.get("HOME", ""), (".local", "state")) / NAME
