"""The layer forms a probe chose, kept per machine so that the next run starts without probing.

One JSON file per key in gan3d-forms/ of the kit's cache (`kit.cachedir`: `$KIT_CACHE`, else
`$XDG_CACHE_HOME/secure-site-kit`, else `~/.cache/secure-site-kit`). The
key is everything the choice depends on: the CPU model and its flags, the TensorFlow version,
whether ITEX's kernels run the model, the preset, precision, batch per rank, threads per rank,
inter-op threads, ranks per node, and the forms each layer could take. The file is named by the
key's digest and holds the key itself: a file whose key differs (a hash collision, an edited or
copied file), that is damaged or names a form the layer cannot take is not used (a warning says
why, and the probe runs again); one that is not a forms file at all (no `format` of gan3d-forms)
is left as it is, and nothing is cached there.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from pathlib import Path

from kit.atomic import atomic_write_text
from kit.cachedir import kit_cache
from kit.errors import KitError
from kit.readfile import read_json_object
from kit.schema import Field, Section, check_value

FORMAT = "gan3d-forms/1"
MAX_BYTES = 64 * 1024  # a forms file is under 2 kB
FILE_NAME = re.compile(r"[0-9a-f]{24}\.json")


def cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """gan3d-forms/ in the kit's cache (kit.cachedir)."""
    return kit_cache(environ) / "gan3d-forms"


def cache_path(directory: Path, key: Mapping) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]
    return directory / f"{digest}.json"


def schema(allowed: Mapping[str, tuple[str, ...]]) -> Section:
    """A forms file whose forms name each layer once, in a form that layer can take (its key is
    compared whole, and its probe's times are for people)."""
    forms = Section({name: Field("str", choices=tuple(ok)) for name, ok in allowed.items()})
    return Section(
        {"format": Field("str", choices=(FORMAT,)), "key": Field("any"), "forms": Field(forms)},
        open=True,
    )


def read(
    path: Path, key: Mapping, allowed: Mapping[str, tuple[str, ...]]
) -> tuple[dict | None, str]:
    """(the cached forms, "") or (None, why not: "" where there is no file, else a warning)."""
    fix = "none needed, it is measured again"
    try:
        doc = read_json_object(path, "layer forms cache file", fix, limit=MAX_BYTES)
        doc = check_value(doc, path, schema(allowed), what="layer forms cache file", fix=fix)
    except FileNotFoundError:
        return None, ""
    except (KitError, OSError) as exc:
        return None, f"layer forms cache {path} not used: {exc}"
    if doc["key"] != dict(key):
        return None, (
            f"layer forms cache {path}: made for another machine or run (its key differs); "
            f"not used, {fix.removeprefix('none needed, ')}"
        )
    return {name: doc["forms"][name] for name in allowed}, ""


def is_ours(path: Path) -> bool:
    """Whether `path` is missing or a forms file (a damaged or foreign one included), so that
    writing there replaces nothing the kit did not make."""
    if not path.exists() and not path.is_symlink():
        return True
    if path.is_symlink() or not path.is_file():
        return False
    try:
        doc = read_json_object(path, "layer forms cache file", "", limit=MAX_BYTES)
    except (KitError, OSError):
        return False
    tag = doc.get("format")
    return isinstance(tag, str) and tag.startswith("gan3d-forms/")


def write(path: Path, key: Mapping, forms: Mapping[str, str], *, probe: Mapping) -> str:
    """Write the forms atomically; returns a warning ("" when written). An unwritable cache
    directory costs the next run a probe, not this run."""
    if not is_ours(path):
        return (
            f"layer forms cache {path}: not a forms file the kit wrote; left as it is, not written"
        )
    doc = {"format": FORMAT, "key": dict(key), "forms": dict(forms), "probe": dict(probe)}
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(doc, indent=1, sort_keys=True) + "\n")
    except OSError as exc:
        return f"layer forms cache {path} not written ({exc.strerror or exc}); the next run probes again"
    return ""
