"""`gan3d demo` removes its data and checkpoints in --build at each run: only in a directory it
made.
"""

import argparse
from pathlib import Path

import pytest
from rich.console import Console

from gan3d.demo import EARLIER_PLOTS, MARKER, OWNED, claim_build, main, run_validation
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


@pytest.mark.parametrize("kind", ["file", "symlink", "half-data", "plots", "ckpt"])
def test_other_things_at_build_are_refused(tmp_path, kind):
    build = tmp_path / "b"
    if kind == "file":
        build.write_text("x")
    elif kind == "symlink":
        (tmp_path / "elsewhere").mkdir()
        build.symlink_to(tmp_path / "elsewhere")
    elif kind == "half-data":  # a "data" dir without the demo's completion marker may be anybody's
        (build / "data").mkdir(parents=True)
    else:  # a lone "plots" or "ckpt" (a user's figures, weights), which the demo would replace
        (build / kind).mkdir(parents=True)
        (build / kind / "mine").write_text("keep")
    with pytest.raises(KitError, match="--build"):
        claim_build(build)
    if kind in ("plots", "ckpt"):
        assert (build / kind / "mine").read_text() == "keep"


def _earlier_demo_with_plots(tmp_path: Path) -> Path:
    build = claim_build(tmp_path / "build")
    (build / "plots").mkdir()
    (build / "plots" / "energy.png").write_bytes(b"last run's plot")
    return build


def test_a_failed_training_keeps_the_last_runs_plots(tmp_path):
    """The plots give way only when a new check has made new ones (a failed run keeps the
    last run's plots). Training fails at once here: --threads 0."""
    build = _earlier_demo_with_plots(tmp_path)
    code = main(
        [
            "--build",
            str(build),
            "--site",
            "laptop",
            "--preset",
            "tiny",
            "--threads",
            "0",
            "--results",
            str(tmp_path / "r.json"),
        ]
    )
    assert code != 0 and not (tmp_path / "r.json").exists()
    assert (build / "plots" / "energy.png").read_bytes() == b"last run's plot"


def test_a_failed_check_brings_the_last_runs_plots_back_and_a_killed_ones_are_restored(tmp_path):
    build = _earlier_demo_with_plots(tmp_path)
    data = tmp_path / "missing.h5"  # validate refuses it: a failed check, for real
    args = argparse.Namespace(build=build, preset="tiny", results=tmp_path / "r.json")
    assert run_validation(args, [data], Console(quiet=True)) is None
    assert (build / "plots" / "energy.png").read_bytes() == b"last run's plot"
    assert not (build / EARLIER_PLOTS).exists()
    # a run killed during its check left its partial plots and the earlier ones aside
    (build / "plots").rename(build / EARLIER_PLOTS)
    (build / "plots").mkdir()
    (build / "plots" / "partial.png").write_bytes(b"half")
    assert run_validation(args, [data], Console(quiet=True)) is None
    assert sorted(p.name for p in (build / "plots").iterdir()) == ["energy.png"]
    assert not (build / EARLIER_PLOTS).exists()
