"""Build real test images with umoci, skopeo and buildah (cached by recipe hash), and
hand-craft hostile OCI layouts with tarfile.

The cache lives in ~/.cache/secure-site-kit/test-images/<recipe hash>/ so a rerun reuses
the images; a build happens in a temporary sibling and is renamed into place.
"""

from __future__ import annotations

import gzip
import hashlib
import inspect
import io
import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

from tests.support.tmpdirs import remove_tree

CACHE = Path(os.environ.get("KIT_CACHE", Path.home() / ".cache/secure-site-kit")) / "test-images"


def run(*cmd: str, cwd: Path | None = None) -> str:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return proc.stdout


def cached(builder) -> Path:
    """Run ``builder(dir)`` once per recipe (its source text) and return the cached dir."""
    recipe = [builder, busybox_rootfs, busybox_rootfs_into]
    key = hashlib.sha256("".join(map(inspect.getsource, recipe)).encode()).hexdigest()[:16]
    final = CACHE / f"{builder.__name__}-{key}"
    if (final / "done").exists():
        return final
    tmp = CACHE / f".{final.name}.{os.getpid()}.part"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        builder(tmp)
        (tmp / "done").write_text("ok\n")
        for stale in CACHE.glob(f"{builder.__name__}-*"):  # older recipes
            if stale != final:
                shutil.rmtree(stale, ignore_errors=True)
        try:
            os.replace(tmp, final)
        except OSError:
            if not (final / "done").exists():  # else a concurrent run finished it first
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def busybox_rootfs(root: Path) -> None:
    """A minimal runnable root: static busybox, sh, passwd/group (ch-run binds onto those)."""
    (root / "bin").mkdir(parents=True)
    (root / "etc").mkdir()
    shutil.copy2("/bin/busybox", root / "bin/busybox")
    os.symlink("busybox", root / "bin/sh")
    (root / "etc/passwd").write_text("root:x:0:0:root:/:/bin/sh\n")
    (root / "etc/group").write_text("root:x:0:\n")


def rich_image(out: Path) -> None:
    """An OCI layout (tag ``rich``, gzip) with every case the converter must get right.

    Layer 0 (umoci repack): busybox root, files, hard links, absolute symlinks, setuid and
    setgid files, a read-only dir, a FIFO, device nodes (in and outside /dev).
    Layer 1 (umoci repack): deletions (whiteouts), file->dir, dir->file, symlink->file,
    deletion of a hard link's first name.
    Layer 2 (hand-made tar, umoci raw add-layer): opaque directory, file->symlink.
    """
    run("umoci", "init", "--layout", str(out / "oci"))
    run("umoci", "new", "--image", f"{out}/oci:rich")
    bundle = out / "bundle"
    run("umoci", "unpack", "--image", f"{out}/oci:rich", str(bundle))
    r = bundle / "rootfs"
    busybox_rootfs_into(r)
    (r / "data").mkdir()
    (r / "data/keep.txt").write_text("keep\n")
    (r / "data/gone.txt").write_text("gone\n")
    (r / "data/big").write_bytes(os.urandom(300_000))
    (r / "opq").mkdir()
    (r / "opq/a").write_text("a\n")
    (r / "opq/sub").mkdir()
    (r / "opq/sub/b").write_text("b\n")
    (r / "f2d").write_text("was a file\n")
    (r / "d2f").mkdir()
    (r / "d2f/child").write_text("child\n")
    os.symlink("data/keep.txt", r / "s2f")
    os.symlink("/data/keep.txt", r / "abs")
    os.symlink("/data", r / "absdir")
    os.symlink("/", r / "rootlink")
    (r / "hl").mkdir()
    (r / "hl/one").write_text("hard\n")
    os.link(r / "hl/one", r / "hl/two")
    os.link(r / "hl/one", r / "hl/three")
    (r / "bin/suid").write_text("#!/bin/sh\necho suid\n")
    os.chmod(r / "bin/suid", 0o4755)
    (r / "bin/sgid").write_text("#!/bin/sh\n")
    os.chmod(r / "bin/sgid", 0o2711)
    (r / "ro").mkdir()
    (r / "ro/file").write_text("read only\n")
    os.chmod(r / "ro/file", 0o444)
    os.chmod(r / "ro", 0o555)
    os.mkfifo(r / "fifo")
    (r / "dev").mkdir()
    os.mknod(r / "dev/null", 0o666 | 0o020000, os.makedev(1, 3))
    os.mknod(r / "cdev", 0o600 | 0o020000, os.makedev(1, 5))
    (r / "usr/lib").mkdir(parents=True)
    (r / "usr/lib/libdemo.so.1").write_bytes(b"\x7fELF not really")
    run("umoci", "repack", "--refresh-bundle", "--image", f"{out}/oci:rich", str(bundle))
    # layer 1
    (r / "data/gone.txt").unlink()
    (r / "f2d").unlink()
    (r / "f2d").mkdir()
    (r / "f2d/inner").write_text("now a dir\n")
    shutil.rmtree(r / "d2f")
    (r / "d2f").write_text("now a file\n")
    (r / "s2f").unlink()
    (r / "s2f").write_text("now a file\n")
    (r / "hl/one").unlink()
    run("umoci", "repack", "--image", f"{out}/oci:rich", str(bundle))
    # layer 2: what umoci's differ never writes
    layer = out / "layer2.tar"
    with tarfile.open(layer, "w", format=tarfile.PAX_FORMAT) as tf:
        for name, kind, data in [
            ("opq", "d", None),
            ("opq/.wh..wh..opq", "f", b""),
            ("opq/c", "f", b"c\n"),
            ("data/big", "l", "keep.txt"),
        ]:
            info = tarfile.TarInfo(name)
            info.mtime = 1_700_000_000
            if kind == "d":
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tf.addfile(info)
            elif kind == "l":
                info.type, info.linkname = tarfile.SYMTYPE, data
                tf.addfile(info)
            else:
                info.size, info.mode = len(data), 0o644
                tf.addfile(info, io.BytesIO(data))
    run("umoci", "raw", "add-layer", "--image", f"{out}/oci:rich", str(layer))
    run(
        "umoci",
        "config",
        "--image",
        f"{out}/oci:rich",
        "--config.env",
        "PATH=/bin",
        "--config.env",
        "FOO=bar",
        "--config.workingdir",
        "/data",
        "--config.label",
        "org.example=demo",
        "--config.volume",
        "/scratch",
    )
    run("umoci", "gc", "--layout", str(out / "oci"))
    shutil.rmtree(bundle)
    layer.unlink()
    # The same image in the other input forms, and the reference unpack.
    run("skopeo", "copy", f"oci:{out}/oci:rich", f"docker-archive:{out}/docker.tar:rich:latest")
    run("skopeo", "copy", f"oci:{out}/oci:rich", f"oci-archive:{out}/oci.tar:rich")
    run(
        "skopeo",
        "copy",
        "--dest-compress",
        "--dest-compress-format",
        "zstd",
        f"oci:{out}/oci:rich",
        f"oci:{out}/oci-zstd:rich",
    )
    run(
        "umoci", "raw", "unpack", "--rootless", "--image", f"{out}/oci:rich", str(out / "reference")
    )


def busybox_rootfs_into(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    tmp = root.parent / ".busybox"
    busybox_rootfs(tmp)
    for item in tmp.iterdir():
        os.replace(item, root / item.name)
    tmp.rmdir()


def buildah_image(out: Path) -> None:
    """A Dockerfile build (buildah bud --layers, vfs, chroot): ADD rootfs, RUN rm/mkdir, ENV."""
    ctx = out / "ctx"
    busybox_rootfs(ctx / "rootfs")
    (ctx / "rootfs/data").mkdir()
    (ctx / "rootfs/data/gone").write_text("gone\n")
    (ctx / "rootfs/data/keep").write_text("keep\n")
    run("tar", "-C", str(ctx / "rootfs"), "-cf", str(ctx / "rootfs.tar"), ".")
    (ctx / "Dockerfile").write_text(
        "FROM scratch\nADD rootfs.tar /\n"
        "RUN rm /data/gone && mkdir -p /opt/app && echo hello > /opt/app/msg\n"
        "ENV GREETING=hello APP=/opt/app\n"
    )
    store = [
        "--root",
        str(out / "storage"),
        "--runroot",
        str(out / "run"),
        "--storage-driver",
        "vfs",
    ]
    run("buildah", *store, "bud", "--isolation", "chroot", "--layers", "-t", "kit-test:1", str(ctx))
    run("buildah", *store, "push", "kit-test:1", f"docker-archive:{out}/docker.tar:kit-test:1")
    run("buildah", *store, "push", "kit-test:1", f"oci-archive:{out}/oci.tar:kit-test:1")
    run("buildah", *store, "rmi", "-a")
    remove_tree(out / "storage")  # rootless: its files are subordinate ids' (buildah unshare)
    remove_tree(out / "run")
    shutil.rmtree(ctx)
    run("skopeo", "copy", f"oci-archive:{out}/oci.tar", f"oci:{out}/oci:kit-test")
    run(
        "umoci",
        "raw",
        "unpack",
        "--rootless",
        "--image",
        f"{out}/oci:kit-test",
        str(out / "reference"),
    )


# -- hand-made OCI layouts (hostile archives) --------------------------------------------


def tar_bytes(members: list[tuple]) -> bytes:
    """members: (name, kind, payload) with kind f (data bytes), d, l (symlink), h (hard link)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tf:
        for name, kind, payload in members:
            info = tarfile.TarInfo(name)
            info.mode = 0o755 if kind == "d" else 0o644
            if kind == "d":
                info.type = tarfile.DIRTYPE
                tf.addfile(info)
            elif kind in ("l", "h"):
                info.type = tarfile.SYMTYPE if kind == "l" else tarfile.LNKTYPE
                info.linkname = payload
                tf.addfile(info)
            else:
                info.size = len(payload)
                tf.addfile(info, io.BytesIO(payload))
    return buf.getvalue()


def _blob(root: Path, data: bytes) -> dict:
    digest = hashlib.sha256(data).hexdigest()
    (root / "blobs/sha256").mkdir(parents=True, exist_ok=True)
    (root / "blobs/sha256" / digest).write_bytes(data)
    return {"digest": f"sha256:{digest}", "size": len(data)}


def oci_layout(
    root: Path,
    layers: list[bytes],
    gzip_layers: bool = True,
    env=("PATH=/bin",),
    stored=lambda data: data,
) -> Path:
    """Write an OCI layout (tag ``t``) whose layers are the given uncompressed tars.

    ``stored`` may alter a layer's stored bytes before they are hashed (e.g. truncate them).
    """
    root.mkdir(parents=True)
    (root / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    descs, diff_ids = [], []
    for tar in layers:
        diff_ids.append("sha256:" + hashlib.sha256(tar).hexdigest())
        data = stored(gzip.compress(tar, 1, mtime=0) if gzip_layers else tar)
        mt = "application/vnd.oci.image.layer.v1.tar" + ("+gzip" if gzip_layers else "")
        descs.append({"mediaType": mt, **_blob(root, data)})
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Env": list(env)},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
        "history": [],
    }
    cdesc = {
        "mediaType": "application/vnd.oci.image.config.v1+json",
        **_blob(root, json.dumps(config).encode()),
    }
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": cdesc,
        "layers": descs,
    }
    mdesc = {
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        **_blob(root, json.dumps(manifest).encode()),
        "annotations": {"org.opencontainers.image.ref.name": "t"},
    }
    (root / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [mdesc]}))
    return root


def layer_blob(root: Path, index: int) -> Path:
    """Path of layer ``index``'s blob in a layout made by oci_layout."""
    idx = json.loads((root / "index.json").read_text())
    mpath = root / "blobs/sha256" / idx["manifests"][0]["digest"].split(":")[1]
    layer = json.loads(mpath.read_text())["layers"][index]
    return root / "blobs/sha256" / layer["digest"].split(":")[1]


RECIPE = """FROM scratch
ADD rootfs.tar /
ARG HOSTMPI_TARGET=/nowhere
ARG HOSTMPI_DIRS=0
ARG HOSTMPI_LIBDIR=none
RUN i=0; while [ "$i" -lt "$HOSTMPI_DIRS" ]; do mkdir -p "$HOSTMPI_TARGET/lib$i"; i=$((i+1)); done; \\
    echo "$HOSTMPI_LIBDIR" > /libdir
"""


def layer(members: list[tuple]) -> bytes:
    """A layer tar; members are (name, kind, payload, mode) with kind f, d, l (symlink), c (char
    device).
    """
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tf:
        for name, kind, payload, mode in members:
            info = tarfile.TarInfo(name)
            info.mode = mode
            info.type = {
                "f": tarfile.REGTYPE,
                "d": tarfile.DIRTYPE,
                "l": tarfile.SYMTYPE,
                "c": tarfile.CHRTYPE,
            }[kind]
            if kind == "l":
                info.linkname = payload
            if kind == "f":
                info.size = len(payload)
            tf.addfile(info, io.BytesIO(payload) if kind == "f" else None)
    return buf.getvalue()


def busybox_root(*extra: tuple) -> bytes:
    """A runnable root with no /etc/passwd or /etc/group unless EXTRA adds them."""
    busybox = Path("/bin/busybox").read_bytes()
    return layer(
        [
            ("bin", "d", None, 0o755),
            ("bin/busybox", "f", busybox, 0o755),
            ("bin/sh", "l", "busybox", 0o777),
            ("etc", "d", None, 0o755),
            *extra,
        ]
    )
