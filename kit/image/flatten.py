"""Flatten an image's layers into one clean Charliecloud root filesystem, as a stream.

Why two passes over the upper layers and one over the base: to emit the base layer in
its own order (parents before children, hard-link targets before links) we must know, for
each member, whether a later layer replaces or whites it out. Pass 1 reads only the
headers of layers 1..N-1 into a few small maps (an uncompressed layer is skipped over by
seeking; a compressed one must be decompressed); pass 2 streams every layer bottom-up,
verifies its digest and emits only the survivors, each exactly once. Memory grows with the number of
paths, never with the bytes.

Charliecloud rules (its lib/image.py): whiteouts apply to earlier layers only, an entry of
another type replaces the old one, devices/FIFOs and ``dev/*`` are dropped, setuid/setgid
stripped, owners 0, ``u+rwx`` on directories and ``u+rw`` on files, absolute symlinks made
relative, links may not climb out of the image, nothing is written through a symlink.
"""

from __future__ import annotations

import copy
import io
import json
import posixpath
import tarfile
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Callable

from kit.errors import KitError
from kit.image.layers import Budget, Data, LayerError, Limits, iter_members, safe_name
from kit.image.sources import Image, Layer

DIR, REG, SYM, LNK, OTHER = "directory", "file", "symlink", "hard link", "device or FIFO"
WHITEOUT, OPAQUE, AUFS_META = ".wh.", ".wh..wh..opq", ".wh..wh."
STANDARD_DIRS = ["bin", "dev", "etc", "mnt", "proc", "sys", "tmp", "usr"] + [
    f"mnt/{i}" for i in range(10)
]
# ch-run bind-mounts all four by default and cannot start without a target for each
STANDARD_FILES = ["etc/hosts", "etc/resolv.conf", "etc/passwd", "etc/group"]
CH_FILES = ("ch/environment", "ch/metadata.json")
NOTE_CAP = 10_000  # notes kept per list; the rest are only counted


@dataclass
class Note:
    path: str
    layer: int | None
    reason: str


@dataclass
class Report:
    """What the conversion dropped or changed and why, and the mount points and links it created."""

    dropped: list[Note] = field(default_factory=list)
    changed: list[Note] = field(default_factory=list)
    counts: Counter = field(default_factory=Counter)
    mount_points: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)

    def drop(self, path: str, layer: int | None, reason: str) -> None:
        self.counts["dropped: " + reason] += 1
        if len(self.dropped) < NOTE_CAP:
            self.dropped.append(Note(path, layer, reason))

    def change(self, path: str, layer: int | None, reason: str, *, rule: str | None = None) -> None:
        """Counted under RULE (default REASON): a reason that names the path's own details
        would otherwise make one count per path, and the summary as long as the list."""
        self.counts["changed: " + (rule or reason)] += 1
        if len(self.changed) < NOTE_CAP:
            self.changed.append(Note(path, layer, reason))


@dataclass
class Entry:
    """One output member; ``data`` is readable only until the next entry is requested."""

    info: tarfile.TarInfo
    data: Data | None = None


def kind_of(info: tarfile.TarInfo) -> str:
    if info.isdir():
        return DIR
    if info.isreg():
        return REG
    if info.issym():
        return SYM
    if info.islnk():
        return LNK
    return OTHER


def ancestors(name: str) -> Iterator[str]:
    """Strict ancestors of a normalised path, shortest first."""
    pos = name.find("/")
    while pos != -1:
        yield name[:pos]
        pos = name.find("/", pos + 1)


class _UpperIndex:
    """Pass 1: for every path touched by layers 1..N-1, the highest layer that touches it."""

    def __init__(self) -> None:
        self.top_any: dict[str, int] = {}  # any entry (incl. whiteout) at the path
        self.top_nondir: dict[str, int] = {}  # a non-directory or whiteout at the path
        self.hide_subtree: dict[str, int] = {}  # whiteout, opaque marker or non-dir: hides below
        self.dir_meta: dict[str, tuple[int, int]] = {}  # topmost directory's (mode, mtime)

    def add(self, i: int, info: tarfile.TarInfo) -> None:
        name = info.name
        parent, _, base = name.rpartition("/")
        if base == OPAQUE:
            self.hide_subtree[parent] = i
        elif base.startswith(AUFS_META):
            return
        elif base.startswith(WHITEOUT):
            target = f"{parent}/{base[4:]}" if parent else base[4:]
            self.top_any[target] = self.top_nondir[target] = self.hide_subtree[target] = i
        elif name:
            self.top_any[name] = i
            if info.isdir():
                self.dir_meta[name] = (info.mode, int(info.mtime))
            else:
                self.top_nondir[name] = self.hide_subtree[name] = i

    def survives(self, name: str, i: int, is_dir: bool) -> bool:
        """Does layer i's entry at ``name`` reach the final tree?"""
        if self.top_any.get(name, -1) > i and (not is_dir or self.top_nondir.get(name, -1) > i):
            return False
        if self.hide_subtree:
            if self.hide_subtree.get("", -1) > i:  # an opaque marker at the image root
                return False
            for q in ancestors(name):
                if self.hide_subtree.get(q, -1) > i:
                    return False
        return True


def _contained(link_dir: str, target: str) -> bool:
    """Does a relative symlink target stay inside the image, resolved lexically?"""
    depth = len(link_dir.split("/")) if link_dir else 0
    for part in target.split("/"):
        if part == "..":
            depth -= 1
            if depth < 0:
                return False
        elif part not in ("", "."):
            depth += 1
    return True


class Flattener:
    """Streams the surviving entries of an image's layers with Charliecloud's rules applied."""

    def __init__(
        self, image: Image, limits: Limits = Limits(), progress: Callable[[int], None] | None = None
    ):
        self.image = image
        self.limits = limits
        self.progress = progress
        self.report = Report()
        self.index = _UpperIndex()
        self.emitted: dict[str, str] = {}
        self.hidden_files: dict[str, tuple[int, int]] = {}  # path -> (layer, ordinal) of its data
        self.hidden_links: dict[str, str] = {}  # hidden hard link -> the emitted file it shares
        self.hidden_symlinks: dict[str, str] = {}  # hidden symlink -> its target in the layer
        self.link_canon: dict[str, str] = {}
        self.copies: dict[tuple[int, int], str] = {}  # hidden file -> the link that holds a copy
        self.waiting: dict[str, list[Entry]] = {}  # copy not yet written -> links to it
        self.symlinks: dict[str, str] = {}  # emitted symlink -> its (relative) target
        self.symlink_raw: dict[str, str] = {}  # emitted symlink -> its target in the layer

    # -- the stream -------------------------------------------------------------------------
    def entries(
        self,
        mount_points: Sequence[str] = (),
        links: Mapping[str, str] = {},
        extras: Callable[[], tuple[Sequence[str], Mapping[str, str]]] | None = None,
    ) -> Iterator[Entry]:
        """`links` maps absolute in-image paths to absolute targets (the host-MPI alias names);
        `extras()`, called once the last layer is through, may add mount points and links."""
        user_mounts = [self._mount_name(p) for p in mount_points]
        user_links = self._link_names(links)
        budget = Budget(self.limits)
        for layer in self.image.layers[1:]:
            for m in iter_members(layer, budget, progress=self.progress, headers_only=True):
                self.index.add(layer.index, m.info)
        budget = Budget(self.limits)
        for layer in self.image.layers:
            for m in iter_members(layer, budget, progress=self.progress):
                yield from self._member(layer, m.info, m.ordinal, m.open)
            yield from self._write_copies(layer)
        if extras:
            more_mounts, more_links = extras()
            user_mounts += [self._mount_name(p) for p in more_mounts]
            user_links.update(self._link_names(more_links))
        yield from self._mount_points(user_mounts)
        yield from self._links(user_links)
        yield from self._charliecloud_files()

    def _member(self, layer: Layer, info: tarfile.TarInfo, ordinal: int, opener) -> Iterator[Entry]:
        name, i = info.name, layer.index
        base = name.rpartition("/")[2]
        if not name:
            return  # the root directory itself
        if base.startswith(WHITEOUT):
            self.report.counts["whiteouts applied"] += 1
            yield from self._parents(layer, name, strict=False)
            return
        kind = kind_of(info)
        if not self.index.survives(name, i, kind == DIR):
            self._remember_hidden(name, kind, info.linkname, (i, ordinal))
            self.report.counts["replaced or whited out by a later layer"] += 1
            yield from self._parents(layer, name, strict=False)
            return
        if name.startswith("dev/"):
            self.report.drop(name, i, "under /dev (ch-run provides its own)")
            return
        if kind == OTHER:
            self.report.drop(name, i, "device node or FIFO")
            return
        if name in CH_FILES and self.image.config:
            self.report.drop(name, i, "replaced by the image config's")
            return
        prev = self.emitted.get(name)
        if prev is not None:
            if prev == DIR and kind == DIR:
                return  # a directory merged across layers: emitted once, top layer's metadata
            raise LayerError(
                f"{layer.label}: member {name!r} ({kind}) "
                f"clashes with the {prev} this layer already has there (the name appears twice, "
                "or is the parent of an earlier member)",
                fix="rebuild the layer",
            )
        yield from self._parents(layer, name)
        if kind == LNK and (raw := self._symlink_text(info.linkname)) is not None:
            # A symlink's text is read from where it is: a second name for it in another
            # directory must be a symlink of its own, its target made relative from there.
            info = copy.copy(info)
            info.type, info.linkname, kind = tarfile.SYMTYPE, raw, SYM
            self.report.change(
                name,
                i,
                f"hard link to a symlink (-> {raw}) stored as a symlink",
                rule="hard link to a symlink stored as a symlink",
            )
        out = self._normal(info, layer)
        data = None
        if kind == SYM:
            out.linkname = self._symlink_target(layer, name, info.linkname)
            self.symlink_raw[name] = info.linkname
        elif kind == LNK:
            target, hidden = self._resolve_link(info.linkname)
            tkind = self.emitted.get(target)
            if tkind == REG:
                out.linkname = target
                self.link_canon[name] = target
                if target in self.waiting:  # its copy is written at the end of this layer
                    self.emitted[name] = LNK
                    self.waiting[target].append(Entry(out))
                    return
            elif hidden:
                self._copy_later(layer, name, info.linkname, hidden)
                self.waiting[name] = [Entry(out)]
                return
            else:
                raise LayerError(
                    f"{layer.label}: hard link {name!r} points to {info.linkname!r}, "
                    f"which is {'a ' + tkind if tkind else 'not'} in the image before it",
                    fix="rebuild the layer",
                )
        elif kind == REG:
            data = opener()
        if kind == SYM:
            self.symlinks[name] = out.linkname
        self.emitted[name] = kind
        yield Entry(out, data)

    # -- helpers ----------------------------------------------------------------------------
    def _normal(self, info: tarfile.TarInfo, layer: Layer | None) -> tarfile.TarInfo:
        """A fresh header: owner 0, no setuid/setgid, u+rwx dirs, u+rw files, no xattrs."""
        i = layer.index if layer else None
        out = tarfile.TarInfo(info.name)
        kind = kind_of(info)
        out.type = {
            DIR: tarfile.DIRTYPE,
            REG: tarfile.REGTYPE,
            SYM: tarfile.SYMTYPE,
            LNK: tarfile.LNKTYPE,
        }[kind]
        mode, mtime = info.mode & 0o7777, int(info.mtime)
        if kind == DIR and self.index.top_any.get(info.name, -1) > (i or 0):
            mode, mtime = self.index.dir_meta.get(info.name, (mode, mtime))
            mode &= 0o7777
        if mode & 0o6000 and kind != SYM:
            self.report.change(info.name, i, "setuid/setgid bit removed")
            mode &= ~0o6000
        if kind == DIR:
            mode |= 0o700
        elif kind in (REG, LNK):
            mode |= 0o600
        else:
            mode = 0o777
        out.mode, out.mtime = mode, mtime
        out.uid = out.gid = 0
        out.uname = out.gname = "root"
        out.size = info.size if kind == REG else 0
        return out

    def _parents(self, layer: Layer, name: str, strict: bool = True) -> Iterator[Entry]:
        """Create missing parent directories, outermost first (a loop: paths may be deep).

        Not ``strict`` (for a whiteout or a member a later layer hides): unpacking the layer
        would still create its parents, so those that survive are created; under a file or
        symlink nothing is (nothing is written there), and that is no error.
        """
        missing = []
        parent = name.rpartition("/")[0]
        while parent and (kind := self.emitted.get(parent)) != DIR:
            if kind is not None and not strict:
                return
            if kind == SYM:
                raise LayerError(
                    f"{layer.label}: "
                    f"member {name!r} would be written through the symlink {parent!r}; the image is unsafe",
                    fix="rebuild it",
                )
            if kind is not None:
                raise LayerError(
                    f"{layer.label}: member {name!r} is under {parent!r}, which is a {kind}",
                    fix="rebuild the layer",
                )
            missing.append(parent)
            parent = parent.rpartition("/")[0]
        for parent in reversed(missing):
            if not strict and (
                parent.startswith("dev/") or not self.index.survives(parent, layer.index, True)
            ):
                return
            info = tarfile.TarInfo(parent)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            self.report.change(parent, layer.index, "missing parent directory created")
            self.emitted[parent] = DIR
            yield Entry(self._normal(info, layer))

    def _symlink_target(self, layer: Layer, name: str, target: str) -> str:
        link_dir = name.rpartition("/")[0]
        try:
            target.encode("utf-8")
        except UnicodeEncodeError:
            raise LayerError(
                f"{layer.label}: symlink {name!r} has a target that is not UTF-8",
                fix="rebuild the image without it",
            ) from None
        if target.startswith("/"):
            absolute = posixpath.normpath("/" + target.lstrip("/"))
            rel = posixpath.relpath(absolute, "/" + link_dir)
            self.report.change(
                name,
                layer.index,
                f"absolute symlink {target} made relative",
                rule="absolute symlink made relative",
            )
            return rel
        if not _contained(link_dir, target):
            raise LayerError(
                f"{layer.label}: symlink {name!r} -> {target!r} climbs out of the image; "
                "the image is unsafe",
                fix="rebuild it",
            )
        return target

    def _remember_hidden(self, name: str, kind: str, linkname: str, where: tuple[int, int]) -> None:
        """A later layer removes or replaces NAME; a hard link may still need what it held."""
        self.hidden_files.pop(name, None)
        self.hidden_links.pop(name, None)
        self.hidden_symlinks.pop(name, None)
        if kind == REG:
            self.hidden_files[name] = where
        elif kind == SYM:
            self.hidden_symlinks[name] = linkname
        elif kind == LNK:
            if (data := self._hidden_data(linkname)) is not None:
                self.hidden_files[name] = data
            elif (raw := self._symlink_text(linkname)) is not None:
                self.hidden_symlinks[name] = raw
            elif (shared := self.hidden_links.get(linkname)) is not None:
                self.hidden_links[name] = shared
            elif self.emitted.get(canon := self.link_canon.get(linkname, linkname)) in (REG, SYM):
                self.hidden_links[name] = canon

    def _resolve_link(self, linkname: str) -> tuple[str, tuple[int, int] | None]:
        """The emitted path a hard link to LINKNAME shares (if any), and the hidden data
        behind LINKNAME when a later layer removes it."""
        hidden = self._hidden_data(linkname)
        target = self.copies.get(hidden, linkname) if hidden else linkname
        return self.hidden_links.get(target, self.link_canon.get(target, target)), hidden

    def _symlink_text(self, linkname: str) -> str | None:
        """The layer's target text of the symlink a hard link to LINKNAME names, if it is one."""
        if linkname not in self.emitted and linkname in self.hidden_symlinks:
            return self.hidden_symlinks[linkname]
        target = self._resolve_link(linkname)[0]
        return self.symlink_raw.get(target) if self.emitted.get(target) == SYM else None

    def _hidden_data(self, path: str) -> tuple[int, int] | None:
        """Where the data of PATH's latest version is, if a later layer hides it."""
        return None if path in self.emitted else self.hidden_files.get(path)

    def _copy_later(self, layer: Layer, name: str, target: str, hidden: tuple[int, int]) -> None:
        """A hard link whose target a later layer removed keeps the old data as a copy, written
        once the layer is through: all copies from one lower layer then take one extra pass."""
        self.report.change(
            name,
            layer.index,
            f"hard link to {target} (removed later) stored as a copy",
            rule="hard link to a file removed later stored as a copy",
        )
        self.copies[hidden] = name
        self.emitted[name] = REG

    def _write_copies(self, layer: Layer) -> Iterator[Entry]:
        if not self.waiting:
            return
        wanted: dict[int, dict[int, str]] = {}
        for (li, ordinal), name in self.copies.items():
            if name in self.waiting:
                wanted.setdefault(li, {})[ordinal] = name
        for li in sorted(wanted):
            todo = wanted[li]
            for m in iter_members(self.image.layers[li], Budget(self.limits)):
                if m.ordinal not in todo:
                    continue
                name = todo.pop(m.ordinal)
                first, *links = self.waiting.pop(name)
                first.info.type, first.info.size = tarfile.REGTYPE, m.info.size
                yield Entry(first.info, m.open())
                yield from links
                if not todo:
                    break
            if todo:
                raise LayerError(
                    f"{layer.label}: hard link {next(iter(todo.values()))!r}: "
                    f"its target in layer {li} vanished",
                    fix="export the image again",
                )

    def _mount_name(self, path: str, what: str = "--mount-point") -> str:
        if not path.startswith("/"):
            raise KitError(
                f"{what} {path!r}: not an absolute path",
                fix="give an absolute path inside the image",
            )
        dummy = Layer(-1, what, self.image.layers[0].blob)
        try:
            name = safe_name(path, dummy, what)
        except LayerError as exc:
            raise KitError(
                f"{what} {path!r}: {exc}", fix="give a plain absolute path inside the image"
            ) from None
        if not name:
            raise KitError(
                f"{what} {path!r}: cannot be the image root", fix="give a directory below /"
            )
        return name

    def _link_names(self, links: Mapping[str, str]) -> dict[str, str]:
        return {
            self._mount_name(p, "link"): self._mount_name(t, "link target")
            for p, t in links.items()
        }

    def _links(self, links: dict[str, str]) -> Iterator[Entry]:
        """Relative symlinks the site's pair needs; the image's own identical link is kept."""
        for name, target in links.items():
            parent = name.rpartition("/")[0]
            if parent:  # the link's directory is no mount point: not listed as one
                yield from self._ensure(parent, DIR, True, made=[], what=f"link /{name}:")
            rel = posixpath.relpath("/" + target, "/" + parent)
            have = self.emitted.get(name)
            if have == SYM and self.symlinks.get(name) == rel:
                continue
            if have is not None:
                now = f"a symlink to {self.symlinks[name]}" if have == SYM else f"a {have}"
                raise KitError(
                    f"/{name} is {now} in the image, "
                    f"but the site's MPI pair needs a symlink to /{target} there",
                    fix="remove it from the image recipe",
                )
            info = tarfile.TarInfo(name)
            info.type = tarfile.SYMTYPE
            out = self._normal(info, None)
            out.linkname = rel
            self.emitted[name], self.symlinks[name] = SYM, rel
            self.report.links.append(f"/{name} -> {rel}")
            yield Entry(out)

    def _mount_points(self, user: list[str]) -> Iterator[Entry]:
        volumes = (self.image.config.get("config") or {}).get("Volumes") or {}
        wanted = [(p, DIR, False) for p in STANDARD_DIRS] + [
            (p, REG, False) for p in STANDARD_FILES
        ]
        wanted += [(v.strip("/"), DIR, False) for v in sorted(volumes) if v.strip("/")]
        wanted += [(p, DIR, True) for p in user]
        for path, kind, strict in wanted:
            yield from self._ensure(path, kind, strict)

    def _ensure(
        self,
        path: str,
        kind: str,
        strict: bool,
        made: list[str] | None = None,
        what: str = "--mount-point",
    ) -> Iterator[Entry]:
        """Create PATH (parents as directories) unless present, listing what was made in `made`
        (default: the report's mount points); never follow a symlink."""
        made = self.report.mount_points if made is None else made
        parts = path.split("/")
        for n in range(1, len(parts) + 1):
            q, leaf = "/".join(parts[:n]), n == len(parts)
            have = self.emitted.get(q)
            want = kind if leaf else DIR
            if have is None:
                info = tarfile.TarInfo(q)
                info.type = tarfile.DIRTYPE if want == DIR else tarfile.REGTYPE
                info.mode = 0o755 if want == DIR else 0o644
                self.emitted[q] = want
                made.append("/" + q)
                yield Entry(self._normal(info, None), io.BytesIO(b"") if want == REG else None)
            elif have != want and not (have == LNK and want == REG):
                if strict:
                    raise KitError(
                        f"{what} /{path}: /{q} is a {have} in the image, "
                        "so it cannot be created without following or replacing it",
                        fix="choose another path",
                    )
                self.report.change(q, None, f"mount point kept as {have} (not followed)")
                return

    def _charliecloud_files(self) -> Iterator[Entry]:
        if self.emitted.get("ch", DIR) != DIR:
            raise KitError(
                f"{self.image.source}: /ch is a {self.emitted['ch']} in the image; "
                "Charliecloud needs it as a directory for its metadata",
                fix="rebuild the image without a /ch of its own",
            )
        meta = charliecloud_metadata(self.image.config)
        env_text = "".join(f"{k}={v}\n" for k, v in sorted(meta["env"].items()))
        meta_text = json.dumps(meta, indent=2, sort_keys=True) + "\n"
        if "ch" not in self.emitted:
            info = tarfile.TarInfo("ch")
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            self.emitted["ch"] = DIR
            yield Entry(self._normal(info, None))
        for name, text in zip(CH_FILES, (env_text, meta_text)):
            if name in self.emitted:
                continue  # a flat root filesystem (no config) keeps its own
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.mode, info.size = 0o644, len(data)
            self.emitted[name] = REG
            yield Entry(self._normal(info, None), io.BytesIO(data))


def charliecloud_metadata(config: dict) -> dict:
    """Charliecloud's ch/metadata.json fields, read from an OCI/Docker image config."""
    cfg = config.get("config") or {}
    env: dict[str, str] = {}
    for line in cfg.get("Env") or []:
        key, sep, value = line.partition("=")
        if not sep:
            raise KitError(
                f"image config: Env entry {line!r} is not KEY=VALUE",
                fix="rebuild the image with ENV KEY=VALUE lines",
            )
        env[key] = value
    return {
        "arch": config.get("architecture") or "amd64",
        "cwd": cfg.get("WorkingDir") or "/",
        "env": env,
        "history": config.get("history") or [],
        "labels": cfg.get("Labels") or {},
        "shell": cfg.get("Shell") or ["/bin/sh", "-c"],
        "volumes": sorted(cfg.get("Volumes") or {}),
    }
