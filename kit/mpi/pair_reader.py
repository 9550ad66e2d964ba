"""Read IMAGE.pair.yaml back at run time: the binds and environment a job's ch-run needs."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from kit.errors import KitError
from kit.excerpt import clipped, printable, shown
from kit.image_names import PAIR, SHA256, load_pair_document, pair_path, read_recorded_digest
from kit.mpi.launch import DEFAULT_COMMAND, FIX_MISSING, Launch
from kit.schema import Bad, Field, Items, Names, Section, check_doc
from kit.site import Site


def _bind(value: str) -> Bad | None:
    return None if ":" in value else Bad(f"{shown(value)} is not SRC:DST")


# What a job's ch-run needs of the pair file `kit image convert` writes; its other keys (the two
# MPIs, the links, the launch line shown) are for people and `kit mpi check`.
PAIR_SCHEMA = Section(
    {
        "site": Field("str"),
        "site_image": Field("str"),
        "binds": Field(Items(Field("str", check=_bind))),
        "env": Field(
            Section(
                {
                    "set": Field("map[str,str]", nullable=True, required=False, default={}),
                    "prepend": Field(
                        Names(Field("list[str]")), nullable=True, required=False, default={}
                    ),
                },
                open=True,
            )
        ),
        "image_environment": Field("bool", required=False, default=True),  # True before the key
        "verdict": Field(
            Section(
                {
                    "ok": Field("bool", required=False, default=False),
                    "reasons": Field("any", required=False),
                    "warnings": Field(
                        Items(Field("any")), nullable=True, required=False, default=[]
                    ),
                },
                open=True,
            )
        ),
        "image_ready": Field(
            Section(
                {
                    "ok": Field("bool", required=False, default=False),
                    "missing": Field("any", required=False, default=[]),
                },
                open=True,
            )
        ),
    },
    open=True,
)

FIX = "re-run `kit image convert SRC OUT --site {site}` (it writes OUT.pair.yaml)"
WARNINGS_KEPT, WARNING_LIMIT = 20, 300  # a pair file's warnings are printed: bound them here


@dataclass(frozen=True)
class PairFile:
    """The run-time half of a pair: decided at conversion, trusted here only after checks."""

    path: Path
    site_image: str
    launch: Launch
    warnings: list[str] = field(default_factory=list)  # bounded and escaped, safe to print
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
    doc = load_pair_document(path, fix, missing="no such pair file", missing_fix=fix)
    if doc.value.get("site") != site.name:
        raise KitError(
            f"key site is {shown(doc.value.get('site'))}, but the job runs at {site.name!r}",
            fix=fix,
            where=doc.where("site"),
        )
    pair = check_doc(doc, PAIR_SCHEMA, "pair file", fix=fix)
    env = pair["env"]
    env_set = {k: str(v) for k, v in (env["set"] or {}).items()}
    env_prepend = env["prepend"] or {}
    pairs = [tuple(b.split(":", 1)) for b in pair["binds"]]
    launch = Launch(
        site=site,
        binds=pairs,
        env_set=env_set,
        env_prepend=env_prepend,
        image_env=pair["image_environment"],
    )
    verdict, ready = pair["verdict"], pair["image_ready"]
    site_image = pair["site_image"]
    if not site_image.startswith(("/", "~/")):  # the job may start anywhere
        site_image = str((path.parent / site_image).absolute())
    warnings = verdict["warnings"] or []
    if not verdict["ok"]:
        raise KitError(
            f"verdict: says the pair was refused ({shown(verdict['reasons'], 200)})",
            fix=fix,
            where=doc.where("verdict"),
        )
    if not ready["ok"]:
        missing = ready["missing"] if isinstance(ready["missing"], list) else []
        raise KitError(
            f"key image_ready: the image lacks {clipped(', '.join(map(str, missing[:20])), 300)}, "
            "so its ch-run --bind would fail",
            fix=FIX_MISSING,
            where=doc.where("image_ready"),
        )
    return PairFile(
        path=path,
        site_image=site_image,
        launch=launch,
        warnings=_kept(warnings),
        digest=_digest(path),
    )


def _kept(warnings: list) -> list[str]:
    """The verdict's warnings as lines safe to print: each escaped and cut, at most WARNINGS_KEPT
    of them and a "... N more" line, so a hostile pair file costs a render no more than this."""
    kept = [printable(w, WARNING_LIMIT) for w in warnings[:WARNINGS_KEPT]]
    more = len(warnings) - WARNINGS_KEPT
    return kept + ([f"... {more} more (in the pair file's verdict.warnings)"] if more > 0 else [])


def _digest(pair: Path) -> str | None:
    """The image's sha256 as `kit image convert` wrote it (IMAGE.sha256 beside the pair file)."""
    image = pair.name.removesuffix(PAIR)
    try:
        hexdigest = read_recorded_digest(pair.with_name(image + SHA256), image)
    except (OSError, KitError):  # no usable checksum: the digest is unknown
        return None
    return f"sha256:{hexdigest}" if hexdigest else None
