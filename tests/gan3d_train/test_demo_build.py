"""`gan3d demo` removes its data and checkpoints in --build at each run: only in a directory it made."""
from pathlib import Path

import pytest

from gan3d.demo import MARKER, OWNED, claim_build, main
from kit.errors import KitError


def test_a_users_directory_is_refused_before_anything_and_left(tmp_path, capsys):
    mine = tmp_path / "project"
    (mine / "data").mkdir(parents=True)
    (mine / "data" / "showers.h5").write_bytes(b"precious")
    (mine / "ckpt").mkdir()
    (mine / "ckpt" / "notes").write_text("keep")
    assert main(["--build", str(mine), "--site", "laptop"]) == 1
    assert "did not write" in capsys.readouterr().out
    assert (mine / "data" / "showers.h5").read_bytes() == b"precious"
    assert (mine / "ckpt" / "notes").read_text() == "keep" and not (mine / OWNED).exists()


def test_new_empty_marked_and_earlier_demo_dirs_are_taken(tmp_path):
    assert (claim_build(tmp_path / "new") / OWNED).is_file()
    (tmp_path / "empty").mkdir()
    assert (claim_build(tmp_path / "empty") / OWNED).is_file()
    earlier = tmp_path / "earlier"  # written by a demo from before the marker
    (earlier / "data").mkdir(parents=True)
    (earlier / "data" / MARKER).write_text("done\n")
    (earlier / "ckpt").mkdir()
    assert (claim_build(earlier) / OWNED).is_file()


@pytest.mark.parametrize("kind", ["file", "symlink", "half-data"])
def test_other_things_at_build_are_refused(tmp_path, kind):
    build = tmp_path / "b"
    if kind == "file":
        build.write_text("x")
    elif kind == "symlink":
        (tmp_path / "elsewhere").mkdir()
        build.symlink_to(tmp_path / "elsewhere")
    else:  # a "data" dir without the demo's completion marker may be anybody's
        (build / "data").mkdir(parents=True)
    with pytest.raises(KitError, match="--build"):
        claim_build(build)
