"""The files beside a converted image: ``OUT.sha256`` (sha256sum format) and ``OUT.manifest.json``.

The manifest's ``output.identity`` names the very file or directory it describes (kit.image.target):
a reader compares it with OUT to know the manifest, and the sidecars it lists, are OUT's.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import TYPE_CHECKING

from kit.image_names import sha256_line

if TYPE_CHECKING:
    from kit.image.convert import ConversionReport


def manifest_dict(r: ConversionReport) -> dict:
    img = r.image
    return {
        "tool": "kit image convert",
        "source": {
            "path": str(r.source),
            "kind": img.kind,
            "ref": img.ref,
            "manifest_digest": img.manifest_digest,
        },
        "config_digest": img.config_digest,
        "layers": [
            {
                "index": l.index,
                "digest": l.digest,
                "diff_id": l.diff_id,
                "media_type": l.media_type,
                "size": l.blob.size,
            }
            for l in img.layers
        ],
        "output": {
            "path": str(r.output) if r.output else None,
            "format": r.format,
            "sha256": r.sha256,
            "size": r.size,
            "entries": r.entries,
            "identity": r.identity,
        },
        "sidecars": r.sidecars,
        "mount_points_created": r.mount_points,
        "links_created": r.links,
        "counts": r.counts,
        "dropped": [asdict(n) for n in r.dropped],
        "changed": [asdict(n) for n in r.changed],
    }


def sha256_text(r: ConversionReport) -> str:
    """OUT.sha256 (files only): ``sha256sum -c`` checks it."""
    assert r.output is not None and r.sha256
    return sha256_line(r.sha256, r.output.name)


def manifest_text(r: ConversionReport) -> str:
    return json.dumps(manifest_dict(r), indent=2) + "\n"
