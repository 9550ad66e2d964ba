"""The files beside a converted image: ``OUT.sha256`` (sha256sum format) and ``OUT.manifest.json``."""
from __future__ import annotations

import json
from dataclasses import asdict
from typing import TYPE_CHECKING

from kit.atomic import atomic_write_text

if TYPE_CHECKING:
    from kit.image.convert import ConversionReport


def manifest_dict(r: "ConversionReport") -> dict:
    img = r.image
    return {
        "tool": "kit image convert",
        "source": {"path": str(r.source), "kind": img.kind, "ref": img.ref,
                   "manifest_digest": img.manifest_digest},
        "config_digest": img.config_digest,
        "layers": [{"index": l.index, "digest": l.digest, "diff_id": l.diff_id,
                    "media_type": l.media_type, "size": l.blob.size} for l in img.layers],
        "output": {"path": str(r.output) if r.output else None, "format": r.format,
                   "sha256": r.sha256, "size": r.size, "entries": r.entries},
        "mount_points_created": r.mount_points,
        "links_created": r.links,
        "counts": r.counts,
        "dropped": [asdict(n) for n in r.dropped],
        "changed": [asdict(n) for n in r.changed],
    }


def write_sidecars(r: "ConversionReport") -> None:
    """Write OUT.sha256 (files only: ``sha256sum -c`` checks it) and OUT.manifest.json."""
    assert r.output is not None
    if r.sha256:
        atomic_write_text(f"{r.output}.sha256", f"{r.sha256}  {r.output.name}\n")
    atomic_write_text(f"{r.output}.manifest.json", json.dumps(manifest_dict(r), indent=2) + "\n")
