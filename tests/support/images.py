"""Real test images: a cached Debian tree turned into an OCI archive by buildah, then converted.

`oci_image(...)` runs a real `buildah bud` (FROM scratch, ADD the mmdebstrap tarball, COPY
extra files) in a private vfs store and pushes an oci-archive into the cache; the kit's own
`kit.image.convert` then makes Charliecloud directory images from it, with mount points.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.support.rootfs import CACHE, _locked, debian_rootfs_tar

VENV_SITE = Path(__file__).resolve().parents[2] / ".venv/lib/python3.11/site-packages"


def _key(*parts: object) -> str:
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:12]


def oci_image(
    packages: list[str],
    files: dict[str, Path] | None = None,
    links: dict[str, str] | None = None,
    tag: str = "test",
) -> Path:
    """An oci-archive of a bookworm tree with ``packages``, extra ``files`` (image path ->
    host file or dir) and ``links`` (image path -> symlink target), built once and cached."""
    files, links = files or {}, links or {}
    rootfs = debian_rootfs_tar(packages)
    out = (
        CACHE
        / "images"
        / (
            f"{tag}-"
            f"{_key(rootfs.name, sorted((k, str(v)) for k, v in files.items()), sorted(links.items()))}"
            ".oci.tar"
        )
    )
    with _locked(out):
        if out.exists():
            return out
        with tempfile.TemporaryDirectory(prefix="kit-buildah-") as tmp:
            ctx = Path(tmp) / "ctx"
            ctx.mkdir()
            shutil.copy(rootfs, ctx / "rootfs.tar")
            lines = ["FROM scratch", "ADD rootfs.tar /"]
            extra = ctx / "extra"
            for dst, src in files.items():
                target = extra / dst.lstrip("/")
                target.parent.mkdir(parents=True, exist_ok=True)
                if src.is_dir():
                    shutil.copytree(
                        src, target, symlinks=True, ignore=shutil.ignore_patterns("__pycache__")
                    )
                else:
                    shutil.copy2(src, target)
            for dst, target in links.items():
                path = extra / dst.lstrip("/")
                path.parent.mkdir(parents=True, exist_ok=True)
                path.symlink_to(target)
            if files or links:
                lines.append("COPY extra/ /")
            lines.append('CMD ["/bin/sh"]')
            (ctx / "Dockerfile").write_text("\n".join(lines) + "\n")
            store = ["--root", f"{tmp}/root", "--runroot", f"{tmp}/run", "--storage-driver", "vfs"]
            name = f"localhost/kit-{tag}:latest"
            subprocess.run(
                [
                    "buildah",
                    *store,
                    "bud",
                    "--isolation",
                    "chroot",
                    "-q",
                    "-t",
                    name,
                    "-f",
                    str(ctx / "Dockerfile"),
                    str(ctx),
                ],
                check=True,
                stdout=subprocess.DEVNULL,
            )
            part = out.with_name(out.name + ".part")
            out.parent.mkdir(parents=True, exist_ok=True)
            subprocess.run(
                ["buildah", *store, "push", "-q", name, f"oci-archive:{part}:latest"],
                check=True,
                stdout=subprocess.DEVNULL,
            )
            subprocess.run(
                ["buildah", *store, "rmi", "-a", "-f"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            os.replace(part, out)
    return out


def converted_dir(oci_archive: Path, mount_points: list[str]) -> Path:
    """A Charliecloud directory image made by `kit.image.convert`, cached per mount-point set."""
    from kit.image.convert import convert

    out = oci_archive.with_name(
        oci_archive.name.replace(".oci.tar", "") + f"-dir-{_key(sorted(mount_points))}"
    )
    with _locked(out):
        if not out.is_dir():
            convert(oci_archive, out, fmt="dir", mount_points=mount_points)
    return out


def mpi4py_from_venv() -> Path:
    """The project's mpi4py, built against MPICH by setup.sh (libmpich.so.12, CPython 3.11 as in
    bookworm): copying it into the image is what `pip install mpi4py` would put there."""
    return VENV_SITE / "mpi4py"
