"""An independent reference model of layer application, for the archive property tests.

It applies layers in order, the way the OCI image spec describes it (a layer's whiteouts
and opaque markers first remove from the layers below, then its entries are added in tar
order), and knows nothing of the converter's two passes, survivor index or deferred
copies. What it predicts:

* ``must_fail``: a member no image may hold (traversal, bad encoding, overlong names or
  link targets): the kit checks every member, so conversion must fail;
* ``conflicts``: operations the model cannot apply (a member under a file or through a
  symlink, a hard link to nothing, a symlink out of the image, a name twice in a layer);
  the kit may refuse those, or succeed if a later layer removes the result;
* ``tree``: the final tree, in the form ``read_tree`` gives the converter's output.

A hard link names the latest version of its target in stream order, even one a whiteout
removed: the converter keeps such data (as a copy) rather than lose the link.

Members are ``(name, kind, payload)``: kind f (payload bytes), d, l (symlink target),
h (hard link target); whiteouts and opaque markers are f members with those names.
"""

from __future__ import annotations

import itertools
import os
import posixpath
import stat
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

MAX_PATH, MAX_COMPONENT = 4095, 255
WHITEOUT, OPAQUE, AUFS_META = ".wh.", ".wh..wh..opq", ".wh..wh."
ADDED = {
    "bin",
    "dev",
    "etc",
    "mnt",
    "proc",
    "sys",
    "tmp",
    "usr",
    "ch",
    "etc/hosts",
    "etc/resolv.conf",
    "etc/passwd",
    "etc/group",
    "ch/environment",
    "ch/metadata.json",
} | {f"mnt/{i}" for i in range(10)}  # what conversion adds to every image


@dataclass
class Node:
    kind: str  # d, f, l
    payload: bytes | str | None = None
    raw: str | None = None  # a symlink's target as the layer wrote it
    id: int = field(default_factory=itertools.count().__next__)


@dataclass
class Prediction:
    must_fail: str | None = None
    conflicts: list[str] = field(default_factory=list)
    tree: dict[str, tuple] = field(default_factory=dict)
    links: set[frozenset[str]] = field(default_factory=set)


def _norm(raw: str) -> str | None:
    """The in-image path, or None when no image may hold the name."""
    try:
        encoded = raw.encode("utf-8")
    except UnicodeEncodeError:
        return None
    parts = [p for p in raw.split("/") if p not in ("", ".")]
    if "\0" in raw or ".." in parts or len(encoded) > MAX_PATH:
        return None
    if any(len(p.encode()) > MAX_COMPONENT for p in parts):
        return None
    return "/".join(parts)


def _climbs_out(link: str, target: str) -> bool:
    depth = link.count("/")
    for part in target.split("/"):
        depth += -1 if part == ".." else part not in ("", ".")
        if depth < 0:
            return True
    return False


def predict(layers: list[list[tuple]]) -> Prediction:
    out = Prediction()
    state: dict[str, Node] = {}
    latest: dict[str, Node] = {}  # every path's latest version, removed or not
    for li, layer in enumerate(layers):
        members = []
        for name, kind, payload in layer:
            path = _norm(name)
            if path is None or kind == "h" and _norm(payload) is None:
                out.must_fail = f"layer {li}: unsafe name {name!r} -> {payload!r}"
                return out
            if kind == "l" and (
                len(payload.encode("utf-8", "surrogateescape")) > MAX_PATH or "\0" in payload
            ):
                out.must_fail = f"layer {li}: symlink target of {name!r}"
                return out
            members.append((path, kind, payload))
        _remove_whited_out(state, members)
        seen: dict[str, str] = {}
        for path, kind, payload in members:
            _add(state, latest, seen, out.conflicts, li, path, kind, payload)
    for path, node in state.items():
        if path.startswith("dev/") or path in ADDED:
            continue
        out.tree[path] = (node.kind, node.payload if node.kind != "d" else None)
    groups: dict[int, set[str]] = {}
    for path, node in state.items():
        if node.kind != "d" and path in out.tree:
            groups.setdefault(node.id, set()).add(path)
    out.links = {frozenset(g) for g in groups.values() if len(g) > 1}
    return out


def _remove_whited_out(state: dict[str, Node], members: list[tuple]) -> None:
    for path, _, _ in members:
        parent, _, base = path.rpartition("/")
        if base == OPAQUE:
            _remove_below(state, parent)
        elif base.startswith(WHITEOUT) and not base.startswith(AUFS_META):
            target = f"{parent}/{base[4:]}" if parent else base[4:]
            state.pop(target, None)
            _remove_below(state, target)


def _remove_below(state: dict[str, Node], path: str) -> None:
    prefix = f"{path}/" if path else ""
    for key in [k for k in state if k.startswith(prefix)]:
        del state[key]


def _add(state, latest, seen, conflicts, li, path, kind, payload) -> None:
    base = path.rpartition("/")[2]
    if not path:
        return
    if base.startswith(WHITEOUT):  # unpacking creates its parents (containerd does)
        parts = path.split("/")
        for n in range(1, len(parts)):
            seen.setdefault("/".join(parts[:n]), "d")
        _parents(state, latest, path)
        return
    if seen.get(path) and not (seen[path] == "d" == kind):
        conflicts.append(f"layer {li}: {path} twice, or over a parent of an earlier member")
    seen[path] = kind
    parts = path.split("/")
    for n in range(1, len(parts)):  # parents: created as directories, never written through
        q = "/".join(parts[:n])
        seen.setdefault(q, "d")
        node = state.get(q)
        if node is None:
            state[q] = latest[q] = Node("d")
        elif node.kind != "d":
            conflicts.append(f"layer {li}: {path} under the {node.kind} {q}")
            return
    old = state.get(path)
    if kind == "d":
        if old is None or old.kind != "d":
            _replace(state, path, Node("d"))
        latest[path] = state[path]
        return
    if kind == "f":
        _replace(state, path, Node("f", payload))
    elif kind == "l":
        _symlink(state, conflicts, li, path, payload)
    else:
        target = latest.get(_norm(payload))
        if target is None or target.kind == "d":
            conflicts.append(f"layer {li}: hard link {path} -> {payload}: no file there")
            return
        if target.kind == "l":  # its text is read from where it is: a symlink of its own
            _symlink(state, conflicts, li, path, target.raw)
        else:
            _replace(state, path, target)
    latest[path] = state[path]


def _symlink(state, conflicts, li, path, raw) -> None:
    """A symlink; an absolute target is made relative from the link's directory."""
    link_dir, payload = path.rpartition("/")[0], raw
    if _norm(raw.replace("..", "x")) is None:
        conflicts.append(f"layer {li}: symlink {path} -> {raw!r}: not UTF-8")
    if raw.startswith("/"):
        payload = posixpath.relpath(posixpath.normpath("/" + raw.lstrip("/")), "/" + link_dir)
    elif _climbs_out(path, raw):
        conflicts.append(f"layer {li}: symlink {path} -> {raw} climbs out")
    _replace(state, path, Node("l", payload, raw))


def _parents(state, latest, path) -> None:
    """A whiteout's parents, created as directories up to the first that is none."""
    parts = path.split("/")
    for n in range(1, len(parts)):
        q = "/".join(parts[:n])
        node = state.get(q)
        if node is None:
            state[q] = latest[q] = Node("d")
        elif node.kind != "d":
            return


def _replace(state: dict[str, Node], path: str, node: Node) -> None:
    old = state.get(path)
    if old is not None and old.kind == "d":
        _remove_below(state, path)
    state[path] = node


# -- the converter's output, in the same form -------------------------------------------


def read_tree(out: Path, fmt: str) -> tuple[dict[str, tuple], set[frozenset[str]]]:
    """path -> (kind, content or symlink target), and the hard-link groups, of an output."""
    if fmt in ("tar", "tar.gz"):
        return _read_tar(out)
    if fmt == "sqfs":
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run(
                ["unsquashfs", "-no-progress", "-quiet", "-d", f"{tmp}/root", str(out)],
                check=True,
                capture_output=True,
                timeout=120,
            )
            return _read_dir(Path(tmp) / "root")
    return _read_dir(out)


def _read_tar(out: Path):
    tree: dict[str, tuple] = {}
    groups: dict[str, set[str]] = {}
    with tarfile.open(out) as tf:
        for info in tf:
            if info.isdir():
                tree[info.name] = ("d", None)
            elif info.issym():
                tree[info.name] = ("l", info.linkname)
            elif info.islnk():
                tree[info.name] = tree[info.linkname]
                groups.setdefault(info.linkname, {info.linkname}).add(info.name)
            else:
                tree[info.name] = ("f", tf.extractfile(info).read())
    return _visible(tree), {frozenset(g) for g in groups.values()}


def _read_dir(root: Path):
    tree: dict[str, tuple] = {}
    inodes: dict[int, set[str]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root)
            st = os.lstat(path)
            if stat.S_ISDIR(st.st_mode):
                tree[rel] = ("d", None)
            elif stat.S_ISLNK(st.st_mode):
                tree[rel] = ("l", os.readlink(path))
            else:
                with open(path, "rb") as fh:
                    tree[rel] = ("f", fh.read())
            if not stat.S_ISDIR(st.st_mode) and st.st_nlink > 1:
                inodes.setdefault(st.st_ino, set()).add(rel)
    return _visible(tree), {frozenset(g) for g in inodes.values() if len(g) > 1}


def _visible(tree: dict[str, tuple]) -> dict[str, tuple]:
    return {k: v for k, v in tree.items() if k not in ADDED and not k.startswith("dev/")}
