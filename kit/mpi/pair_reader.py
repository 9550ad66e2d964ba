"""Read IMAGE.pair.yaml back at run time: the binds and environment a job's ch-run needs."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kit.errors import KitError
from kit.excerpt import clipped, control_character, shown
from kit.image_names import PAIR, SHA256, load_pair_document, pair_path, read_recorded_digest
from kit.mpi.launch import DEFAULT_COMMAND, FIX_MISSING, Launch
from kit.site import Site

FIX = "re-run `kit image convert SRC OUT --site {site}` (it writes OUT.pair.yaml)"


@dataclass(frozen=True)
class PairFile:
    """The run-time half of a pair: decided at conversion, trusted here only after checks."""

    path: Path
    site_image: str
    launch: Launch
    warnings: list[str] = field(default_factory=list)
    digest: str | None = None  # sha256:HEX of the image, from IMAGE.sha256 beside the pair file

    def launch_line(self, command: str = DEFAULT_COMMAND, **how) -> str:
        """``how``: hwthreads and exports, for Launch.line."""
        return self.launch.line(self.site_image, command, **how)


def pair_file_for(image: str | os.PathLike) -> Path:
    """IMAGE.pair.yaml beside IMAGE, or the pair file itself."""
    return Path(image) if str(image).endswith(PAIR) else pair_path(image)


def read_pair_file(path: str | os.PathLike, site: Site) -> PairFile:
    """The pair file for ``site``; KitError naming the file, the line, the key and the fix
    otherwise.
    """
    path = Path(path)
    fix = FIX.format(site=site.name)
    doc = load_pair_document(path, fix, missing=f"no such pair file; {fix}")
    pair = doc.value
    if pair.get("site") != site.name:
        raise KitError(
            f"{doc.where('site')}: key site is {shown(pair.get('site'))}, but the job runs at "
            f"{site.name!r}; {fix}"
        )

    def bad(key: tuple[str | int, ...], problem: str) -> KitError:
        name = ".".join(map(str, key))
        return KitError(f"{doc.where(*key)}: key {name!r} {problem}; {fix}")

    def text(value: Any, *key: str | int) -> str:
        """A string that goes into a batch script: one line."""
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise bad(
                key, "is missing" if value is None else f"is {shown(value)}, expected a string"
            )
        if char := control_character(str(value)):
            raise bad(key, f"holds a control character ({char}): a batch script line would break")
        return str(value)

    def mapping(value: Any, *key: str) -> dict:
        if not isinstance(value, dict):
            raise bad(
                key, "is missing" if value is None else f"is {shown(value)}, expected a mapping"
            )
        return value

    binds = pair.get("binds")
    if not isinstance(binds, list):
        raise bad(("binds",), "is missing or malformed (expected a list of SRC:DST)")
    pairs = [tuple(text(b, "binds", i).split(":", 1)) for i, b in enumerate(binds)]
    if any(len(b) != 2 for b in pairs):
        raise bad(("binds",), "holds an entry that is not SRC:DST")
    env = mapping(pair.get("env"), "env")
    env_set = {
        text(k, "env", "set"): text(v, "env", "set", k)
        for k, v in mapping(env.get("set") or {}, "env", "set").items()
    }
    env_prepend = {}
    for k, dirs in mapping(env.get("prepend") or {}, "env", "prepend").items():
        if not isinstance(dirs, list):
            raise bad(("env", "prepend", k), f"is {shown(dirs)}, expected a list of directories")
        env_prepend[text(k, "env", "prepend")] = [text(d, "env", "prepend", k) for d in dirs]
    launch = Launch(
        site,
        pairs,
        env_set,
        env_prepend,  # type: ignore[arg-type]
        bool(pair.get("image_environment", True)),
    )  # before the key: converted, so True
    verdict, ready = (
        mapping(pair.get("verdict"), "verdict"),
        mapping(pair.get("image_ready"), "image_ready"),
    )
    site_image = text(pair.get("site_image"), "site_image")
    if not site_image.startswith(("/", "~/")):  # the job may start anywhere
        site_image = str((path.parent / site_image).absolute())
    warnings = verdict.get("warnings") or []
    if not verdict.get("ok"):
        raise bad(("verdict",), f"says the pair was refused ({shown(verdict.get('reasons'), 200)})")
    if not ready.get("ok", False):
        missing = ready.get("missing") if isinstance(ready.get("missing"), list) else []
        raise KitError(
            f"{doc.where('image_ready')}: key image_ready: the image lacks "
            f"{clipped(', '.join(map(str, missing[:20])), 300)}, so its ch-run --bind would fail; "
            f"{FIX_MISSING}"
        )
    return PairFile(
        path,
        site_image,
        launch,
        [str(w) for w in warnings] if isinstance(warnings, list) else [],
        _digest(path),
    )


def _digest(pair: Path) -> str | None:
    """The image's sha256 as `kit image convert` wrote it (IMAGE.sha256 beside the pair file)."""
    image = pair.name.removesuffix(PAIR)
    try:
        hexdigest = read_recorded_digest(pair.with_name(image + SHA256), image)
    except (OSError, KitError):  # no usable checksum: the digest is unknown
        return None
    return f"sha256:{hexdigest}" if hexdigest else None
