"""Layer semantics on hand-made layouts: replacements, whiteouts, links, mount points, selection."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from kit.errors import KitError
from kit.image import convert
from tests.image.builders import oci_layout, run, tar_bytes

BASE = [("bin", "d", None), ("bin/sh", "f", b"#!fake\n"), ("etc", "d", None)]


def flat(tmp_path, layers, **kw):
    src = oci_layout(tmp_path / "src", [tar_bytes(l) for l in layers])
    report = convert(src, tmp_path / "img", **kw)
    return tmp_path / "img", report


def test_hard_link_whose_target_is_deleted_keeps_its_data(tmp_path):
    img, report = flat(tmp_path, [BASE + [("a", "f", b"data\n"), ("b", "h", "a"), ("c", "h", "a")],
                                  [(".wh.a", "f", b"")]])
    assert not (img / "a").exists()
    assert (img / "b").read_text() == "data\n" and (img / "c").read_text() == "data\n"
    assert os.stat(img / "b").st_ino == os.stat(img / "c").st_ino
    assert any("stored as a copy" in n.reason for n in report.changed)


def test_whiteout_applies_to_earlier_layers_only(tmp_path):
    img, _ = flat(tmp_path, [BASE + [("x", "f", b"old")], [(".wh.x", "f", b""), ("x", "f", b"new")]])
    assert (img / "x").read_text() == "new"


def test_type_replacements(tmp_path):
    img, _ = flat(tmp_path, [
        BASE + [("d", "d", None), ("d/f", "f", b"1"), ("s", "l", "/etc"), ("f", "f", b"file")],
        [("d", "l", "/etc"), ("s", "d", None), ("s/inner", "f", b"2"), ("f", "d", None),
         ("f/g", "f", b"3")],
    ])
    assert os.readlink(img / "d") == "etc"  # dir -> symlink, made relative, subtree gone
    assert (img / "s").is_dir() and not (img / "s").is_symlink()
    assert (img / "s/inner").read_text() == "2" and not (img / "etc/inner").exists()
    assert (img / "f/g").read_text() == "3"


def test_opaque_directory_hides_lower_children_only(tmp_path):
    img, _ = flat(tmp_path, [BASE + [("o", "d", None), ("o/old", "f", b"")],
                             [("o", "d", None), ("o/.wh..wh..opq", "f", b""), ("o/new", "f", b"")]])
    assert sorted(os.listdir(img / "o")) == ["new"]


def test_empty_layers_are_fine(tmp_path):
    src = oci_layout(tmp_path / "src", [tar_bytes(BASE), tar_bytes([]), b""])
    report = convert(src, tmp_path / "img")
    assert len(report.image.layers) == 3 and (tmp_path / "img/bin/sh").is_file()


def test_opaque_marker_at_the_root_hides_all_lower_layers(tmp_path):
    img, _ = flat(tmp_path, [BASE + [("old", "f", b"")],
                             [(".wh..wh..opq", "f", b""), ("bin", "d", None), ("bin/new", "f", b"")]])
    assert not (img / "old").exists() and not (img / "bin/sh").exists()
    assert (img / "bin/new").exists()


def test_missing_parents_are_created(tmp_path):
    img, report = flat(tmp_path, [BASE + [("x/y/z", "f", b"1")]])
    assert (img / "x/y").is_dir() and (img / "x/y/z").read_text() == "1"
    assert {"x", "x/y"} <= {n.path for n in report.changed}


def test_merged_usr_bin_symlink_is_kept(tmp_path):
    img, report = flat(tmp_path, [[("usr", "d", None), ("usr/bin", "d", None), ("bin", "l", "usr/bin"),
                                   ("etc", "d", None), ("etc/hosts", "l", "/run/hosts")]])
    assert os.readlink(img / "bin") == "usr/bin"
    assert os.readlink(img / "etc/hosts") == "../run/hosts"
    assert "/bin" not in report.mount_points


def test_mount_point_never_follows_a_symlink(tmp_path):
    src = oci_layout(tmp_path / "src", [tar_bytes(BASE + [("usr", "d", None), ("opt", "l", "/usr")])])
    with pytest.raises(KitError, match=r"--mount-point /opt/hostmpi: /opt is a symlink"):
        convert(src, tmp_path / "out" / "img.tar.gz", mount_points=["/opt/hostmpi"])
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []
    with pytest.raises(KitError, match="absolute"):
        convert(src, tmp_path / "img.tar.gz", mount_points=["opt/x"])


def test_dry_run_reports_and_writes_nothing(tmp_path):
    src = oci_layout(tmp_path / "src", [tar_bytes(BASE + [("dev", "d", None), ("dev/tty", "f", b""),
                                                         ("bin/su", "f", b"x")])])
    report = convert(src, tmp_path / "out" / "img.tar.gz", dry_run=True)
    assert report.dry_run and report.sha256 is None and report.entries > 0
    assert [n.path for n in report.dropped] == ["dev/tty"]
    assert not (tmp_path / "out").exists()


def test_image_selection(rich, built, tmp_path):
    multi = tmp_path / "multi"
    shutil.copytree(rich / "oci", multi)
    run("skopeo", "copy", f"oci:{built}/oci:kit-test", f"oci:{multi}:other")
    with pytest.raises(KitError, match=r"holds 2 images.*rich.*other"):
        convert(multi, tmp_path / "a.tar.gz")
    assert convert(multi, tmp_path / "b.tar.gz", image="other").image.ref == "other"
    digest = convert(multi, tmp_path / "c.tar.gz", image="rich").image.manifest_digest
    assert convert(multi, tmp_path / "d.tar.gz", image=digest).image.ref == "rich"
    with pytest.raises(KitError, match="no image matches 'nope'"):
        convert(multi, tmp_path / "e.tar.gz", image="nope")


def test_cli_convert_and_error_exit(rich, tmp_path):
    kit = [sys.executable, "-m", "kit", "image", "convert"]
    ok = subprocess.run(kit + [str(rich / "docker.tar"), str(tmp_path / "img.sqfs"),
                               "--mount-point", "/opt/hostmpi", "--level", "1"],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert "mount points created" in ok.stdout and (tmp_path / "img.sqfs.sha256").is_file()
    src = oci_layout(tmp_path / "bad", [tar_bytes([("../x", "f", b"")])])
    bad = subprocess.run(kit + [str(src), str(tmp_path / "bad.tar.gz")], capture_output=True,
                         text=True)
    assert bad.returncode == 1 and "kit: error: layer 0" in bad.stderr and "'../x'" in bad.stderr
    assert not (tmp_path / "bad.tar.gz").exists()
