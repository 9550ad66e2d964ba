"""`kit image convert` never destroys what the kit did not make: every OUT that is not new or an
earlier kit output of the same form is refused before any work, and nothing is touched."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from kit.errors import KitError
from kit.image import convert
from kit.image.target import identity, plan
from tests.image.builders import oci_layout, tar_bytes
from tests.image.trees import snapshot

FORMS = {"tar.gz": "img.tar.gz", "tar": "img.tar", "sqfs": "img.sqfs", "dir": "img"}
SMALL = [("bin", "d", None), ("bin/sh", "f", b"#!fake\n"), ("etc", "d", None)]


def state(root: Path) -> dict:
    """Everything under root, links not followed: what 'nothing touched' compares."""
    return snapshot(root)


def small_source(root: Path, text: bytes = b"one\n") -> Path:
    return oci_layout(root, [tar_bytes(SMALL), tar_bytes([("etc/msg", "f", text)])])


def kit(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.environ.get("PYTHONPATH", str(Path(__file__).parents[2])))
    return subprocess.run(
        [sys.executable, "-m", "kit", "image", "convert", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def refused(proc: subprocess.CompletedProcess, *words: str) -> None:
    """Exit 1 with one line naming the problem, never a crash (70) or a traceback."""
    assert proc.returncode == 1, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kit: error: "), proc.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])


@pytest.mark.parametrize("force", [False, True])
def test_user_directory_is_refused_and_untouched(rich, tmp_path, force):
    user = tmp_path / "img"
    user.mkdir()
    (user / "thesis.tex").write_text("years of work\n")
    before = state(tmp_path)
    with pytest.raises(KitError, match="not an earlier kit image convert dir output.*fix:"):
        convert(rich / "docker.tar", user, force=force)
    assert state(tmp_path) == before
    refused(
        kit(str(rich / "docker.tar"), str(user), *(["--force"] if force else []), cwd=tmp_path),
        "never replaces what it did not make",
    )
    assert state(tmp_path) == before


@pytest.mark.parametrize("fmt", ["tar.gz", "tar", "sqfs"])
def test_user_file_is_refused_and_untouched(rich, tmp_path, fmt):
    user = tmp_path / FORMS[fmt]
    user.write_bytes(b"not an image, but mine\n")
    before = state(tmp_path)
    for force in (False, True):
        with pytest.raises(
            KitError, match=f"exists as a file that is not an earlier kit image convert {fmt}"
        ):
            convert(rich / "docker.tar", user, force=force)
        assert state(tmp_path) == before


@pytest.mark.parametrize("out", [".", ".."])
def test_dot_and_dotdot_are_refused(rich, tmp_path, out):
    """Run in a sandbox: even a converter that would replace '.' could only harm tmp_path."""
    cwd = tmp_path / "sandbox" / "inner"
    cwd.mkdir(parents=True)
    (cwd / "mine.txt").write_text("mine\n")
    before = state(tmp_path)
    refused(kit(str(rich / "docker.tar"), out, "--force", "--format", "dir", cwd=cwd), "fix:")
    refused(kit(str(rich / "docker.tar"), out, cwd=cwd), "fix:")
    assert state(tmp_path) == before


@pytest.mark.parametrize("out", ["/", "/..", "/."])
def test_root_is_refused_before_any_work(rich, out):
    """Only the checks run (plan, and convert's dry run): nothing here can write to /."""
    with pytest.raises(KitError, match="'.', '..' or '/'"):
        plan(rich / "docker.tar", out, fmt="dir", force=True)
    with pytest.raises(KitError, match="'.', '..' or '/'"):
        convert(rich / "docker.tar", out, fmt="dir", force=True, dry_run=True)


def test_current_directory_and_its_parents_are_refused(rich, tmp_path, monkeypatch):
    inner = tmp_path / "a" / "b"
    inner.mkdir(parents=True)
    monkeypatch.chdir(inner)
    for out in (inner, tmp_path / "a"):
        with pytest.raises(KitError, match="current directory or contains it"):
            convert(rich / "docker.tar", out, fmt="dir", force=True, dry_run=True)


def test_src_itself_inside_and_around_are_refused(rich, tmp_path):
    src = tmp_path / "a" / "b" / "oci"
    shutil.copytree(rich / "oci", src, symlinks=True)
    (tmp_path / "link").symlink_to(src)
    before = state(tmp_path)
    cases = [
        (src, "is SRC itself"),
        (tmp_path / "link", "is SRC itself"),
        (tmp_path / "link" / "..", "'.', '..' or '/'"),
        (src / "img", "inside SRC"),
        (src / "blobs" / "img.tar.gz", "inside SRC"),
        (tmp_path / "link" / "img.sqfs", "inside SRC"),
        (tmp_path / "a" / "b", "contains SRC"),
        (tmp_path / "a", "contains SRC"),
    ]
    for out, why in cases:
        for force in (False, True):
            with pytest.raises(KitError, match=why):
                convert(src, out, fmt="dir" if out.suffix == "" else None, force=force)
            assert state(tmp_path) == before, out


def test_file_src_is_refused_as_out(rich, tmp_path):
    src = tmp_path / "img.tar"
    shutil.copy(rich / "docker.tar", src)
    os.link(src, tmp_path / "same.tar")
    digest = hashlib.sha256(src.read_bytes()).hexdigest()
    for out in (src, tmp_path / "same.tar"):
        with pytest.raises(KitError, match="is SRC itself"):
            convert(src, out, force=True)
    assert hashlib.sha256(src.read_bytes()).hexdigest() == digest


@pytest.mark.parametrize("fmt", list(FORMS))
def test_force_replaces_an_earlier_kit_output_of_the_same_form(tmp_path, fmt):
    one, two = small_source(tmp_path / "one", b"one\n"), small_source(tmp_path / "two", b"two\n")
    out = tmp_path / "images" / FORMS[fmt]
    first = convert(one, out)
    old = state(tmp_path / "images")
    with pytest.raises(KitError, match="earlier kit image convert .*fix: pass --force"):
        convert(two, out)
    assert state(tmp_path / "images") == old
    second = convert(two, out, force=True)
    manifest = json.loads(Path(f"{out}.manifest.json").read_text())
    assert manifest["output"]["identity"] == identity(out, fmt) == second.identity != first.identity
    assert manifest["source"]["path"] == str(two)
    if fmt == "dir":
        assert (out / "etc" / "msg").read_text() == "two\n"
    else:
        assert Path(f"{out}.sha256").read_text() == f"{second.sha256}  {out.name}\n"
        assert hashlib.sha256(out.read_bytes()).hexdigest() == second.sha256 != first.sha256
    assert sorted(p.name for p in (tmp_path / "images").iterdir()) == sorted(
        [out.name, f"{out.name}.manifest.json"] + ([] if fmt == "dir" else [f"{out.name}.sha256"])
    )


def test_force_refuses_another_form_and_a_user_directory_beside_a_stale_manifest(tmp_path):
    src = small_source(tmp_path / "src")
    out = tmp_path / "img"
    convert(src, out)
    with pytest.raises(
        KitError, match="exists as a directory that is not an earlier kit image convert tar"
    ):
        convert(src, out, fmt="tar", force=True)
    shutil.rmtree(out)  # the user removes the image and makes their own directory there
    out.mkdir()
    (out / "ch").mkdir()
    (out / "ch" / "metadata.json").write_text("{}\n")
    (out / "mine").write_text("mine\n")
    before = state(tmp_path)
    with pytest.raises(KitError, match="no img.manifest.json describes it"):
        convert(src, out, force=True)
    assert state(tmp_path) == before


def test_symlink_at_out_is_refused(tmp_path):
    src = small_source(tmp_path / "src")
    kept = convert(src, tmp_path / "real.tar")
    (tmp_path / "img.tar").symlink_to("real.tar")
    before = state(tmp_path)
    with pytest.raises(KitError, match="exists as a symlink"):
        convert(src, tmp_path / "img.tar", force=True)
    assert state(tmp_path) == before and kept.sha256


@pytest.mark.parametrize("suffix", [".sha256", ".manifest.json", ".pair.yaml"])
@pytest.mark.parametrize("kind", ["file", "dir", "symlink", "fifo"])
def test_sidecar_the_kit_did_not_write_is_refused(tmp_path, suffix, kind):
    src = small_source(tmp_path / "src")
    side = tmp_path / f"img.tar{suffix}"
    mine = tmp_path / "mine.json"
    mine.write_text(json.dumps({"tool": "kit image convert", "mine": True}))
    if kind == "file":
        side.write_text("my own notes\n")
    elif kind == "dir":
        side.mkdir()
    elif kind == "symlink":
        side.symlink_to(mine)  # even a kit-looking target is not followed
    else:
        os.mkfifo(side)  # must not block
    before = state(tmp_path)
    for force in (False, True):
        with pytest.raises(KitError, match=f"img.tar{suffix}: exists and was not written by kit"):
            convert(src, tmp_path / "img.tar", force=force)
    assert state(tmp_path) == before


def test_stale_kit_pair_file_goes_with_the_image_it_described(tmp_path):
    """A plain conversion replacing a paired one must not leave the old pair beside the new
    image.
    """
    src = small_source(tmp_path / "src")
    out = tmp_path / "img.sqfs"
    convert(src, out)
    Path(f"{out}.pair.yaml").write_text("kit_pair: 1\nimage: img.sqfs\n")
    convert(src, out, force=True)
    assert not Path(f"{out}.pair.yaml").exists()


# -- property: whatever sits at OUT and beside it, either a clean KitError with everything
#    untouched, or success with a consistent new output ----------------------------------

THINGS = ["none", "user-file", "user-dir", "symlink", "kit-tar", "kit-dir", "stale-manifest"]


def _place(tmp: Path, src: Path, out: Path, thing: str) -> None:
    if thing == "user-file":
        out.write_text("mine\n")
    elif thing == "user-dir":
        out.mkdir()
        (out / "mine").write_text("mine\n")
    elif thing == "symlink":
        out.symlink_to(tmp / "elsewhere")
    elif thing in ("kit-tar", "kit-dir"):
        convert(src, out, fmt=thing[4:])
    elif thing == "stale-manifest":
        convert(src, out, fmt="tar")
        out.unlink()
        out.write_bytes(b"x" * 10)


@given(
    thing=st.sampled_from(THINGS),
    side=st.sampled_from(["none", "user", "kit"]),
    fmt=st.sampled_from(["tar", "dir"]),
    force=st.booleans(),
)
@example(thing="stale-manifest", side="none", fmt="tar", force=True)
@example(thing="kit-dir", side="user", fmt="dir", force=True)
def test_any_existing_out_is_refused_cleanly_or_replaced_consistently(
    tmp_path_factory, thing, side, fmt, force
):
    tmp = tmp_path_factory.mktemp("prop")
    src = small_source(tmp / "src")
    out = tmp / "img"
    _place(tmp, src, out, thing)
    if side == "user":
        Path(f"{out}.pair.yaml").write_text("mine: true\n")
    elif side == "kit":
        Path(f"{out}.pair.yaml").write_text("kit_pair: 1\n")
    before = state(tmp)
    ok = (thing == "none" or (thing == f"kit-{fmt}" and force)) and side != "user"
    if not ok:
        with pytest.raises(KitError):
            convert(src, out, fmt=fmt, force=force)
        assert state(tmp) == before
        return
    report = convert(src, out, fmt=fmt, force=force)
    manifest = json.loads(Path(f"{out}.manifest.json").read_text())
    assert manifest["output"]["identity"] == identity(out, fmt) == report.identity
    assert not Path(f"{out}.pair.yaml").exists()
    assert not [p for p in tmp.iterdir() if p.name.startswith(".")]


@pytest.fixture
def small_disk(tmp_path):
    """A real 1 MiB filesystem (tmpfs) to run out of space on."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], check=True, timeout=30
    )
    yield disk
    subprocess.run(["umount", str(disk)], check=True, timeout=30)


@pytest.mark.parametrize("fmt", list(FORMS))
def test_a_full_disk_is_one_line_and_keeps_the_old_image(tmp_path, small_disk, fmt):
    small = small_source(tmp_path / "small")
    big = oci_layout(tmp_path / "big", [tar_bytes(SMALL + [("etc/r", "f", os.urandom(3 << 20))])])
    out = small_disk / FORMS[fmt]
    convert(small, out)
    before = state(small_disk)
    proc = kit(str(big), str(out), "--force", cwd=tmp_path)
    refused(
        proc, *(["mksquashfs failed"] if fmt == "sqfs" else []), "No space left on device", "fix:"
    )
    assert state(small_disk) == before


def test_a_second_run_for_the_same_out_is_refused_while_one_holds_it(tmp_path):
    """The lock is real: flock on .OUT.kit-lock, taken here by this process as a run would."""
    import fcntl

    src = small_source(tmp_path / "src")
    lock = os.open(tmp_path / ".img.tar.kit-lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with pytest.raises(KitError, match="another kit image convert is writing it"):
            convert(src, tmp_path / "img.tar")
        assert sorted(p.name for p in tmp_path.iterdir()) == [".img.tar.kit-lock", "src"]
    finally:
        os.close(lock)
    convert(src, tmp_path / "img.tar")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "img.tar",
        "img.tar.manifest.json",
        "img.tar.sha256",
        "src",
    ]
