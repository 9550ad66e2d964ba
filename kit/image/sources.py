"""Find the image inside SRC by its content (not its name) and describe its blobs.

Kinds: ``docker-archive`` (``docker save`` / ``buildah push docker-archive:``),
``oci-dir`` (OCI image layout directory), ``oci-archive`` (that layout as a tar),
``rootfs-tar`` and ``rootfs-dir`` (a flat root filesystem, one pseudo-layer).
Blobs inside an archive are byte ranges of it, so nothing is extracted to disk.
"""
from __future__ import annotations

import json
import posixpath
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

from kit.errors import KitError

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


def detect(src: Path) -> str:
    """Return the kind of SRC, looking at its content."""
    if not src.exists():
        raise KitError(f"{src}: no such file or directory; fix: give an existing image archive, "
                       "OCI layout directory or root filesystem")
    if src.is_dir():
        if (src / "oci-layout").is_file() and (src / "index.json").is_file():
            return "oci-dir"
        return "rootfs-dir"
    with open(src, "rb") as fh:
        magic = fh.read(4)
    if magic[:2] == b"\x1f\x8b" or magic == b"\x28\xb5\x2f\xfd":
        return "rootfs-tar"  # compressed: only flat root filesystems come this way
    names = set()
    try:
        with tarfile.open(src, "r:") as tf:
            while (info := tf.next()) is not None:
                tf.members.clear()
                name = _clean(info.name)
                if name.count("/") > 2:  # image archives are shallow; a root filesystem is not
                    return "rootfs-tar"
                names.add(name)
    except tarfile.TarError as exc:
        raise KitError(f"{src}: not a tar archive, OCI layout or directory ({exc}); "
                       "fix: pass a docker-archive, OCI layout/archive or root filesystem") from exc
    if "oci-layout" in names and "index.json" in names:
        return "oci-archive"
    if "manifest.json" in names:
        return "docker-archive"
    return "rootfs-tar"


def _clean(name: str) -> str:
    return posixpath.normpath(name.lstrip("/")).removeprefix("./")


class _Store:
    """Read small files and locate blobs in a directory or an uncompressed outer tar."""

    def __init__(self, src: Path):
        self.src = src
        self.members: dict[str, tarfile.TarInfo] | None = None
        if not src.is_dir():
            with tarfile.open(src, "r:") as tf:
                self.members = {_clean(m.name): m for m in tf.getmembers()}

    def _member(self, name: str, hops: int = 0) -> tarfile.TarInfo:
        assert self.members is not None
        info = self.members.get(_clean(name))
        if info is None:
            raise KitError(f"{self.src}: archive has no member {name!r}; "
                           "fix: the archive is incomplete, export it again")
        if (info.issym() or info.islnk()) and hops < 8:
            base = posixpath.dirname(_clean(name)) if info.issym() else ""
            return self._member(posixpath.join(base, info.linkname), hops + 1)
        if not info.isfile():
            raise KitError(f"{self.src}: member {name!r} is not a regular file")
        return info

    def blob(self, name: str) -> Blob:
        if self.members is None:
            path = self.src / name
            if not path.is_file():
                raise KitError(f"{self.src}: missing blob {name}; fix: the layout is incomplete, "
                               "copy it again (skopeo copy)")
            return Blob(path, 0, path.stat().st_size)
        info = self._member(name)
        return Blob(self.src, info.offset_data, info.size)

    def read(self, name: str, limit: int = 64 << 20) -> bytes:
        blob = self.blob(name)
        if blob.size > limit:
            raise KitError(f"{self.src}: {name} is {blob.size} bytes, too big for metadata")
        with open(blob.path, "rb") as fh:
            fh.seek(blob.offset)
            return fh.read(blob.size)

    def json(self, name: str) -> object:
        try:
            return json.loads(self.read(name))
        except (ValueError, UnicodeDecodeError) as exc:
            raise KitError(f"{self.src}: {name} is not valid JSON: {exc}") from exc


def _digest_path(digest: str) -> str:
    algo, _, hexpart = digest.partition(":")
    if algo not in ("sha256", "sha512") or not hexpart.isalnum():
        raise KitError(f"unsupported or malformed digest {digest!r}")
    return f"blobs/{algo}/{hexpart}"


def _verified_json(store: _Store, digest: str) -> dict:
    import hashlib
    data = store.read(_digest_path(digest))
    algo, _, want = digest.partition(":")
    if hashlib.new(algo, data).hexdigest() != want:
        raise KitError(f"{store.src}: blob {digest} does not match its digest; "
                       "fix: the image is corrupt, export it again")
    return json.loads(data)


def candidates(src: Path, kind: str | None = None) -> list[Candidate]:
    """The images SRC holds, with their tags/names and manifest digests."""
    kind = kind or detect(src)
    if kind in ("rootfs-tar", "rootfs-dir"):
        return [Candidate((), None, None)]
    store = _Store(src)
    if kind == "docker-archive":
        entries = store.json("manifest.json")
        if not isinstance(entries, list):
            raise KitError(f"{src}: manifest.json is not a list")
        return [Candidate(tuple(e.get("RepoTags") or ()), None, e) for e in entries]
    out: list[Candidate] = []

    def walk(desc: dict, names: tuple[str, ...]) -> None:
        if desc.get("mediaType") in (OCI_INDEX, DOCKER_LIST):
            for sub in _verified_json(store, desc["digest"]).get("manifests", []):
                walk(sub, names)
            return
        plat = desc.get("platform") or {}
        if plat.get("os", "linux") != "linux" or plat.get("architecture", "amd64") != "amd64":
            return  # another platform of a multi-arch index
        out.append(Candidate(names, desc["digest"], desc))

    for desc in store.json("index.json").get("manifests", []):
        ref = (desc.get("annotations") or {}).get(REF_NAME)
        walk(desc, (ref,) if ref else ())
    return out


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
    return "; ".join(f"{', '.join(c.names) or '(untagged)'} {c.digest or ''}".strip() for c in cands)


def open_image(src: str | Path, image: str | None = None) -> Image:
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
            raise KitError(f"{src}: no image matches {image!r}; it holds: {_describe(cands)}")
    else:
        chosen = cands
    if len(chosen) != 1:
        raise KitError(f"{src}: holds {len(chosen)} images, choose one with --image TAG|DIGEST: "
                       f"{_describe(chosen) or 'none'}")
    cand = chosen[0]
    store = _Store(src)
    if kind == "docker-archive":
        return _docker_image(src, store, cand)
    return _oci_image(src, kind, store, cand)


def _docker_image(src: Path, store: _Store, cand: Candidate) -> Image:
    entry = cand.payload
    assert isinstance(entry, dict)
    config_name = entry.get("Config")
    if not config_name:
        raise KitError(f"{src}: manifest.json entry has no Config")
    config = store.json(config_name)
    diff_ids = (config.get("rootfs") or {}).get("diff_ids") or []
    names = entry.get("Layers") or []
    if len(diff_ids) != len(names):
        raise KitError(f"{src}: config lists {len(diff_ids)} layer digests (rootfs.diff_ids) "
                       f"but manifest.json lists {len(names)} layers; fix: export the image again")
    config_digest = "sha256:" + Path(config_name).stem if len(Path(config_name).stem) == 64 else None
    layers = [Layer(i, "docker-archive", store.blob(n), diff_id=d)
              for i, (n, d) in enumerate(zip(names, diff_ids))]
    return Image("docker-archive", src, ref=(cand.names or (None,))[0], config=config,
                 config_digest=config_digest, layers=layers)


def _oci_image(src: Path, kind: str, store: _Store, cand: Candidate) -> Image:
    manifest = _verified_json(store, cand.digest)
    cfg = manifest.get("config") or {}
    config = _verified_json(store, cfg["digest"]) if cfg.get("digest") else {}
    layers = []
    for i, desc in enumerate(manifest.get("layers") or []):
        blob = store.blob(_digest_path(desc["digest"]))
        if "size" in desc and desc["size"] != blob.size:
            raise KitError(f"{src}: layer {i} ({desc['digest']}) is {blob.size} bytes but its "
                           f"descriptor says {desc['size']}; fix: the blob is truncated or corrupt, "
                           "copy the image again")
        layers.append(Layer(i, desc.get("mediaType", ""), blob, digest=desc["digest"]))
    return Image(kind, src, ref=(cand.names or (None,))[0], manifest_digest=cand.digest,
                 config=config, config_digest=cfg.get("digest"), layers=layers)
