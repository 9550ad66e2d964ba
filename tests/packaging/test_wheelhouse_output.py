"""make wheelhouse never replaces a directory it did not make."""
from __future__ import annotations

import os

from tests.packaging.conftest import REPO, run


def test_an_out_dir_the_script_did_not_make_is_left_alone(tmp_path):
    out = tmp_path / "wheelhouse"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    done = run(["bash", str(REPO / "scripts" / "wheelhouse.sh")], timeout=120,
               env={**os.environ, "OUT": str(out), "PYTHONPATH": ""})
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert "was not made by this script; fix:" in done.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["wheelhouse"] and (out / "notes.txt").read_text() == "mine"


def test_bad_extras_or_platform_are_refused_before_any_download(tmp_path):
    for var, value in (("EXTRAS", "report;rm -rf /"), ("PLATFORM", "../x")):
        done = run(["bash", str(REPO / "scripts" / "wheelhouse.sh")], timeout=120,
                   env={**os.environ, "OUT": str(tmp_path / "wh"), var: value, "PYTHONPATH": ""})
        assert done.returncode == 1 and f"{var}=" in done.stderr and done.stderr.count("\n") == 1, done.stderr
        assert not any(tmp_path.iterdir())
