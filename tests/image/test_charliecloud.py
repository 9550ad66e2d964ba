"""Charliecloud's own tools accept the output: ch-convert (tar -> dir, -> squash) and ch-run."""

from __future__ import annotations

from kit.image import convert
from tests.image.chtools import ch_convert, ch_run


def test_ch_convert_and_ch_run_tarball(rich, tmp_path):
    convert(rich / "oci", tmp_path / "img.tar.gz", mount_points=["/opt/hostmpi"])
    tree = ch_convert(tmp_path / "img.tar.gz", tmp_path / "tree", "dir")
    assert ch_run(tree, "/bin/sh", "-c", "cat /data/keep.txt; echo $((6*7))") == "keep\n42\n"
    squash = ch_convert(tmp_path / "img.tar.gz", tmp_path / "img.sqfs")
    host = tmp_path / "hostmpi"
    host.mkdir()
    (host / "libmpi.so.12").write_text("host library\n")
    out = ch_run(
        squash, "/bin/sh", "-c", "cat /opt/hostmpi/libmpi.so.12", binds=(f"{host}:/opt/hostmpi",)
    )
    assert out == "host library\n"


def test_own_squashfs_runs_read_only_with_bind(built, tmp_path):
    """The .sqfs we write ourselves (mksquashfs -tar) mounts with ch-run; -b hits a created dir."""
    report = convert(built / "docker.tar", tmp_path / "img.sqfs", mount_points=["/opt/hostmpi"])
    assert "/opt/hostmpi" in report.mount_points
    host = tmp_path / "hostmpi"
    host.mkdir()
    (host / "marker").write_text("bound\n")
    out = ch_run(
        tmp_path / "img.sqfs",
        "/bin/sh",
        "-c",
        "cat /opt/app/msg /opt/hostmpi/marker; touch /x 2>/dev/null || echo read-only",
        binds=(f"{host}:/opt/hostmpi",),
    )
    assert out == "hello\nbound\nread-only\n"


def test_set_env_reads_ch_environment(built, tmp_path):
    convert(built / "oci.tar", tmp_path / "img")
    out = ch_run(tmp_path / "img", "/bin/sh", "-c", "echo $GREETING $APP", opts=("--set-env",))
    assert out == "hello /opt/app\n"
