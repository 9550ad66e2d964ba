"""The kit's own offline wheelhouse (`make wheelhouse`) as `bundle --with-kit` carries it.

Only what the wheelhouse's SHA256SUMS lists is taken, each file read once without following a
link and checked against its sum on the way into the bundle, so a damaged or half-made wheelhouse
never reaches the secure side looking whole.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from kit.errors import KitError
from kit.transfer import verify as checker
from kit.transfer.sums import SUMS, read_sums

FIX = "make wheelhouse (or give --kit-wheelhouse PATH of a wheelhouse it made)"
SUBDIR = "kit"  # where the bundle holds it
KIT_WHEEL = "secure_site_kit-"


@dataclass(frozen=True)
class Wheelhouse:
    path: Path
    files: list[tuple[str, str, int]]  # (sha256, name, size), SHA256SUMS last

    def open(self, name: str) -> int:
        """A read fd of a listed file; a link, FIFO or missing file is refused with the fix."""
        try:
            found = checker.open_in(str(self.path), name)
        except (OSError, ValueError) as exc:
            raise KitError(
                f"{self.path / name}: {getattr(exc, 'strerror', None) or exc}", fix=f"{FIX}"
            ) from None
        if found is None:
            raise KitError(f"{self.path / name}: listed in {SUMS} but missing", fix=f"{FIX}")
        return found[0]


def open_wheelhouse(path: Path) -> Wheelhouse:
    """The wheelhouse at `path`, refused in one line if it is not one `make wheelhouse` wrote."""
    path = Path(path)
    if not path.is_dir():
        raise KitError(f"{path}: no wheelhouse there", fix=f"{FIX}")
    listed = read_sums(path / SUMS, FIX)
    if not any(name.startswith(KIT_WHEEL) and name.endswith(".whl") for _, name in listed):
        raise KitError(
            f"{path / SUMS}: lists no {KIT_WHEEL}*.whl, so it is not the kit's wheelhouse",
            fix=f"{FIX}",
        )
    for _, name in listed:
        if not checker.NAME.fullmatch(f"{SUBDIR}/{name}"):
            raise KitError(f"{path / SUMS}: {name!r} is nested too deep for a bundle", fix=f"{FIX}")
    files = []
    for sha, name in [*listed, ("", SUMS)]:
        fd = Wheelhouse(path, []).open(name)
        try:
            files.append((sha, name, os.fstat(fd).st_size))
        finally:
            os.close(fd)
    return Wheelhouse(path, files)
