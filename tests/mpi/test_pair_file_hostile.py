"""`kit mpi pair` writes IMAGE.pair.yaml (or --out) only over a pair file the kit wrote: a user's
file, a link planted at that name (to a file of the user's, or dangling), a directory or a FIFO
there is left as it was, and the image is not prepared either; the command ends with one line
naming the file and the fix. A pair decided for an image that was replaced before the write is
not written. The image is a small tree holding this machine's real MPICH library."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kit.errors import KitError
from kit.mpi import make_pair, write_pair
from tests.mpi.hostile import mpich_tree, site_file, snapshot

REPO = Path(__file__).resolve().parents[2]  # the CLI under test is this checkout's


def kit(*argv: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-m", "kit", "-q", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def plant(kind: str, at: Path, victim: Path) -> None:
    victim.write_text("the user's own notes\n")
    if kind == "user file":
        at.write_text("the user's own notes\n")
    elif kind == "link to a user file":
        at.symlink_to(victim)
    elif kind == "dangling link":
        at.symlink_to(victim.parent / "nothing-here")
    elif kind == "directory":
        at.mkdir()
        (at / "keep").write_text("kept\n")
    else:
        os.mkfifo(at)


@pytest.mark.parametrize(
    "kind", ["user file", "link to a user file", "dangling link", "directory", "fifo"]
)
@pytest.mark.parametrize("out", [False, True])
def test_what_the_kit_did_not_write_is_not_replaced(tmp_path, kind, out):
    image, site = mpich_tree(tmp_path / "img"), site_file(tmp_path)
    target = tmp_path / ("mine.yaml" if out else "img.pair.yaml")
    victim = tmp_path / "victim.txt"
    plant(kind, target, victim)
    before, image_before = snapshot(tmp_path), snapshot(image)
    extra = ["--out", str(target)] if out else []
    run = kit("mpi", "pair", "--site", str(site), str(image), "--prepare", *extra)
    assert run.returncode == 1, run.stderr
    assert run.stderr.count("\n") == 1 and run.stderr.startswith(f"kit: error: {target}: ")
    assert "fix: move it away or name another file with --out" in run.stderr
    assert snapshot(tmp_path) == before and snapshot(image) == image_before  # not prepared either
    assert victim.read_text() == "the user's own notes\n"
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".part")]

    # moved away, the pair is written; a second run replaces the kit's own file
    if kind == "directory":
        os.remove(target / "keep")
        os.rmdir(target)
    else:
        os.remove(target)
    for _ in range(2):
        run = kit("mpi", "pair", "--site", str(site), str(image), *extra)
        assert run.returncode == 0, run.stderr
        assert yaml.safe_load(target.read_text()) == make_pair(site, image).document()


def test_a_pair_for_an_image_replaced_before_the_write_is_not_written(tmp_path):
    image, site = mpich_tree(tmp_path / "img"), site_file(tmp_path)
    pair = make_pair(site, image)
    other = mpich_tree(tmp_path / "other")
    (other / "etc/marker").write_text("a different image\n")
    os.rename(image, tmp_path / "old")
    os.rename(other, image)  # IMAGE now names another tree than the one paired
    with pytest.raises(
        KitError,
        match=r"img: was replaced or changed while it was being paired; no pair file was written; "
        r"fix: run kit mpi pair again",
    ) as refused:
        write_pair(pair)
    assert refused.value.where == str(image)
    assert refused.value.fix == "run kit mpi pair again once it is in place"
    assert not (tmp_path / "img.pair.yaml").exists()
    assert write_pair(make_pair(site, image)) == tmp_path / "img.pair.yaml"  # paired again: written


def test_a_pair_file_written_and_removed_by_another_run_meanwhile_is_not_raced(
    tmp_path, monkeypatch
):
    """Another run writes the pair file between the check and the rename (so the rename finds
    a file there) and removes it before it is read: nothing is replaced, one line says so."""
    from kit.mpi import pair_builder

    image, site = mpich_tree(tmp_path / "img"), site_file(tmp_path)
    pair = make_pair(site, image)

    def taken_then_gone(dir_fd: int, src: str, dst: str) -> None:
        raise FileExistsError(dst)

    monkeypatch.setattr(pair_builder, "rename_noreplace", taken_then_gone)
    with pytest.raises(
        KitError, match=r"img.pair.yaml: changed while the pair was written; nothing was replaced"
    ):
        write_pair(pair)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["img", "site.yaml"]
