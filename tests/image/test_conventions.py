"""What users expect of a converted image: /etc/passwd and /etc/group exist (ch-run binds onto
them), an image's own are kept as they are, and `kit image convert` prints a short summary."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from kit.image import convert
from tests.image.builders import busybox_root, oci_layout
from tests.image.chtools import ch_run

ACCOUNTS = ("etc/passwd", "etc/group")


@pytest.mark.system  # ch-run as root (a squashfs needs /dev/fuse)
def test_ch_run_works_on_an_image_that_lacked_passwd_and_group(tmp_path):
    """Plain ch-run bind-mounts the host's passwd/group: without a target there it cannot start."""
    src = oci_layout(tmp_path / "src", [busybox_root()])
    report = convert(src, tmp_path / "img")
    for name in ACCOUNTS:
        path = tmp_path / "img" / name
        assert path.is_file() and not path.is_symlink() and path.stat().st_size == 0
        assert "/" + name in report.mount_points
    assert (
        ch_run(tmp_path / "img", "/bin/sh", "-c", "id -un; grep -c ^root: /etc/group")
        == "root\n1\n"
    )


@pytest.mark.system  # ch-run as root (a squashfs needs /dev/fuse)
def test_ch_run_works_on_a_squashfs_that_lacked_them(tmp_path):
    src = oci_layout(tmp_path / "src", [busybox_root()])
    convert(src, tmp_path / "img.sqfs")
    assert ch_run(tmp_path / "img.sqfs", "/bin/sh", "-c", "echo ran") == "ran\n"


@pytest.mark.system  # ch-run as root (a squashfs needs /dev/fuse)
def test_the_images_own_files_and_symlinks_are_kept(tmp_path):
    src = oci_layout(
        tmp_path / "src",
        [
            busybox_root(
                ("etc/passwd", "f", b"app:x:1000:1000::/:/bin/sh\n", 0o644),
                ("usr", "d", None, 0o755),
                ("usr/lib", "d", None, 0o755),
                ("usr/lib/group", "f", b"app:x:1000:\n", 0o644),
                ("etc/group", "l", "/usr/lib/group", 0o777),
            )
        ],
    )
    report = convert(src, tmp_path / "img")
    img = tmp_path / "img"
    assert (img / "etc/passwd").read_bytes() == b"app:x:1000:1000::/:/bin/sh\n"
    assert os.readlink(img / "etc/group") == "../usr/lib/group"  # made relative, not replaced
    assert (img / "usr/lib/group").read_bytes() == b"app:x:1000:\n"
    assert not {"/etc/passwd", "/etc/group"} & set(report.mount_points)
    assert ch_run(img, "/bin/sh", "-c", "echo ran") == "ran\n"


FORMS = {
    "missing": [],
    "file": [("etc/{n}", "f", b"mine\n", 0o600)],
    "relative symlink": [
        ("etc/{n}", "l", "../opt/{n}", 0o777),
        ("opt", "d", None, 0o755),
        ("opt/{n}", "f", b"linked\n", 0o644),
    ],
    "absolute symlink": [("etc/{n}", "l", "/opt/{n}", 0o777)],
    "dangling symlink": [("etc/{n}", "l", "nowhere", 0o777)],
    "directory": [("etc/{n}", "d", None, 0o755)],
}


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(passwd=st.sampled_from(sorted(FORMS)), group=st.sampled_from(sorted(FORMS)))
@example(passwd="missing", group="missing")
@example(passwd="dangling symlink", group="directory")
def test_only_missing_account_files_are_created(tmp_path_factory, passwd, group):
    """Whatever the image has at /etc/passwd or /etc/group stays (its kind, target or data);
    only a missing one is created, empty."""
    tmp = tmp_path_factory.mktemp("conv")
    members, seen = [], set()
    for n, form in (("passwd", passwd), ("group", group)):
        for name, kind, payload, mode in FORMS[form]:
            name = name.format(n=n)
            if name not in seen:  # the two may share /opt
                seen.add(name)
                members.append(
                    (name, kind, payload.format(n=n) if isinstance(payload, str) else payload, mode)
                )
    src = oci_layout(tmp / "src", [busybox_root(*members)])
    convert(src, tmp / "img")
    for n, form in (("passwd", passwd), ("group", group)):
        path = tmp / "img/etc" / n
        if form == "missing":
            assert path.is_file() and not path.is_symlink() and path.read_bytes() == b""
        elif form == "file":
            assert not path.is_symlink() and path.read_bytes() == b"mine\n"
        elif form == "directory":
            assert path.is_dir() and not path.is_symlink()
        else:
            target = {
                "relative symlink": f"../opt/{n}",
                "absolute symlink": f"../opt/{n}",
                "dangling symlink": "nowhere",
            }[form]
            assert os.readlink(path) == target


def kit_convert(*args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, "-m", "kit", "image", "convert", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return proc


def test_convert_prints_counts_per_rule_and_verbose_the_paths(tmp_path):
    """Hundreds of dropped and changed paths give a few summary lines; -v lists every path."""
    many = [("junk", "d", None, 0o755)]
    many += [(f"junk/dev{i}", "c", None, 0o644) for i in range(300)]
    many += [(f"junk/suid{i}", "f", b"", 0o4755) for i in range(50)]
    many += [
        (f"junk/abs{i}", "l", f"/bin/busybox{i}", 0o777) for i in range(50)
    ]  # distinct targets
    src = oci_layout(tmp_path / "src", [busybox_root(*many)])
    out = kit_convert(str(src), str(tmp_path / "img.tar.gz")).stdout
    lines = out.splitlines()
    assert len(lines) <= 12, out
    assert "  dropped 300 paths: device node or FIFO" in lines
    assert "  changed 50 paths: setuid/setgid bit removed" in lines
    assert "  changed 50 paths: absolute symlink made relative" in lines
    assert "/junk/dev7" not in out and "/junk/abs7" not in out
    verbose = kit_convert(str(src), str(tmp_path / "v.tar.gz"), "-v").stdout
    for i in range(300):
        assert f"  dropped /junk/dev{i} (layer 0): device node or FIFO\n" in verbose
    for i in range(50):
        assert f"  changed /junk/suid{i} (layer 0): setuid/setgid bit removed\n" in verbose
        assert (
            f"  changed /junk/abs{i} (layer 0): absolute symlink /bin/busybox{i} made relative\n"
            in verbose
        )


def test_verbose_says_how_many_paths_were_only_counted(tmp_path):
    """Past NOTE_CAP notes a kind is only counted: -v must say so, not pass the list off as
    whole.
    """
    devices = [("junk", "d", None, 0o755)] + [
        (f"junk/d{i}", "c", None, 0o644) for i in range(10_005)
    ]
    src = oci_layout(tmp_path / "src", [busybox_root(*devices)])
    out = kit_convert(str(src), str(tmp_path / "img"), "--dry-run", "-v").stdout
    assert "  dropped 10005 paths: device node or FIFO\n" in out
    assert out.count(": device node or FIFO\n") == 1 + 10_000
    assert "  ... and 5 more (only the first 10000 of each kind are kept)\n" in out
    short = kit_convert(str(src), str(tmp_path / "img"), "--dry-run").stdout
    assert (
        len(short.splitlines()) <= 6 and "manifest" not in short and not (tmp_path / "img").exists()
    )
