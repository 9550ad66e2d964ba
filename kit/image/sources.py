"""Find the image inside SRC by its content (not its name) and describe its blobs.

Kinds: ``docker-archive`` (``docker save`` / ``buildah push docker-archive:``),
``oci-dir`` (OCI image layout directory), ``oci-archive`` (that layout as a tar),
``rootfs-tar`` and ``rootfs-dir`` (a flat root filesystem, one pseudo-layer).
Blobs inside an archive are byte ranges of it, so nothing is extracted to disk.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import re
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from kit.errors import KitError
from kit.image.regular import open_regular
from kit.tarsafe import first_nonzero, forget_members, open_tar

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
REF_NAME = "org.opencontainers.image.ref.name"


@dataclass(frozen=True)
class Blob:
    """A byte range of a file: a whole blob file, or a member of an outer tar."""

    path: Path
    offset: int
    size: int


@dataclass(frozen=True)
class Layer:
    """One layer; ``digest`` checks the stored bytes, ``diff_id`` the uncompressed tar."""

    index: int
    media_type: str
    blob: Blob  # for a root-filesystem directory: the directory, size 0
    digest: str | None = None
    diff_id: str | None = None

    @property
    def label(self) -> str:
        """How errors name this layer: index and digest."""
        return f"layer {self.index} ({self.digest or self.diff_id or 'no digest'})"


@dataclass
class Image:
    kind: str
    source: Path
    ref: str | None = None
    manifest_digest: str | None = None
    config: dict = field(default_factory=dict)
    config_digest: str | None = None
    layers: list[Layer] = field(default_factory=list)


@dataclass(frozen=True)
class Candidate:
    """One image an input holds, as listed in errors and by ``kit image inspect``."""

    names: tuple[str, ...]
    digest: str | None
    payload: object


MAX_ARCHIVE_MEMBERS = 1_000_000  # members of an outer image archive (a layer is one member)
MAX_INDEX_DEPTH = 4  # image indexes nested in image indexes
DIGEST = re.compile(r"sha256:[0-9a-f]{64}|sha512:[0-9a-f]{128}")
CHUNK = 1 << 20


def detect(src: Path) -> str:
    """Return the kind of SRC, looking at its content."""
    if not src.exists():
        raise KitError(
            f"{src}: no such file or directory",
            fix="give an existing image archive, OCI layout directory or root filesystem",
        )
    if src.is_dir():
        if os.path.lexists(src / "oci-layout") and os.path.lexists(src / "index.json"):
            return "oci-dir"
        return "rootfs-dir"
    with open_regular(src, "the source") as fh:
        magic = fh.read(4)
    if magic[:2] == b"\x1f\x8b" or magic == b"\x28\xb5\x2f\xfd":
        return "rootfs-tar"  # compressed: only flat root filesystems come this way
    names = set()
    for info in _scan(src):
        name = _clean(info.name)
        if name.count("/") > 2:  # image archives are shallow; a root filesystem is not
            return "rootfs-tar"
        names.add(name)
    if "oci-layout" in names and "index.json" in names:
        return "oci-archive"
    if "manifest.json" in names:
        return "docker-archive"
    return "rootfs-tar"


def _scan(src: Path) -> Iterator[tarfile.TarInfo]:
    """The members of the tar SRC, read to its real end (a corrupt header is an error)."""
    with open_regular(src, "the source") as fh:
        count = 0
        try:
            tf = open_tar(fh)
            while (info := tf.next()) is not None:
                forget_members(tf)
                count += 1
                if count > MAX_ARCHIVE_MEMBERS:
                    raise KitError(
                        f"{src}: more than {MAX_ARCHIVE_MEMBERS} members; "
                        "an image archive holds a few per layer",
                        fix="pass the image archive",
                    )
                yield info
            fh.seek(tf.offset)
            bad = first_nonzero(iter(lambda: fh.read(CHUNK), b""), tf.offset)
        except (tarfile.TarError, ValueError, EOFError) as exc:
            raise KitError(
                f"{src}: not a tar archive, OCI layout or directory, or a corrupt one ({exc})",
                fix="pass a docker-archive, OCI layout/archive or root filesystem",
            ) from None
    if bad is not None:
        raise KitError(
            f"{src}: "
            f"corrupt tar header at byte {tf.offset} (data at byte {bad} after what tar reads as the end): "
            "the members from there on would be lost",
            fix="copy or export the archive again",
        )


def _clean(name: str) -> str:
    return posixpath.normpath(name.lstrip("/")).removeprefix("./")


def _type_name(value: object) -> str:
    return {
        dict: "an object",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        type(None): "null",
    }.get(type(value), "a number")


T = TypeVar("T")


class _Doc:
    """Typed access to a parsed JSON document; a wrong type is a KitError naming the field."""

    def __init__(self, where: str, fix: str):
        self.where, self.fix = where, fix

    def want(self, value: object, typ: type[T], field: str, *, optional: bool = False) -> T:
        if value is None and optional:
            return typ()
        if not isinstance(value, typ) or isinstance(value, bool) and typ is int:
            raise KitError(
                f"{self.where}: {field} is {_type_name(value)}, expected {_type_name(typ())}",
                fix=f"{self.fix}",
            )
        return value

    def strings(self, value: object, field: str, optional: bool = True) -> list[str]:
        items = self.want(value, list, field, optional=optional)
        for n, item in enumerate(items):
            self.want(item, str, f"{field}[{n}]")
        return items

    def digest(self, value: object, field: str) -> str:
        digest = self.want(value, str, field)
        if not DIGEST.fullmatch(digest):
            raise KitError(
                f"{self.where}: "
                f"{field} {digest[:80]!r} is not a digest of the form sha256:<64 hex digits>",
                fix=f"{self.fix}",
            )
        return digest


def check_config(config: object, where: str) -> dict:
    """The fields of an image config the converter and inspect read, with their JSON types."""
    doc = _Doc(where, "the image config is malformed, rebuild or export the image again")
    config = doc.want(config, dict, "the config")
    for key in ("architecture", "os"):
        doc.want(config.get(key), str, key, optional=True)
    doc.want(config.get("history"), list, "history", optional=True)
    cfg = doc.want(config.get("config"), dict, "config", optional=True)
    for key in ("Env", "Shell", "Entrypoint", "Cmd"):
        doc.strings(cfg.get(key), f"config.{key}")
    doc.want(cfg.get("WorkingDir"), str, "config.WorkingDir", optional=True)
    doc.want(cfg.get("Volumes"), dict, "config.Volumes", optional=True)
    for key, value in doc.want(cfg.get("Labels"), dict, "config.Labels", optional=True).items():
        doc.want(value, str, f"config.Labels[{key!r}]")
    return config


class _Store:
    """Read small files and locate blobs in a directory or an uncompressed outer tar."""

    def __init__(self, src: Path):
        self.src = src
        self.members: dict[str, tarfile.TarInfo] | None = None
        if not src.is_dir():
            self.members = {_clean(m.name): m for m in _scan(src)}

    def _member(self, name: str, hops: int = 0) -> tarfile.TarInfo:
        assert self.members is not None
        info = self.members.get(_clean(name))
        if info is None:
            raise KitError(
                f"{self.src}: archive has no member {name!r}",
                fix="the archive is incomplete, export it again",
            )
        if (info.issym() or info.islnk()) and hops < 8:
            base = posixpath.dirname(_clean(name)) if info.issym() else ""
            return self._member(posixpath.join(base, info.linkname), hops + 1)
        if not info.isfile():
            raise KitError(
                f"{self.src}: member {name!r} is not a regular file",
                fix="the archive is corrupt, export it again",
            )
        return info

    def blob(self, name: str) -> Blob:
        if self.members is None:
            if ".." in name.split("/"):
                raise KitError(
                    f"{self.src}: {name!r} climbs out of the layout",
                    fix="the layout is corrupt, copy it again (skopeo copy)",
                )
            path = self.src / name
            if not os.path.lexists(path):
                raise KitError(
                    f"{self.src}: missing blob {name}",
                    fix="the layout is incomplete, copy it again (skopeo copy)",
                )
            with open_regular(path, name, follow=False) as fh:
                return Blob(path, 0, os.fstat(fh.fileno()).st_size)
        info = self._member(name)
        return Blob(self.src, info.offset_data, info.size)

    def read(self, name: str, limit: int = 64 << 20) -> bytes:
        blob = self.blob(name)
        if blob.size > limit:
            raise KitError(
                f"{self.src}: {name} is {blob.size} bytes, too big for metadata (at most {limit})",
                fix="the image is corrupt, export it again",
            )
        with open_regular(blob.path, name, follow=self.members is not None) as fh:
            fh.seek(blob.offset)
            data = fh.read(blob.size)
        if len(data) != blob.size:
            raise KitError(f"{self.src}: {name} is truncated", fix="export the image again")
        return data

    def json(self, name: str, data: bytes | None = None) -> object:
        try:
            return json.loads(self.read(name) if data is None else data)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise KitError(
                f"{self.src}: {name} is not valid JSON ({str(exc)[:200]})",
                fix="the image is corrupt, export it again",
            ) from None


def _digest_path(digest: str) -> str:
    if not DIGEST.fullmatch(digest):
        raise KitError(
            f"unsupported or malformed digest {digest[:80]!r}",
            fix="export the image again (a sha256 digest of 64 hex digits)",
        )
    algo, _, hexpart = digest.partition(":")
    return f"blobs/{algo}/{hexpart}"


def _verified_json(store: _Store, digest: str) -> dict:
    name = _digest_path(digest)
    data = store.read(name)
    algo, _, want = digest.partition(":")
    if hashlib.new(algo, data).hexdigest() != want:
        raise KitError(
            f"{store.src}: blob {digest} does not match its digest",
            fix="the image is corrupt, export it again",
        )
    return _Doc(f"{store.src}: {name}", _FIX).want(store.json(name, data), dict, "the document")


_FIX = "the image is corrupt, export or copy it again"


def candidates(src: Path, kind: str | None = None) -> list[Candidate]:
    """The images SRC holds, with their tags/names and manifest digests."""
    kind = kind or detect(src)
    if kind in ("rootfs-tar", "rootfs-dir"):
        return [Candidate((), None, None)]
    store = _Store(src)
    if kind == "docker-archive":
        doc = _Doc(f"{src}: manifest.json", _FIX)
        entries = doc.want(store.json("manifest.json"), list, "the document")
        out = []
        for n, entry in enumerate(entries):
            entry = doc.want(entry, dict, f"[{n}]")
            out.append(
                Candidate(tuple(doc.strings(entry.get("RepoTags"), f"[{n}].RepoTags")), None, entry)
            )
        return out
    found: list[Candidate] = []

    def walk(desc: object, names: tuple[str, ...], doc: _Doc, *, field: str, depth: int) -> None:
        desc = doc.want(desc, dict, field)
        digest = doc.digest(desc.get("digest"), f"{field}.digest")
        if desc.get("mediaType") in (OCI_INDEX, DOCKER_LIST):
            if depth >= MAX_INDEX_DEPTH:
                raise KitError(
                    f"{src}: image indexes nested more than {MAX_INDEX_DEPTH} deep at {digest}",
                    fix=f"{_FIX}",
                )
            sub = _Doc(f"{src}: {_digest_path(digest)}", _FIX)
            index = _verified_json(store, digest)
            for n, item in enumerate(
                sub.want(index.get("manifests"), list, "manifests", optional=True)
            ):
                walk(item, names, sub, field=f"manifests[{n}]", depth=depth + 1)
            return
        plat = doc.want(desc.get("platform"), dict, f"{field}.platform", optional=True)
        if plat.get("os", "linux") != "linux" or plat.get("architecture", "amd64") != "amd64":
            return  # another platform of a multi-arch index
        found.append(Candidate(names, digest, desc))

    top = _Doc(f"{src}: index.json", _FIX)
    index = top.want(store.json("index.json"), dict, "the document")
    for n, desc in enumerate(top.want(index.get("manifests"), list, "manifests", optional=True)):
        field = f"manifests[{n}]"
        notes = top.want(
            top.want(desc, dict, field).get("annotations"),
            dict,
            f"{field}.annotations",
            optional=True,
        )
        ref = top.want(
            notes.get(REF_NAME), str, f"{field}.annotations[{REF_NAME!r}]", optional=True
        )
        walk(desc, (ref,) if ref else (), top, field=field, depth=0)
    return found


def _matches(cand: Candidate, want: str) -> bool:
    if cand.digest and want in (cand.digest, cand.digest.partition(":")[2]):
        return True
    for name in cand.names:
        last = name.rsplit("/", 1)[-1]
        tag = last.rsplit(":", 1)[1] if ":" in last else None
        if want in (name, last, tag):
            return True
    return False


def _describe(cands: list[Candidate]) -> str:
    return "; ".join(
        f"{', '.join(c.names) or '(untagged)'} {c.digest or ''}".strip() for c in cands
    )


def open_source_image(src: str | Path, image: str | None = None) -> Image:
    """Describe the (selected) image in SRC: config, layers and where each blob lives."""
    src = Path(src)
    kind = detect(src)
    if kind == "rootfs-dir":
        return Image(kind, src, layers=[Layer(0, "rootfs-dir", Blob(src, 0, 0))])
    if kind == "rootfs-tar":
        size = src.stat().st_size
        return Image(kind, src, layers=[Layer(0, "rootfs-tar", Blob(src, 0, size))])
    cands = candidates(src, kind)
    if image:
        chosen = [c for c in cands if _matches(c, image)]
        if not chosen:
            raise KitError(
                f"{src}: no image matches {image!r}",
                fix=f"give --image one it holds: {_describe(cands)}",
            )
    else:
        chosen = cands
    if len(chosen) != 1:
        raise KitError(
            f"{src}: holds {len(chosen)} images: {_describe(chosen) or 'none'}",
            fix="choose one with --image TAG|DIGEST",
        )
    cand = chosen[0]
    store = _Store(src)
    if kind == "docker-archive":
        return _docker_image(src, store, cand)
    return _oci_image(src, kind, store, cand)


def _docker_image(src: Path, store: _Store, cand: Candidate) -> Image:
    entry = cand.payload
    assert isinstance(entry, dict)
    doc = _Doc(f"{src}: manifest.json", _FIX)
    config_name = doc.want(entry.get("Config"), str, "Config", optional=True)
    if not config_name:
        raise KitError(f"{src}: manifest.json entry has no Config", fix=f"{_FIX}")
    config = check_config(store.json(config_name), f"{src}: {config_name}")
    cdoc = _Doc(f"{src}: {config_name}", _FIX)
    rootfs = cdoc.want(config.get("rootfs"), dict, "rootfs", optional=True)
    diff_ids = [
        cdoc.digest(d, f"rootfs.diff_ids[{n}]")
        for n, d in enumerate(
            cdoc.want(rootfs.get("diff_ids"), list, "rootfs.diff_ids", optional=True)
        )
    ]
    names = doc.strings(entry.get("Layers"), "Layers")
    if len(diff_ids) != len(names):
        raise KitError(
            f"{src}: config lists {len(diff_ids)} layer digests (rootfs.diff_ids) "
            f"but manifest.json lists {len(names)} layers",
            fix="export the image again",
        )
    stem = Path(config_name).stem
    config_digest = f"sha256:{stem}" if DIGEST.fullmatch(f"sha256:{stem}") else None
    layers = [
        Layer(i, "docker-archive", store.blob(n), diff_id=d)
        for i, (n, d) in enumerate(zip(names, diff_ids))
    ]
    return Image(
        "docker-archive",
        src,
        ref=(cand.names or (None,))[0],
        config=config,
        config_digest=config_digest,
        layers=layers,
    )


def _oci_image(src: Path, kind: str, store: _Store, cand: Candidate) -> Image:
    assert cand.digest is not None
    manifest = _verified_json(store, cand.digest)
    doc = _Doc(f"{src}: {_digest_path(cand.digest)} (the manifest)", _FIX)
    cfg = doc.want(manifest.get("config"), dict, "config", optional=True)
    config_digest = doc.digest(cfg["digest"], "config.digest") if "digest" in cfg else None
    config = (
        check_config(_verified_json(store, config_digest), f"{src}: {_digest_path(config_digest)}")
        if config_digest
        else {}
    )
    layers = []
    for i, desc in enumerate(doc.want(manifest.get("layers"), list, "layers", optional=True)):
        desc = doc.want(desc, dict, f"layers[{i}]")
        digest = doc.digest(desc.get("digest"), f"layers[{i}].digest")
        media_type = doc.want(desc.get("mediaType"), str, f"layers[{i}].mediaType", optional=True)
        blob = store.blob(_digest_path(digest))
        if "size" in desc and doc.want(desc["size"], int, f"layers[{i}].size") != blob.size:
            raise KitError(
                f"{src}: layer {i} ({digest}) "
                f"is {blob.size} bytes but its descriptor says {desc['size']}",
                fix="the blob is truncated or corrupt, copy the image again",
            )
        layers.append(Layer(i, media_type, blob, digest=digest))
    return Image(
        kind,
        src,
        ref=(cand.names or (None,))[0],
        manifest_digest=cand.digest,
        config=config,
        config_digest=config_digest,
        layers=layers,
    )
