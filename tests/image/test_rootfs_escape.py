"""Nothing is created outside the image root: the directory writer refuses a stream that would
write through a symlink, and the in-root resolver agrees with the kernel inside a chroot."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from kit.errors import KitError
from kit.image.flatten import Entry
from kit.image.writers import DirWriter
from kit.rootfs import Root, RootError
from tests.support.parts import require


def snapshot(path: Path) -> dict[str, tuple[int, int]]:
    """Every name under ``path`` (links not followed) with its mode and mtime in ns."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            st = os.lstat(os.path.join(dirpath, name))
            out[os.path.relpath(os.path.join(dirpath, name), path)] = (st.st_mode, st.st_mtime_ns)
    st = os.lstat(path)
    out["."] = (st.st_mode, st.st_mtime_ns)
    return out


def entry(name: str, kind: str, arg: str | bytes | None = None) -> Entry:
    info = tarfile.TarInfo(name)
    info.mode, info.mtime = 0o755 if kind == "d" else 0o644, 1_600_000_000
    data = None
    if kind == "d":
        info.type = tarfile.DIRTYPE
    elif kind == "l":
        info.type, info.linkname = tarfile.SYMTYPE, arg
    elif kind == "h":
        info.type, info.linkname = tarfile.LNKTYPE, arg
    else:
        info.size, data = len(arg), io.BytesIO(arg)
    return Entry(info, data)


@pytest.fixture
def canary(tmp_path) -> Path:
    host = tmp_path / "host"
    (host / "etc").mkdir(parents=True)
    (host / "etc/passwd").write_text("root:x:0:0::/root:/bin/sh\n")
    return host


# The writer's root is OUT/.img.XXXX.part/root: "d/esc" is the .part dir, two more ".." reach
# tmp_path. Each link alone stays inside the image when read lexically.
CHAIN = [("d", "d"), ("d/up", "l", ".."), ("d/esc", "l", "up/.."), ("opt", "l", "d/esc/../../host")]


@pytest.mark.parametrize(
    "tail",
    [
        [("opt/pwned", "f", b"x")],  # a file written through the chain
        [("opt/etc", "d")],  # a directory made through it
        [("opt/etc/passwd", "h", "etc/passwd")],  # a hard link made through it
        [("abs", "l", "{canary}"), ("abs/etc/new", "f", b"x")],  # an absolute link, written through
        [("opt/etc/passwd", "f", b"pwned\n")],  # an existing host file overwritten
    ],
    ids=["file-via-chain", "dir-via-chain", "hardlink-via-chain", "file-via-absolute", "overwrite"],
)
def test_dir_writer_never_writes_through_a_symlink(tmp_path, canary, tail):
    before = snapshot(canary)
    (tmp_path / "work").mkdir()
    writer = DirWriter(tmp_path / "work")  # the work dir's cleanup is kit.image.output's
    members = CHAIN + [
        (n, k, *(a.format(canary=canary) if isinstance(a, str) else a for a in rest))
        for n, k, *rest in tail
    ]
    with pytest.raises(KitError, match=r"would pass through the symlink /(opt|abs)|cannot create"):
        for m in members:
            writer.add(entry(*m))
    writer.abort()
    assert snapshot(canary) == before


def test_dir_writer_still_writes_an_ordinary_tree(tmp_path):
    (tmp_path / "work").mkdir()
    writer = DirWriter(tmp_path / "work")
    for m in [
        ("usr", "d"),
        ("usr/lib", "d"),
        ("usr/lib/libx.so.1", "f", b"ELF"),
        ("lib", "l", "usr/lib"),
        ("usr/lib/libx.so", "h", "usr/lib/libx.so.1"),
        ("usr/lib/cur", "l", "libx.so.1"),
        ("usr/lib/cur2", "h", "usr/lib/cur"),
    ]:
        writer.add(entry(*m))
    out = writer.finish()
    assert (out / "lib/libx.so").read_bytes() == b"ELF"
    assert os.readlink(out / "usr/lib/cur2") == "libx.so.1"  # a hard link to the link itself
    assert (out / "usr/lib/libx.so.1").stat().st_nlink == 2
    assert (out / "usr/lib/libx.so.1").stat().st_mtime == 1_600_000_000
    assert oct((out / "usr/lib/libx.so.1").stat().st_mode & 0o777) == oct(0o644)


# -- the resolver against the kernel's own answer inside a chroot -------------------------------
NAMES = st.sampled_from(["a", "b", "c"])
TARGET_PARTS = st.sampled_from(["a", "b", "c", "..", ".", "host"])
NODES = st.lists(
    st.tuples(
        st.lists(NAMES, min_size=1, max_size=3).map("/".join),
        st.sampled_from(["d", "f", "l"]),
        st.tuples(st.booleans(), st.lists(TARGET_PARTS, min_size=1, max_size=5)),
    ),
    max_size=14,
)
QUERIES = st.lists(
    st.lists(st.sampled_from(["a", "b", "c", "..", "host"]), min_size=1, max_size=5).map("/".join),
    min_size=1,
    max_size=6,
)

CHROOT_REALPATH = """
import json, os, sys
queries = json.loads(sys.stdin.read())
os.chroot(sys.argv[1]); os.chdir("/")
out = []
for q in queries:
    try:
        os.stat("/" + q)  # the kernel's answer: is it there? (realpath alone accepts "file/..")
        out.append(os.path.realpath("/" + q, strict=True))
    except OSError:
        out.append(None)
print(json.dumps(out))
"""


def build_tree(root: Path, nodes) -> None:
    """Make what the node list describes, skipping nodes whose parent is not a plain directory."""
    for path, kind, (absolute, parts) in nodes:
        target = root / path
        parent_ok = all(
            (root / "/".join(path.split("/")[:i])).is_dir()
            and not (root / "/".join(path.split("/")[:i])).is_symlink()
            for i in range(1, path.count("/") + 1)
        )
        if not parent_ok or os.path.lexists(target):
            continue
        if kind == "d":
            target.mkdir()
        elif kind == "f":
            target.write_text(path)
        else:
            os.symlink(("/" if absolute else "") + "/".join(parts), target)


def chroot_realpath(root: Path, queries: list[str]) -> list[str | None]:
    run = subprocess.run(
        [sys.executable, "-I", "-c", CHROOT_REALPATH, str(root)],
        input=json.dumps(queries),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


@given(nodes=NODES, queries=QUERIES)
@example(
    nodes=[
        ("d", "d", (False, ["a"])),
        ("d/up", "l", (False, [".."])),
        ("d/esc", "l", (False, ["up", ".."])),
        ("a", "l", (False, ["d", "esc", "host"])),
    ],
    queries=["a", "a/etc", "d/esc/host"],
)
@example(
    nodes=[("a", "l", (True, ["host"])), ("b", "l", (False, ["b"]))], queries=["a", "b", "a/etc"]
)
@example(
    nodes=[
        ("a", "l", (False, ["b", "b"])),
        ("b", "l", (False, ["c", "c"])),
        ("c", "l", (False, ["."])),
    ],
    queries=["a", "a/a"],
)
@example(nodes=[("a", "d", (False, ["a"])), ("b", "f", (False, ["a"]))], queries=["b/..", "a/.."])
def test_resolution_stays_in_the_root_and_agrees_with_chroot(tmp_path_factory, nodes, queries):
    require(os.geteuid() == 0, "chroot needs root")
    base = tmp_path_factory.mktemp("tree")
    root, host = base / "root", base / "host"
    root.mkdir()
    (host / "etc").mkdir(parents=True)  # reachable only by escaping the root
    build_tree(root, nodes)
    before = snapshot(base)
    truth = chroot_realpath(root, queries)
    with Root(root) as tree:
        for query, expected in zip(queries, truth):
            try:
                found = tree.find(query)
            except RootError:  # more than 40 hops: refused, as the kernel would with ELOOP
                continue
            if found is None:
                assert expected is None, query
                continue
            rel, _st = found
            real = os.path.realpath(root / rel)
            assert real == str(root / rel).rstrip("/") and (real + "/").startswith(f"{root}/"), (
                query
            )
            assert expected == "/" + rel, query
    assert snapshot(base) == before


@given(nodes=NODES, queries=QUERIES)
@example(
    nodes=[
        ("d", "d", (False, ["a"])),
        ("d/up", "l", (False, [".."])),
        ("d/esc", "l", (False, ["up", ".."])),
        ("a", "l", (False, ["d", "esc", "host"])),
    ],
    queries=["a", "a/etc"],
)
@example(nodes=[("a", "l", (True, ["..", "host", "etc"]))], queries=["a"])
def test_creation_through_random_links_never_leaves_the_root(tmp_path_factory, nodes, queries):
    """mkdir -p, symlinks and files made below every query path, through whatever links the
    tree has: the sibling directory outside the root is never touched."""
    base = tmp_path_factory.mktemp("tree")
    root, host = base / "root", base / "host"
    root.mkdir()
    (host / "etc").mkdir(parents=True)
    build_tree(root, nodes)
    before = snapshot(host)
    with Root(root) as tree:
        for query in queries:
            for make in (
                lambda q=query: tree.makedirs(f"{q}/made"),
                lambda q=query: tree.symlink(
                    f"{q}/link", "made", through_links=True, make_parents=0o755
                ),
                lambda q=query: tree.create(
                    f"{q}/file", through_links=True, make_parents=0o755, replace=True
                ).close(),
            ):
                try:
                    make()
                except RootError:
                    pass
    assert snapshot(host) == before
    assert sorted(os.listdir(base)) == ["host", "root"]
