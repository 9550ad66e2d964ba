"""Layer semantics on hand-made layouts: replacements, whiteouts, links, mount points, selection."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile

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
    img, report = flat(
        tmp_path,
        [BASE + [("a", "f", b"data\n"), ("b", "h", "a"), ("c", "h", "a")], [(".wh.a", "f", b"")]],
    )
    assert not (img / "a").exists()
    assert (img / "b").read_text() == "data\n" and (img / "c").read_text() == "data\n"
    assert os.stat(img / "b").st_ino == os.stat(img / "c").st_ino
    assert any("stored as a copy" in n.reason for n in report.changed)


def test_whiteout_applies_to_earlier_layers_only(tmp_path):
    img, _ = flat(
        tmp_path, [BASE + [("x", "f", b"old")], [(".wh.x", "f", b""), ("x", "f", b"new")]]
    )
    assert (img / "x").read_text() == "new"


def test_type_replacements(tmp_path):
    img, _ = flat(
        tmp_path,
        [
            BASE + [("d", "d", None), ("d/f", "f", b"1"), ("s", "l", "/etc"), ("f", "f", b"file")],
            [
                ("d", "l", "/etc"),
                ("s", "d", None),
                ("s/inner", "f", b"2"),
                ("f", "d", None),
                ("f/g", "f", b"3"),
            ],
        ],
    )
    assert os.readlink(img / "d") == "etc"  # dir -> symlink, made relative, subtree gone
    assert (img / "s").is_dir() and not (img / "s").is_symlink()
    assert (img / "s/inner").read_text() == "2" and not (img / "etc/inner").exists()
    assert (img / "f/g").read_text() == "3"


def test_opaque_directory_hides_lower_children_only(tmp_path):
    img, _ = flat(
        tmp_path,
        [
            BASE + [("o", "d", None), ("o/old", "f", b"")],
            [("o", "d", None), ("o/.wh..wh..opq", "f", b""), ("o/new", "f", b"")],
        ],
    )
    assert sorted(os.listdir(img / "o")) == ["new"]


def test_empty_layers_are_fine(tmp_path):
    src = oci_layout(tmp_path / "src", [tar_bytes(BASE), tar_bytes([]), b""])
    report = convert(src, tmp_path / "img")
    assert len(report.image.layers) == 3 and (tmp_path / "img/bin/sh").is_file()


def test_opaque_marker_at_the_root_hides_all_lower_layers(tmp_path):
    img, _ = flat(
        tmp_path,
        [
            BASE + [("old", "f", b"")],
            [(".wh..wh..opq", "f", b""), ("bin", "d", None), ("bin/new", "f", b"")],
        ],
    )
    assert not (img / "old").exists() and not (img / "bin/sh").exists()
    assert (img / "bin/new").exists()


def test_missing_parents_are_created(tmp_path):
    img, report = flat(tmp_path, [BASE + [("x/y/z", "f", b"1")]])
    assert (img / "x/y").is_dir() and (img / "x/y/z").read_text() == "1"
    assert {"x", "x/y"} <= {n.path for n in report.changed}


def test_merged_usr_bin_symlink_is_kept(tmp_path):
    img, report = flat(
        tmp_path,
        [
            [
                ("usr", "d", None),
                ("usr/bin", "d", None),
                ("bin", "l", "usr/bin"),
                ("etc", "d", None),
                ("etc/hosts", "l", "/run/hosts"),
            ]
        ],
    )
    assert os.readlink(img / "bin") == "usr/bin"
    assert os.readlink(img / "etc/hosts") == "../run/hosts"
    assert "/bin" not in report.mount_points


def test_mount_point_never_follows_a_symlink(tmp_path):
    src = oci_layout(
        tmp_path / "src", [tar_bytes(BASE + [("usr", "d", None), ("opt", "l", "/usr")])]
    )
    with pytest.raises(KitError, match=r"--mount-point /opt/hostmpi: /opt is a symlink"):
        convert(src, tmp_path / "out" / "img.tar.gz", mount_points=["/opt/hostmpi"])
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []
    with pytest.raises(KitError, match="absolute"):
        convert(src, tmp_path / "img.tar.gz", mount_points=["opt/x"])


def test_dry_run_reports_and_writes_nothing(tmp_path):
    src = oci_layout(
        tmp_path / "src",
        [tar_bytes(BASE + [("dev", "d", None), ("dev/tty", "f", b""), ("bin/su", "f", b"x")])],
    )
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
    ok = subprocess.run(
        kit
        + [
            str(rich / "docker.tar"),
            str(tmp_path / "img.sqfs"),
            "--mount-point",
            "/opt/hostmpi",
            "--level",
            "1",
        ],
        capture_output=True,
        text=True,
    )
    assert ok.returncode == 0, ok.stderr
    assert "mount points created" in ok.stdout and (tmp_path / "img.sqfs.sha256").is_file()
    src = oci_layout(tmp_path / "bad", [tar_bytes([("../x", "f", b"")])])
    bad = subprocess.run(
        kit + [str(src), str(tmp_path / "bad.tar.gz")], capture_output=True, text=True
    )
    assert bad.returncode == 1 and "kit: error: layer 0" in bad.stderr and "'../x'" in bad.stderr
    assert not (tmp_path / "bad.tar.gz").exists()


def test_hard_links_to_removed_targets_cost_one_extra_pass(tmp_path, monkeypatch):
    """40 links, each to its own file that the next layer removes: the base layer is read
    twice in all (once, plus one pass for every copy), not once per link."""
    import kit.image.flatten as flatten

    reads: list[int] = []
    real = flatten.iter_members

    def counting(layer, *args, **kw):
        if not kw.get("headers_only"):
            reads.append(layer.index)
        return real(layer, *args, **kw)

    monkeypatch.setattr(flatten, "iter_members", counting)
    n = 40
    base = BASE + [(f"a{i}", "f", b"data %d\n" % i) for i in range(n)]
    base += [(f"b{i}", "h", f"a{i}") for i in range(n)] + [("c0", "h", "b0")]
    img, report = flat(tmp_path, [base, [(f".wh.a{i}", "f", b"") for i in range(n)]])
    assert reads.count(0) == 2 and reads.count(1) == 1, reads
    for i in range(n):
        assert (img / f"b{i}").read_bytes() == b"data %d\n" % i and not (img / f"a{i}").exists()
    assert os.stat(img / "c0").st_ino == os.stat(img / "b0").st_ino
    assert sum("stored as a copy" in note.reason for note in report.changed) == n


def test_hard_link_to_a_removed_link_keeps_the_data(tmp_path):
    """c -> b -> a, and a later layer removes both a and b: c still holds a's data."""
    img, _ = flat(
        tmp_path,
        [
            BASE + [("a", "f", b"A"), ("b", "h", "a"), ("c", "h", "b")],
            [(".wh.a", "f", b""), (".wh.b", "f", b"")],
        ],
    )
    assert (img / "c").read_bytes() == b"A" and not (img / "b").exists()


def test_hard_link_sees_the_version_of_its_own_layer(tmp_path):
    """Layer 0's b -> a copies layer 0's a; layer 1's c -> a gets layer 1's a, though both
    versions of a are removed or replaced later."""
    img, _ = flat(
        tmp_path,
        [
            BASE + [("a", "f", b"old"), ("b", "h", "a")],
            [("a", "f", b"new"), ("c", "h", "a")],
            [(".wh.a", "f", b"")],
        ],
    )
    assert (img / "b").read_bytes() == b"old" and (img / "c").read_bytes() == b"new"


@pytest.mark.parametrize("fmt", ["img", "img.tar"])
def test_hard_link_to_a_symlink_elsewhere_stays_inside(tmp_path, fmt):
    """b/e -> /a becomes b/e -> ../a; a hard link e to it would share that text, and from the
    image root ../a points out of the image. The conversion makes e a symlink of its own: e -> a."""
    src = oci_layout(
        tmp_path / "src",
        [
            tar_bytes(
                BASE
                + [
                    ("b", "d", None),
                    ("b/e", "l", "/a"),
                    ("e", "h", "b/e"),
                    ("d", "d", None),
                    ("d/f", "h", "b/e"),
                ]
            ),
            tar_bytes([("b/.wh.e", "f", b""), ("g", "h", "e")]),
        ],
    )
    report = convert(src, tmp_path / fmt)
    if fmt == "img":
        links = {n: os.readlink(tmp_path / "img" / n) for n in ("e", "d/f", "g")}
    else:
        with tarfile.open(tmp_path / fmt) as tf:
            links = {n: tf.getmember(n).linkname for n in ("e", "d/f", "g")}
            assert all(tf.getmember(n).issym() for n in links)
    assert links == {"e": "a", "d/f": "../a", "g": "a"}
    assert sum("stored as a symlink" in n.reason for n in report.changed) == 3


def test_parents_of_removed_members_are_kept_but_not_under_dev(tmp_path):
    """Unpacking layer 0 makes a/ and dev/x/; layer 1 removes only a/b and dev/x/y: a/
    stays, dev/x/ is under /dev, which conversion drops."""
    img, _ = flat(
        tmp_path,
        [
            BASE + [("a/b", "f", b""), ("dev/x/y", "f", b"")],
            [("a/.wh.b", "f", b""), ("dev/x/.wh.y", "f", b"")],
        ],
    )
    assert (img / "a").is_dir() and os.listdir(img / "a") == []
    assert not (img / "dev/x").exists()
