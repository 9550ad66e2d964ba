"""The kit's own leftovers go even when an image made some of its directories unreadable.

Root ignores directory permissions, so the user who meets this is a non-root one: the test runs
the cleanup as `nobody` (setpriv), on a tree laid out as a converted image can leave it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.support.parts import require

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def public_tmp():
    base = Path(tempfile.mkdtemp(prefix="kit-cleanup-", dir="/tmp"))
    base.chmod(0o755)
    yield base
    subprocess.run(["chmod", "-R", "u+rwx", str(base)], check=False)
    shutil.rmtree(base, ignore_errors=True)


def test_a_tree_with_closed_directories_is_removed_as_a_non_root_user(public_tmp):
    require(
        os.geteuid() == 0 and shutil.which("setpriv"), "needs root to switch to nobody (setpriv)"
    )
    work = public_tmp / ".img.kit-tmp.abcdefgh"
    (work / "root/usr/locked/deeper").mkdir(parents=True)
    (work / "root/usr/locked/deeper/file").write_text("x")
    (work / "root/usr/readonly").mkdir()
    (work / "root/usr/readonly/file").write_text("y")
    subprocess.run(["chown", "-R", "nobody", str(public_tmp)], check=True)
    (work / "root/usr/locked/deeper").chmod(0o000)  # d--------- as an image may have it
    (work / "root/usr/locked").chmod(0o500)
    (work / "root/usr/readonly").chmod(0o555)
    as_nobody = [
        "setpriv",
        "--reuid=nobody",
        "--regid=nogroup",
        "--clear-groups",
        sys.executable,
        "-c",
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    probe = subprocess.run(
        as_nobody + ["import kit.atomic"], env=env, capture_output=True, text=True
    )
    require(
        probe.returncode == 0, f"nobody cannot run this venv's Python here: {probe.stderr[-200:]}"
    )
    code = (
        "import sys; from pathlib import Path; from kit.atomic import remove_tree; "
        "remove_tree(Path(sys.argv[1]))"
    )
    done = subprocess.run(as_nobody + [code, str(work)], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert not work.exists()


def test_opening_up_a_locked_directory_never_goes_through_a_link(tmp_path):
    """remove_tree gives a locked directory of the tree rwx before removing it; a name swapped for a
    link meanwhile must not open up what it points to (as root, any directory)."""
    from kit.tree_removal import open_up as _open_up

    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o500)
    (tmp_path / "link").symlink_to(target)
    with pytest.raises(OSError):
        _open_up(str(tmp_path / "link"))
    assert target.stat().st_mode & 0o777 == 0o500
    locked = tmp_path / "locked"
    locked.mkdir(mode=0)
    _open_up(str(locked))
    assert locked.stat().st_mode & 0o777 == 0o700


DEEP_TREE = """
import os, resource, sys
rules = {}
with open(sys.argv[2]) as fh:  # the module's text, as the site's script carries it
    exec(fh.read(), rules)
top = sys.argv[1]
os.mkdir(top)
fd = os.open(top, os.O_RDONLY)
for level in range(2500):  # past the recursion limit and the 2,047 levels a member name may nest
    os.mkdir("d", dir_fd=fd)
    with open(os.open("f", os.O_WRONLY | os.O_CREAT, dir_fd=fd), "w") as fh:
        fh.write("x")
    os.symlink("/", "up", dir_fd=fd)  # a link: unlinked, never followed
    child = os.open("d", os.O_RDONLY, dir_fd=fd)
    if level == 2000:
        os.fchmod(fd, 0o500)  # read-only, as an image may keep it
    os.close(fd)
    fd = child
os.close(fd)
resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))  # a site's limit: no descriptor per level
rules["remove_dir"](top + "/")
print(os.path.exists(top))
"""


@pytest.mark.parametrize("python", ["suite", "oldest"])
def test_a_tree_deeper_than_the_recursion_and_descriptor_limits_is_removed(tmp_path, python):
    """shutil.rmtree recursed once per level and kept a descriptor per level: RecursionError at
    about 1,000 levels. An image may nest 2,000; the kit and the site's installer remove it."""
    from tests.transfer.oldest import oldest_python3

    exe = sys.executable if python == "suite" else oldest_python3()
    if exe is None:
        pytest.skip("no Python 3.6 or 3.7 on this machine")
    top = tmp_path / "tree"
    done = subprocess.run(
        [exe, "-c", DEEP_TREE, str(top), str(REPO / "kit/tree_removal.py")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert (done.returncode, done.stdout) == (0, "False\n"), done.stderr[-2000:]
    assert list(tmp_path.iterdir()) == []
