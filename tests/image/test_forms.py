"""Every input form of real images converts to the tree umoci unpacks, minus Charliecloud's
rules.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from kit.image import convert
from tests.image.chtools import ch_convert
from tests.image.trees import charliecloud_view, diff, snapshot, without_additions

RICH_FORMS = ["oci", "oci.tar", "docker.tar", "oci-zstd"]
DEVICES = {"cdev"}  # a char device outside /dev in layer 0 (rootless umoci makes it a file)


@pytest.mark.parametrize("form", RICH_FORMS)
def test_rich_image_equals_reference_unpack(rich, tmp_path, form):
    report = convert(rich / form, tmp_path / "img.tar.gz", mount_points=["/opt/hostmpi"])
    assert (
        report.image.kind
        == {
            "oci": "oci-dir",
            "oci-zstd": "oci-dir",
            "oci.tar": "oci-archive",
            "docker.tar": "docker-archive",
        }[form]
    )
    assert len(report.image.layers) == 3
    tree = ch_convert(tmp_path / "img.tar.gz", tmp_path / "tree", "dir")  # Charliecloud accepts it
    expected = charliecloud_view(snapshot(rich / "reference"), DEVICES)
    actual = without_additions(snapshot(tree), report.mount_points)
    assert diff(expected, actual) == []
    dropped = {(n.path, n.reason) for n in report.dropped}
    assert dropped == {
        ("cdev", "device node or FIFO"),
        ("fifo", "device node or FIFO"),
        ("dev/null", "under /dev (ch-run provides its own)"),
    }
    changed = {n.path for n in report.changed}
    assert {"bin/suid", "bin/sgid", "abs", "absdir", "rootlink"} <= changed
    for mp in [
        "bin",
        "dev",
        "etc",
        "mnt",
        "proc",
        "sys",
        "tmp",
        "usr",
        "mnt/9",
        "opt/hostmpi",
        "scratch",
    ]:
        assert (tree / mp).is_dir() and not (tree / mp).is_symlink(), mp
    assert (tree / "etc/hosts").is_file() and (tree / "etc/resolv.conf").is_file()
    assert (tree / "ch/environment").read_text() == "FOO=bar\nPATH=/bin\n"
    meta = json.loads((tree / "ch/metadata.json").read_text())
    assert meta["cwd"] == "/data" and meta["labels"] == {"org.example": "demo"}
    assert meta["volumes"] == ["/scratch"]
    # hard links survive as hard links
    assert os.stat(tree / "hl/two").st_ino == os.stat(tree / "hl/three").st_ino


def test_all_forms_give_identical_bytes(rich, tmp_path):
    """The output depends on the image, not on how it was packaged (reproducible)."""
    sums = {form: convert(rich / form, tmp_path / f"{form}.tar.gz").sha256 for form in RICH_FORMS}
    assert len(set(sums.values())) == 1, sums
    line = (tmp_path / "oci.tar.gz.sha256").read_text()
    assert line == f"{sums['oci']}  oci.tar.gz\n"
    proc = subprocess.run(
        ["sha256sum", "-c", "oci.tar.gz.sha256"], cwd=tmp_path, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("fmt", ["dir", "tar", "sqfs"])
def test_other_output_formats_hold_the_same_tree(rich, tmp_path, fmt):
    out = tmp_path / {"dir": "img", "tar": "img.tar", "sqfs": "img.sqfs"}[fmt]
    report = convert(rich / "docker.tar", out)
    assert report.format == fmt
    if fmt == "dir":
        tree = out
        assert report.sha256 is None and not (tmp_path / "img.sha256").exists()
    elif fmt == "tar":
        tree = tmp_path / "x"
        tree.mkdir()
        subprocess.run(["tar", "-xpf", str(out), "-C", str(tree)], check=True)
    else:
        if not shutil.which("unsquashfs"):
            pytest.skip("unsquashfs missing")
        tree = tmp_path / "x"
        subprocess.run(
            ["unsquashfs", "-q", "-no-xattrs", "-d", str(tree), str(out)],
            check=True,
            capture_output=True,
        )
    expected = charliecloud_view(snapshot(rich / "reference"), DEVICES)
    assert diff(expected, without_additions(snapshot(tree), report.mount_points)) == []
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]
    assert leftovers == []


@pytest.mark.parametrize("form", ["docker.tar", "oci.tar"])
def test_buildah_image_equals_reference(built, tmp_path, form):
    report = convert(built / form, tmp_path / "img")
    assert len(report.image.layers) >= 2
    expected = charliecloud_view(snapshot(built / "reference"))
    assert diff(expected, without_additions(snapshot(tmp_path / "img"), report.mount_points)) == []
    assert not (tmp_path / "img/data/gone").exists()
    assert (tmp_path / "img/opt/app/msg").read_text() == "hello\n"
    env = (tmp_path / "img/ch/environment").read_text().splitlines()
    assert "APP=/opt/app" in env and "GREETING=hello" in env and env == sorted(env)


def test_flat_rootfs_tar_and_dir(rich, tmp_path):
    """A flat root filesystem (tree or tar) is one layer with the same rules."""
    rootfs_tar = tmp_path / "rootfs.tar"
    subprocess.run(["tar", "-C", str(rich / "reference"), "-cf", str(rootfs_tar), "."], check=True)
    a = convert(rich / "reference", tmp_path / "a.tar.gz")
    b = convert(rootfs_tar, tmp_path / "b.tar.gz")
    assert (a.image.kind, b.image.kind) == ("rootfs-dir", "rootfs-tar")
    for name in ("a", "b"):
        tree = ch_convert(tmp_path / f"{name}.tar.gz", tmp_path / name, "dir")
        report = a if name == "a" else b
        expected = charliecloud_view(snapshot(rich / "reference"))
        assert diff(expected, without_additions(snapshot(tree), report.mount_points)) == []


def test_charliecloud_tarball_round_trips(rich, tmp_path):
    """Our own gzip output is a valid flat root filesystem input: converting it again is a no-op."""
    first = convert(rich / "oci", tmp_path / "one.tar.gz")
    second = convert(tmp_path / "one.tar.gz", tmp_path / "two")
    assert second.image.kind == "rootfs-tar" and second.mount_points == []
    assert second.dropped == [] and second.changed == []
    one = ch_convert(tmp_path / "one.tar.gz", tmp_path / "one", "dir")
    assert diff(snapshot(one), snapshot(tmp_path / "two")) == []  # incl. the ch/ files kept
    assert first.sha256 and second.sha256 is None  # a directory has no single digest
