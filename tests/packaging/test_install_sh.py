"""The wheelhouse's install.sh (POSIX sh, run by dash and bash) against what a login node may hand
it: a SHA256SUMS naming a FIFO, a device, a link or a hostile name; a wheel SHA256SUMS does not
list; extras that are patterns; VENV paths that are links, files, FIFOs, directories of other
files, or hold newlines. Each refusal is one line, exit 1, before any venv is made, and touches
nothing. A tiny wheelhouse is built by hand (a stand-in wheel of the kit with no requirements):
the real one takes minutes (tests/packaging/test_offline_install.py)."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.support.installs import fake_wheel, outside_env
from tests.support.paths import REPO

SHELLS = [s for s in ("dash", "bash") if shutil.which(s)]
THIS_PYTHON = "{}.{}".format(*sys.version_info[:2])
LIMIT = 60  # seconds: only a blocked install.sh gets near it
KIT_WHEEL = "secure_site_kit-2.15.1-py3-none-any.whl"
MARK = ".secure-site-kit-wheelhouse"


def write_sums(house: Path, names: list[str] | None = None) -> None:
    """SHA256SUMS as make wheelhouse writes it: sha256sum's text format over every file but
    itself.
    """
    names = (
        names
        if names is not None
        else sorted(
            str(p.relative_to(house))
            for p in house.rglob("*")
            if p.is_file() and p.name not in ("SHA256SUMS", MARK)
        )
    )
    lines = [f"{hashlib.sha256((house / n).read_bytes()).hexdigest()}  {n}" for n in names]
    (house / "SHA256SUMS").write_text("".join(line + "\n" for line in lines))


def make_house(where: Path, python_version: str = THIS_PYTHON) -> Path:
    """A wheelhouse laid out as make wheelhouse lays it out, with a stand-in kit wheel."""
    house = where / "wheelhouse"
    (house / "horovod").mkdir(parents=True)
    fake_wheel(house, "secure-site-kit", "", package="kit_stand_in")
    shutil.copy(REPO / "scripts" / "wheelhouse-install.sh", house / "install.sh")
    shutil.copy(REPO / "kit" / "pins.py", house)
    shutil.copy(REPO / "constraints.txt", house)
    (house / "PYTHON_VERSION").write_text(python_version + "\n")
    (house / "EXTRAS").write_text("report\ntransfer\n")
    (house / "horovod" / "BUILD.sh").write_text("#!/bin/sh\necho build\n")
    (house / MARK).touch()
    write_sums(house)
    return house


def install(
    shell: str,
    house: Path,
    *args: str,
    cwd: Path | None = None,
    home: Path | None = None,
    timeout: float = LIMIT,
) -> subprocess.CompletedProcess:
    env = outside_env(PYTHON=sys.executable, HOME=str(home or house.parent / "home"))
    return subprocess.run(
        [shell, str(house / "install.sh"), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd or house.parent,
        timeout=timeout,
    )


def snapshot(root: Path) -> dict[str, tuple]:
    """Every entry under root (links not followed): type, size, mtime, link target."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            st_ = os.lstat(path)
            found[os.path.relpath(path, root)] = (
                stat.S_IFMT(st_.st_mode),
                st_.st_size,
                st_.st_mtime_ns,
                os.readlink(path) if stat.S_ISLNK(st_.st_mode) else None,
            )
    return found


def refused(done: subprocess.CompletedProcess, says: str) -> None:
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("install.sh: "), done.stderr
    assert says in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


@pytest.fixture
def house(tmp_path) -> Path:
    return make_house(tmp_path)


def test_installs_into_a_new_venv_then_into_the_same_venv_again(house, tmp_path):
    """A relative VENV named like an option (and with a space) is a path under the current directory;
    dash makes the venv, bash installs into it again (one venv: they cost seconds each)."""
    work = tmp_path / "work"
    work.mkdir()
    done = install(SHELLS[0], house, "-v env", "report", cwd=work, timeout=300)
    assert done.returncode == 0, done.stderr
    venv = work / "-v env"
    assert (venv / "pyvenv.cfg").is_file()
    assert (
        subprocess.run([str(venv / "bin" / "python"), "-c", "import kit_stand_in"]).returncode == 0
    )
    again = install(
        SHELLS[-1], house, str(venv) + "/", cwd=work, timeout=300
    )  # an existing venv: installed into
    assert again.returncode == 0, again.stderr
    assert sorted(p.name for p in work.iterdir()) == ["-v env"]


@pytest.mark.parametrize("shell", SHELLS)
def test_an_existing_directory_that_is_no_venv_is_refused_and_left_alone(house, tmp_path, shell):
    mine = tmp_path / "mine"
    (mine / "bin").mkdir(parents=True)
    (mine / "bin" / "activate").write_text("my own script\n")
    (mine / "notes.txt").write_text("keep me\n")
    before = snapshot(tmp_path / "mine")
    refused(
        install(shell, house, str(mine)),
        f"VENV {mine} is a directory that is not a venv (no pyvenv.cfg)",
    )
    assert snapshot(tmp_path / "mine") == before


@pytest.mark.parametrize("shell", SHELLS)
def test_a_directory_whose_only_name_starts_with_a_newline_is_not_empty(house, tmp_path, shell):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "\nnotes").write_text("keep me\n")
    refused(install(shell, house, str(mine)), "is a directory that is not a venv")
    assert [p.name for p in mine.iterdir()] == ["\nnotes"]


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("planted", ["fifo", "device", "symlink", "directory"])
def test_what_sha256sums_names_must_be_a_regular_file_refused_at_once(house, shell, planted):
    """sha256sum opens every file named: a FIFO would block it for ever, /dev/zero never ends."""
    target = house / "EXTRAS"
    target.unlink()
    if planted == "fifo":
        os.mkfifo(target)
    elif planted == "device":
        try:
            os.mknod(target, stat.S_IFCHR | 0o600, os.makedev(1, 5))  # /dev/zero's numbers
        except PermissionError:
            pytest.skip("mknod needs CAP_MKNOD")
    elif planted == "symlink":
        target.symlink_to("/dev/zero")
    else:
        target.mkdir()
    word = {
        "fifo": "a FIFO",
        "device": "a device",
        "symlink": "a symbolic link",
        "directory": "a directory",
    }[planted]
    done = install(shell, house, str(house.parent / "venv"), timeout=20)
    refused(done, f"SHA256SUMS line 1: {target} is {word}, not a regular file")
    assert not (house.parent / "venv").exists()


@pytest.mark.parametrize("shell", SHELLS)
def test_a_wheel_sha256sums_does_not_list_is_refused(house, shell):
    """pip takes every archive of --find-links: one nobody vouched for never reaches the venv."""
    extra = fake_wheel(house.parent, "pyyaml", "", package="yaml")
    shutil.move(extra, house / extra.name)
    refused(
        install(shell, house, str(house.parent / "venv")),
        f"{house / extra.name} is not listed in SHA256SUMS",
    )
    assert not (house.parent / "venv").exists()


@pytest.mark.parametrize("shell", SHELLS)
def test_a_name_spanning_two_listed_lines_is_not_taken_for_them(house, shell):
    """SHA256SUMS lists EXTRAS and PYTHON_VERSION on consecutive lines: a file named "EXTRAS<newline>
    PYTHON_VERSION" is no listed file."""
    (house / "EXTRAS\nPYTHON_VERSION").write_text("x")
    refused(
        install(shell, house, str(house.parent / "venv")),
        f"{house}/EXTRAS?PYTHON_VERSION is not listed",
    )


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize(
    "extras", ["r.*", "rep", "report;touch pwned", "*", "report,r.*", "REPORT", "report x"]
)
def test_extras_are_exact_names_refused_before_any_venv(house, shell, extras):
    done = install(shell, house, str(house.parent / "venv"), extras)
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert "(it has: report transfer )" in done.stderr, done.stderr
    assert not (house.parent / "venv").exists() and not (house.parent / "pwned").exists()


# -- properties: generated SHA256SUMS files and VENV paths ------------------------------------------
# The wheelhouse says Python 0.0, so an install.sh that accepts everything else ends at the Python
# check, before any venv is made: each example costs one shell run, not a venv.

NAME_OK = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*(/[A-Za-z0-9][A-Za-z0-9._+-]*)?")
LISTED = [
    "EXTRAS",
    "PYTHON_VERSION",
    "constraints.txt",
    "horovod/BUILD.sh",
    "install.sh",
    KIT_WHEEL,
    "pins.py",
]
PLANTS = ["fifo", "symlink", "directory", "dangling"]
HOSTILE = [
    "../x",
    "/etc/passwd",
    "-x",
    "a b",
    "horovod/../EXTRAS",
    ".hidden",
    "a/b/c",
    "x*",
    "$(touch pwned)",
    "horovod",
    "missing.whl",
    "EXTRAS ",
    "\\EXTRAS",
    "fifo/x",
    "symlink/x",
]


@st.composite
def sums_files(draw) -> tuple[list[tuple[str, str]], list[str]]:
    """(lines as (kind, name) to render, planted entries): a listing of the wheelhouse, mutated."""
    lines = [
        ("good", n)
        for n in draw(st.lists(st.sampled_from(LISTED), unique=True, min_size=len(LISTED) - 2))
    ]
    extra = st.tuples(
        st.sampled_from(["good", "bad-sum", "upper", "one-space", "garbage", "empty"]),
        st.sampled_from(LISTED + PLANTS + HOSTILE) | st.text(max_size=12),
    )
    for at, line in draw(st.lists(st.tuples(st.integers(0, 20), extra), max_size=4)):
        lines.insert(at, line)
    return lines, draw(st.lists(st.sampled_from(PLANTS), unique=True))


def render(house: Path, lines: list[tuple[str, str]]) -> bytes:
    out = []
    for kind, name in lines:
        path = house / name
        real = (
            hashlib.sha256(path.read_bytes()).hexdigest()
            if NAME_OK.fullmatch(name) and path.is_file() and not path.is_symlink()
            else "0" * 64
        )
        out.append(
            {
                "good": f"{real}  {name}",
                "bad-sum": f"{'f' * 64}  {name}",
                "upper": f"{real.upper()}  {name}",
                "one-space": f"{real} {name}",
                "garbage": name,
                "empty": "",
            }[kind]
        )
    return "".join(line + "\n" for line in out).encode("utf-8", "surrogateescape")


def accepted(house: Path, lines: list[tuple[str, str]]) -> bool:
    """The model: every line `<sum>  <plain name>` of a regular file (no link on the way) with that
    sum, the files install.sh reads listed, and no entry beside them unlisted."""
    names = set()
    for kind, name in lines:
        if kind not in ("good", "bad-sum") or not NAME_OK.fullmatch(name):
            return False
        parent = house / name.split("/")[0]
        if "/" in name and (parent.is_symlink() or not parent.is_dir()):
            return False
        path = house / name
        if path.is_symlink() or not path.is_file():
            return False
        if kind == "bad-sum":
            return False
        names.add(name)
    if not {"PYTHON_VERSION", "EXTRAS", "pins.py", "constraints.txt", KIT_WHEEL} <= names:
        return False
    tops = {n.split("/")[0] for n in names} | {"SHA256SUMS", MARK}
    return all(entry in tops for entry in os.listdir(house))


def plant(house: Path, planted: list[str]) -> None:
    for name in planted:
        path = house / name
        if name == "fifo":
            os.mkfifo(path)
        elif name == "symlink":
            path.symlink_to("/dev/zero")
        elif name == "directory":
            path.mkdir()
        else:
            path.symlink_to(house / "nowhere")


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    return make_house(tmp_path_factory.mktemp("pristine"), python_version="0.0")


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(drawn=sums_files(), shell=st.sampled_from(SHELLS))
@example(drawn=([("good", n) for n in LISTED], []), shell=SHELLS[0])  # the wheelhouse as made
@example(drawn=([("good", n) for n in LISTED] + [("good", "fifo")], ["fifo"]), shell=SHELLS[-1])
@example(
    drawn=([("good", n) for n in LISTED], ["fifo"]), shell=SHELLS[0]
)  # an unlisted FIFO beside
def test_generated_sha256sums_are_accepted_exactly_as_the_model_says(
    pristine, tmp_path_factory, drawn, shell
):
    lines, planted = drawn
    house = tmp_path_factory.mktemp("house") / "wheelhouse"
    shutil.copytree(pristine, house, symlinks=True)
    plant(house, planted)
    (house / "SHA256SUMS").write_bytes(render(house, lines))
    before = snapshot(house.parent)
    done = install(shell, house, str(house.parent / "venv"), timeout=LIMIT)
    assert (
        done.returncode == 1
        and done.stderr.count("\n") == 1
        and done.stderr.startswith("install.sh: ")
    ), done.stderr
    reached_python = "but this wheelhouse is for Python 0.0" in done.stderr
    assert reached_python == accepted(house, lines), done.stderr
    assert snapshot(house.parent) == before


CONTENTS = [
    "nothing",
    "empty-dir",
    "dir-with-files",
    "venv",
    "file",
    "fifo",
    "link-to-dir",
    "dangling-link",
]
VENV_TEXT = st.text(
    st.sampled_from(list("ab-. *$()~;\n\t'\"\\") + ["é"]), max_size=10
)  # "/": the prefixes


def place(path: Path, what: str, outside: Path, root: Path) -> None:
    if not os.path.normpath(path).startswith(f"{root}/"):
        return  # "sub/../.." names the test's own tree, or above it: nothing is made there
    path.parent.mkdir(parents=True, exist_ok=True)  # first: "sub/.." exists only once "sub" does
    if what == "nothing" or os.path.lexists(path):
        return
    if what == "empty-dir":
        path.mkdir()
    elif what == "dir-with-files":
        path.mkdir()
        (path / "notes.txt").write_text("keep\n")
    elif what == "venv":
        (path / "bin").mkdir(parents=True)
        (path / "pyvenv.cfg").write_text("home = /usr/bin\n")
        (path / "bin" / "python").symlink_to(sys.executable)
    elif what == "file":
        path.write_text("mine\n")
    elif what == "fifo":
        os.mkfifo(path)
    elif what == "link-to-dir":
        path.symlink_to(outside)
    else:
        path.symlink_to(outside / "gone")


def venv_accepted(target: str, home: Path, house: Path) -> bool:
    """The model of what VENV install.sh writes a venv into: no control character, not inside the
    wheelhouse, not a link; a new path, an empty directory or a venv."""
    if any(ord(c) < 32 or ord(c) == 127 for c in target):
        return False
    path = target or str(home / ".local/share/secure-site-kit/venv")
    while path != "/" and path.endswith("/"):
        path = path[:-1]
    if (path + "/").startswith(str(house) + "/"):
        return False
    if os.path.islink(path):
        return False
    if os.path.isdir(path):
        return (
            os.path.isfile(os.path.join(path, "pyvenv.cfg"))
            and os.access(os.path.join(path, "bin/python"), os.X_OK)
        ) or not os.listdir(path)
    return not os.path.lexists(path)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    text=VENV_TEXT,
    prefix=st.sampled_from(["", "./", "sub/", "wheelhouse/", "ABS/"]),
    suffix=st.sampled_from(["", "/", "//"]),
    content=st.sampled_from(CONTENTS),
    shell=st.sampled_from(SHELLS),
)
@example(text="mine", prefix="", suffix="", content="dir-with-files", shell=SHELLS[0])
@example(text="a\nb", prefix="", suffix="", content="nothing", shell=SHELLS[-1])
@example(text="-rf", prefix="", suffix="/", content="link-to-dir", shell=SHELLS[0])
@example(text="x", prefix="", suffix="", content="fifo", shell=SHELLS[-1])
@example(text="", prefix="", suffix="", content="nothing", shell=SHELLS[0])
@example(
    text="..", prefix="sub/", suffix="", content="fifo", shell=SHELLS[0]
)  # found by the long profile
@example(text="-x", prefix="ABS/", suffix="//", content="venv", shell=SHELLS[-1])
def test_hostile_venv_paths_are_used_or_refused_as_the_model_says(
    pristine, tmp_path_factory, text, prefix, suffix, content, shell
):
    root = tmp_path_factory.mktemp("venvs")
    house, work, outside = root / "wheelhouse", root / "work", root / "outside"
    shutil.copytree(pristine, house, symlinks=True)
    work.mkdir()
    outside.mkdir()
    (outside / "theirs.txt").write_text("theirs\n")
    prefix = f"{work}/" if prefix == "ABS/" else prefix  # an absolute path into the test's tree
    rel = prefix + text + suffix
    cwd = (
        root if prefix == "wheelhouse/" else work
    )  # a path into the wheelhouse, named from beside it
    if text and prefix != "wheelhouse/":
        place(cwd / (prefix + text), content, outside, root)
    before = snapshot(root)
    target = os.path.join(cwd, rel) if rel and not rel.startswith("/") else rel
    done = install(shell, house, rel, cwd=cwd, home=root / "home")
    assert (
        done.returncode == 1
        and done.stderr.count("\n") == 1
        and done.stderr.startswith("install.sh: ")
    ), done.stderr
    reached_python = "but this wheelhouse is for Python 0.0" in done.stderr
    assert reached_python == venv_accepted(target, root / "home", house), (target, done.stderr)
    assert snapshot(root) == before
