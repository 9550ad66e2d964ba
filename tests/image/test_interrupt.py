"""SIGINT, SIGTERM or SIGKILL at any moment of `kit image convert --force` leaves OUT the complete old or the
complete new image, sidecars that describe it or that a reader can tell do not, and only
kit-named leftovers of that OUT, which the next run finishes or removes (and nothing else)."""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from kit.errors import KitError
from kit.image import convert
from kit.image.output import claim, stage_text
from kit.image.target import identity, plan, work_dirs
from kit.image.writers import open_writer
from tests.image.builders import oci_layout, tar_bytes
from tests.image.trees import snapshot

NAMES = {"dir": "img", "tar.gz": "img.tar.gz", "sqfs": "img.sqfs"}
POLL_LIMIT = 120  # seconds: a bound that only a hung run reaches, never a speed assertion


def _layers(seed: int) -> list[bytes]:
    rng = random.Random(seed)
    base = [("bin", "d", None), ("bin/sh", "f", b"#!fake\n"), ("data", "d", None)]
    layers = [tar_bytes(base + [(f"data/r{i}", "f", rng.randbytes(1 << 20)) for i in range(2)])]
    layers.append(
        tar_bytes(
            [("data", "d", None)] + [(f"data/s{i}", "f", rng.randbytes(1 << 20)) for i in range(2)]
        )
    )
    layers.append(
        tar_bytes(
            [("data", "d", None), ("data/seed", "f", str(seed).encode())]
            + [(f"data/d{i}", "d", None) for i in range(200)]
        )
    )
    return layers


@pytest.fixture(scope="module")
def sources(tmp_path_factory, rich):
    """The old image (the small multi-layer docker-archive), a new one of about 4 MiB, and the
    digest of the new one in each form."""
    root = tmp_path_factory.mktemp("sources")
    new = oci_layout(root / "new", _layers(2))
    digests = {fmt: digest(convert(new, root / "ref" / name).output) for fmt, name in NAMES.items()}
    return rich / "docker.tar", new, digests


def digest(path: Path) -> str | None:
    """A tree digest of a directory or SquashFS image (mksquashfs 4.5 stamps the root directory
    with the time of the run), the sha256 of a tarball; None if missing."""
    if not os.path.lexists(path):
        return None
    if path.suffix == ".sqfs":
        tree = Path(tempfile.mkdtemp(dir=path.parent.parent)) / "x"
        subprocess.run(
            ["unsquashfs", "-q", "-no-xattrs", "-d", str(tree), str(path)],
            check=True,
            capture_output=True,
            timeout=POLL_LIMIT,
        )
        path = tree
    if path.is_dir():
        return hashlib.sha256(json.dumps(sorted(snapshot(path).items())).encode()).hexdigest()
    return sha256(path)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def sidecars_describe(out: Path, fmt: str) -> bool:
    """What a reader checks: the manifest's identity is OUT's, and then .sha256 must agree."""
    manifest = json.loads(Path(f"{out}.manifest.json").read_text())
    if manifest["output"]["identity"] != identity(out, fmt):
        return False
    if fmt != "dir":
        assert Path(f"{out}.sha256").read_text() == f"{sha256(out)}  {out.name}\n"
    return True


def kit_env() -> dict:
    return dict(os.environ, PYTHONPATH=os.environ.get("PYTHONPATH", str(Path(__file__).parents[2])))


def children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (OSError, IndexError):
        return False


def fired(parent: Path, name: str, fmt: str, trigger: str, old_inode: int) -> bool:
    try:
        return _fired(parent, name, fmt, trigger, old_inode)
    except FileNotFoundError:  # the run removed what was being looked at
        return False


def _fired(parent: Path, name: str, fmt: str, trigger: str, old_inode: int) -> bool:
    works = work_dirs(parent, name)
    if trigger == "start":
        return bool(works)
    if trigger == "half":
        return any(
            sum(f.stat().st_size for f in (parent / w).rglob("*") if f.is_file()) > 2 << 20
            for w in works
        )
    if trigger == "staged":
        return any((parent / w / "staged.manifest.json").exists() for w in works)
    return (identity(parent / name, fmt) or {}).get("inode") != old_inode  # swapped


def decoys(parent: Path) -> dict:
    (parent / "mine.txt").write_text("mine\n")
    (parent / ".img.kit-tmp.notes").mkdir()  # not the kit's pattern: 8 random characters
    (parent / ".other.kit-tmp.abcdefgh").mkdir()  # another output's work directory
    (parent / ".img.kit-tmp.abcdefgh").symlink_to("mine.txt")  # a link is never removed
    return {p.name: p.lstat().st_ino for p in parent.iterdir()}


CASES = [
    (fmt, "KILL", trigger)
    for fmt in ("dir", "tar.gz")
    for trigger in ("start", "half", "staged", "swapped")
]
CASES += [(fmt, "INT", trigger) for fmt in ("dir", "tar.gz") for trigger in ("half", "staged")]
CASES += [
    ("sqfs", "KILL", "half"),
    ("sqfs", "INT", "staged"),
    ("dir", "TERM", "half"),
    ("tar.gz", "TERM", "staged"),
]
STOPPED = {
    "INT": (130, "kit: interrupted"),
    "TERM": (143, "kit: terminated (SIGTERM)"),
}  # SIGTERM: scancel, kill


@pytest.mark.parametrize("fmt,sig,trigger", CASES, ids=["-".join(c) for c in CASES])
def test_interrupted_replacement_leaves_old_or_new(sources, tmp_path, fmt, sig, trigger):
    old_src, new_src, digests = sources
    name, new_digest = NAMES[fmt], digests[fmt]
    parent = tmp_path / "images"
    out = parent / name
    convert(old_src, out)
    old_digest, old_id = digest(out), identity(out, fmt)
    kept = decoys(parent)
    cmd = [sys.executable, "-m", "kit", "image", "convert", str(new_src), str(out), "--force"]
    proc = subprocess.Popen(
        cmd, env=kit_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    helpers: list[int] = []
    deadline = time.monotonic() + POLL_LIMIT
    while proc.poll() is None and time.monotonic() < deadline:
        helpers = children(proc.pid) or helpers
        if fired(parent, name, fmt, trigger, old_id["inode"]):
            proc.send_signal(getattr(signal, f"SIG{sig}"))
            break
    _, err = proc.communicate(timeout=POLL_LIMIT)
    status, words = STOPPED.get(sig, (-9, None))
    assert proc.returncode in (0, status), err
    if words is not None and proc.returncode == status:
        assert err.strip().splitlines() == [f"{words}; outputs are replaced only when complete"], (
            err
        )
    for pid in helpers:  # mksquashfs does not outlive the kit: the pipe's end stops it
        while alive(pid):
            assert time.monotonic() < deadline, f"mksquashfs {pid} outlived the kit"
            time.sleep(0.05)

    now = digest(out)
    assert now in (old_digest, new_digest), "OUT is missing or partial"
    if not sidecars_describe(out, fmt):  # only a kill between the image and its sidecars
        assert sig == "KILL" and now == new_digest
        assert any(
            json.loads((parent / w / "staged.manifest.json").read_text())["output"]["identity"]
            == identity(out, fmt)
            for w in work_dirs(parent, name)
        )
    elif proc.returncode in (130, 143):
        assert sorted(p.name for p in parent.iterdir()) == sorted(kept), (
            f"SIG{sig} left files behind"
        )

    rerun = subprocess.run(cmd, env=kit_env(), capture_output=True, text=True, timeout=POLL_LIMIT)
    assert rerun.returncode == 0, rerun.stderr
    assert digest(out) == new_digest and sidecars_describe(out, fmt)
    assert {p.name: p.lstat().st_ino for p in parent.iterdir() if not p.name.startswith(name)} == {
        k: v for k, v in kept.items() if not k.startswith(name)
    }


class Killed(BaseException):
    """Stands for the end of the process: nothing after the raise runs in it."""


def test_next_run_finishes_a_commit_cut_between_image_and_sidecars(sources, tmp_path):
    """The state a SIGKILL right after the swap leaves, made exactly: the new directory is at
    OUT, the old sidecars beside it. A reader can tell; the next run, even one that fails,
    first installs the staged sidecars."""
    old_src, new_src, _ = sources
    out = tmp_path / "img"
    convert(old_src, out)
    target = plan(new_src, out, fmt=None, force=True)
    with pytest.raises(Killed):
        with claim(target) as work:
            writer = open_writer(work.path, "dir", level=5, threads=1)
            (writer.root / "ch").mkdir()
            (writer.root / "ch" / "metadata.json").write_text("{}\n")
            built = writer.finish()
            report = {
                "tool": "kit image convert",
                "sidecars": [".manifest.json"],
                "output": {"format": "dir", "identity": identity(built, "dir")},
            }
            stage_text(json.dumps(report))(work.path / "staged.manifest.json")
            work._swap(built)  # what Work.commit does after staging; the kill comes next
            work.swapped = True
            raise Killed
    assert not sidecars_describe(out, "dir")  # the reader can tell
    with pytest.raises(KitError):
        convert(tmp_path / "missing", out, force=True)  # refused before any work: nothing touched
    assert not sidecars_describe(out, "dir")
    hostile = oci_layout(tmp_path / "hostile", [tar_bytes([("../evil", "f", b"x")])])
    with pytest.raises(KitError, match="traversal"):
        convert(hostile, out, force=True)
    assert sidecars_describe(out, "dir")  # finished before the failed conversion began
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".img")] == []
