"""The artifact layout's names, written once for both ends of a push: the kit (kit.image_names
builds on them) and the script the site runs with a bare python3, into which
kit.transfer.assemble inlines this text. So: Python 3.6 and the standard library only.

An image OUT is a .tar.gz, .tar, .sqfs, .sif file or a directory; beside it lie OUT.sha256,
OUT.pair.yaml and OUT.manifest.json. On the site it is installed as IMAGE_DIR/NAME@<sha12>
(with .sqfs or .sif for those formats), and IMAGE_DIR/NAME.current names the version in use.
"""

import re

TAR_GZ, TAR, SQUASH = (".tar.gz", ".tgz"), (".tar",), (".sqfs", ".squashfs", ".squash")
SIF = (".sif",)  # Apptainer's single-file image (kit.image.sif)
SUFFIXES = TAR_GZ + SQUASH + TAR + SIF  # the files kit image convert writes and kit transfer moves
NAME_MAX = 200  # characters of an image's name or file name: room for "@<sha>.sqfs" within 255
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,%d}" % (NAME_MAX - 1))
SHA256_RE = re.compile(r"[0-9a-f]{64}")
SHA256, PAIR, MANIFEST = ".sha256", ".pair.yaml", ".manifest.json"
# The files beside OUT, in the order a conversion commits them: the manifest, which records the
# image's identity, last, so that a manifest describing OUT vouches for every other one.
SIDECARS = (SHA256, PAIR, MANIFEST)
CURRENT = ".current"  # IMAGE_DIR/NAME.current -> NAME@<sha12>: the installed version in use
SIF_MAGIC, SIF_MAGIC_AT = b"SIF_MAGIC\0", 32  # a SIF's magic follows its 32-byte launch line


def is_name(text):
    """Whether TEXT can name an image or its file on both ends: NAME_RE whole, and no '..'
    (never a path's parent part)."""
    return NAME_RE.fullmatch(text) is not None and ".." not in text
