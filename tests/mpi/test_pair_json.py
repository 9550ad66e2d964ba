"""`kit mpi pair --json` on a small real image (the machine's own MPICH library in a tree):
the document is make_pair's own, and what was written is named."""

from __future__ import annotations

import json

import yaml

from kit.cli import main
from kit.mpi import make_pair
from tests.mpi.hostile import mpich_tree, site_file


def test_pair_json_is_make_pairs_document_and_names_the_file_written(tmp_path, capsys):
    image, site, out = mpich_tree(tmp_path / "img"), site_file(tmp_path), tmp_path / "img.pair.yaml"
    assert main(["mpi", "pair", "--site", str(site), str(image), "--out", str(out), "--json"]) == 0
    stdout, err = capsys.readouterr()
    doc = json.loads(stdout)
    expected = make_pair(site, image).document()
    assert doc["schema"] == "kit-mpi-pair/1" and doc["pair"] == expected
    assert doc["pair"]["container_mpi"]["vendor"] == "mpich" and doc["pair"]["verdict"]["ok"]
    assert doc["written"] == str(out) and yaml.safe_load(out.read_text()) == expected
    assert doc["prepared"] is None and doc["dry_run"] is False


def test_pair_json_with_mode_and_dry_run_writes_nothing(tmp_path, capsys):
    image, site, out = mpich_tree(tmp_path / "img"), site_file(tmp_path), tmp_path / "dry.pair.yaml"
    argv = [
        "mpi",
        "pair",
        "--site",
        str(site),
        str(image),
        "--out",
        str(out),
        "--mode",
        "major",
        "--dry-run",
        "--json",
    ]
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (
        doc["pair"] == make_pair(site, image, mode="major").document()
        and doc["pair"]["verdict"]["mode"] == "major"
    )
    assert doc["written"] is None and doc["dry_run"] is True and not out.exists()


def test_pair_json_error_is_one_line_and_nothing_on_stdout(tmp_path, capsys):
    image = mpich_tree(tmp_path / "img")
    assert main(["mpi", "pair", "--site", "supermuc", str(image), "--json"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert "did you mean 'supermuc-ng'?" in json.loads(err)["error"]["message"]
    assert not list(tmp_path.glob("*.pair.yaml"))
