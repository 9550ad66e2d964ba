"""Read IMAGE.pair.yaml back at run time: the binds and environment a job's ch-run needs."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from kit.errors import KitError
from kit.mpi.pair import DEFAULT_COMMAND, FIX_MISSING, PAIR_FORMAT, Launch, pair_path
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

    def launch_line(self, command: str = DEFAULT_COMMAND) -> str:
        return self.launch.line(self.site_image, command)


def pair_file_for(image: str | os.PathLike) -> Path:
    """IMAGE.pair.yaml beside IMAGE, or the pair file itself."""
    return Path(image) if str(image).endswith(".pair.yaml") else pair_path(image)


def read_pair_file(path: str | os.PathLike, site: Site) -> PairFile:
    """The pair file for ``site``; KitError naming the file, the key and the fix otherwise."""
    path = Path(path)
    fix = FIX.format(site=site.name)
    try:
        doc = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise KitError(f"{path}: no such pair file; {fix}") from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise KitError(f"{path}: not a pair file kit wrote ({exc}); {fix}") from None
    if not isinstance(doc, dict) or doc.get("kit_pair") != PAIR_FORMAT:
        raise KitError(f"{path}: key kit_pair is not {PAIR_FORMAT}: not a pair file this kit wrote; {fix}")
    if doc.get("site") != site.name:
        raise KitError(f"{path}: key site is {doc.get('site')!r}, but the job runs at {site.name!r}; {fix}")
    key = "binds"
    try:
        binds = [tuple(b.split(":", 1)) for b in doc[key]]
        if any(len(b) != 2 for b in binds):
            raise ValueError("not SRC:DST")
        key, env = "env", doc["env"]
        launch = Launch(site, binds, {str(k): str(v) for k, v in (env["set"] or {}).items()},  # type: ignore[arg-type]
                        {str(k): [str(d) for d in v] for k, v in (env["prepend"] or {}).items()},
                        bool(doc.get("image_environment", True)))  # before the key: converted, so True
        key, verdict, ready = "verdict", doc["verdict"], doc["image_ready"]
        site_image = str(doc["site_image"])
        if not site_image.startswith(("/", "~/")):  # the job may start anywhere
            site_image = str((path.parent / site_image).absolute())
        pair = PairFile(path, site_image, launch, list(verdict.get("warnings") or []), _digest(path))
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise KitError(f"{path}: key {key!r} is missing or malformed ({exc!r}); {fix}") from None
    if not verdict.get("ok"):
        raise KitError(f"{path}: key verdict says the pair was refused ({verdict.get('reasons')}); {fix}")
    if not ready.get("ok", False):
        raise KitError(f"{path}: key image_ready: the image lacks {', '.join(ready.get('missing') or [])}, so "
                       f"its ch-run --bind would fail; {FIX_MISSING}")
    return pair


def _digest(pair: Path) -> str | None:
    """The image's sha256 as `kit image convert` wrote it (IMAGE.sha256: "HEX  NAME")."""
    try:
        hexdigest = (pair.with_name(pair.name.removesuffix(".pair.yaml") + ".sha256").read_text().split() or [""])[0]
    except OSError:
        return None
    return f"sha256:{hexdigest}" if len(hexdigest) == 64 and all(c in "0123456789abcdef" for c in hexdigest) else None
