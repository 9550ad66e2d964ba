"""kit.runtime.udocker's own parts: the image's environment as Charliecloud keeps it, the values
each rank is given (udocker expands nothing), and the proot wrapper that drops udocker's -k (run
by a real shell)."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kit.errors import KitError
from kit.mpi.launch import Launch
from kit.runtime import REGISTRY, runtime_of
from kit.runtime.imageenv import image_environment
from kit.runtime.udocker import expand, rank_environment, wrapper_path, wrapper_text, write_wrapper
from kit.site import load_site
from kit.site.model import RUNTIMES

LAPTOP = load_site("laptop")


def _image(tmp_path: Path, environment: str | None) -> Path:
    root = tmp_path / "img"
    (root / "ch").mkdir(parents=True)
    if environment is not None:
        (root / "ch" / "environment").write_text(environment)
    return root


def test_every_runtime_the_schema_names_is_registered_and_the_laptop_runs_charliecloud():
    assert tuple(REGISTRY) == RUNTIMES == ("charliecloud", "udocker", "apptainer", "singularity")
    assert runtime_of(LAPTOP).name == "charliecloud"


def test_the_image_environment_is_read_as_charliecloud_writes_it(tmp_path):
    root = _image(
        tmp_path, 'PATH=/opt/py/bin:/usr/bin\n\nPYTHONPATH="/opt/app"\nEMPTY=\nQUOTE=\'a b\'\n'
    )
    assert image_environment(root) == {
        "PATH": "/opt/py/bin:/usr/bin",
        "PYTHONPATH": "/opt/app",
        "EMPTY": "",
        "QUOTE": "a b",
    }
    assert image_environment(_image(tmp_path / "none", None)) == {}


def test_a_line_that_is_not_key_value_names_the_file_and_line(tmp_path):
    root = _image(tmp_path, "PATH=/usr/bin\nexport X=1\n")
    with pytest.raises(
        KitError, match=r"img/ch/environment:2: 'export X=1' is not KEY=VALUE; fix: re-convert"
    ):
        image_environment(root)


def test_an_environment_link_is_followed_inside_the_image_only(tmp_path):
    """/ch/environment -> /etc/environment names the image's file, never this machine's."""
    root = _image(tmp_path, None)
    (root / "ch" / "environment").symlink_to("/etc/ownenv")
    assert image_environment(root) == {}  # the image has no /etc/ownenv
    (root / "etc").mkdir()
    (root / "etc" / "ownenv").write_text("FROM=image\n")
    assert image_environment(root) == {"FROM": "image"}


def test_each_rank_gets_the_image_environment_then_the_pairs_values_expanded(tmp_path):
    root = _image(tmp_path, "PATH=/usr/bin\nLD_LIBRARY_PATH=/opt/app/lib\nHOMEDIR=/opt/app\n")
    launch = Launch(
        LAPTOP,
        [("/usr/lib/x86_64-linux-gnu", "/opt/hostmpi/lib0")],
        {
            "UCX_MODULE_DIR": "/opt/hostmpi/lib0/ucx",
            "DATA": "${HOMEDIR}/data:$PATH",
            "GONE": "$UNSET",
        },
        {"LD_LIBRARY_PATH": ["/opt/hostmpi/compat"], "MANPATH": ["/opt/hostmpi/man"]},
    )
    env = rank_environment(launch, str(root))
    assert list(env)[:3] == [
        "PATH",
        "LD_LIBRARY_PATH",
        "HOMEDIR",
    ]  # the image's first, in its order
    assert (
        env["LD_LIBRARY_PATH"] == "/opt/hostmpi/compat:/opt/app/lib"
    )  # the image's value after the pair's
    assert env["MANPATH"] == "/opt/hostmpi/man"  # no empty entry (the loader's working directory)
    assert env["DATA"] == "/opt/app/data:/usr/bin" and env["GONE"] == ""
    assert not any("$" in v for v in env.values())


def test_an_image_without_an_environment_passes_the_pairs_alone(tmp_path):
    launch = Launch(
        LAPTOP, [], {"A": "1"}, {"LD_LIBRARY_PATH": ["/opt/hostmpi/compat"]}, image_env=False
    )
    assert rank_environment(launch, str(tmp_path / "absent")) == {
        "A": "1",
        "LD_LIBRARY_PATH": "/opt/hostmpi/compat",
    }


NAMES = st.from_regex(r"[A-Z_][A-Z0-9_]{0,8}", fullmatch=True)
TOKENS = st.lists(
    st.one_of(
        st.text("/:-. ", min_size=1, max_size=4).map(lambda t: ("text", t)),
        st.tuples(st.sampled_from(["bare", "braced"]), NAMES),
    ),
    max_size=8,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(NAMES, st.text("/abc:-_ $", max_size=8), max_size=5), TOKENS)
def test_expansion_gives_each_variable_its_value_once_and_leaves_the_text(env, tokens):
    """$NAME and ${NAME} become env's value (unset: empty); a value holding '$' is not expanded
    again.
    """
    value = "".join(
        t if kind == "text" else (f"${t}" if kind == "bare" else f"${{{t}}}") for kind, t in tokens
    )
    wanted = "".join(t if kind == "text" else env.get(t, "") for kind, t in tokens)
    assert expand(value, env) == wanted


def _run_wrapper(tmp_path: Path, *argv: str) -> list[str]:
    script = tmp_path / "w"
    script.write_text(wrapper_text("/bin/echo"))
    done = subprocess.run(["sh", str(script), *argv], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_the_wrapper_drops_udockers_kernel_flag_and_nothing_after_the_root(tmp_path):
    words = _run_wrapper(
        tmp_path,
        "--kill-on-exit",
        "-b",
        "/a:/b",
        "-k",
        "6.1.0-28-amd64",
        "-r",
        "/img",
        "-w",
        "/",
        "python3",
        "-k",
        "x",
    )
    assert words == ["--kill-on-exit", "-b", "/a:/b", "-r", "/img", "-w", "/", "python3", "-k", "x"]
    assert _run_wrapper(tmp_path, "-r", "/img", "sh", "-c", "a b") == [
        "-r",
        "/img",
        "sh",
        "-c",
        "a",
        "b",
    ]


def test_the_wrapper_is_written_once_in_the_kits_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("KIT_CACHE", raising=False)  # it would move the cache past XDG
    path = write_wrapper("/usr/bin/proot")
    assert (
        path == wrapper_path("/usr/bin/proot")
        and path.parent == tmp_path / "cache/secure-site-kit/udocker"
    )
    assert path.stat().st_mode & 0o777 == 0o755 and "exec /usr/bin/proot \"$@\"" in path.read_text()
    assert [p.stat().st_mode & 0o777 for p in (path.parent, path.parent.parent)] == [0o700] * 2
    inode = path.stat().st_ino
    assert write_wrapper("/usr/bin/proot") == path and path.stat().st_ino == inode
    assert [p.name for p in path.parent.iterdir()] == [path.name]
    assert wrapper_path("/opt/other/proot") != path  # one wrapper per proot


def _plant(path: Path, kind: str, text: str, tmp_path: Path) -> None:
    """Put at the wrapper's path what an attacker (or an accident) would: most with the very bytes
    the kit writes, so only where and whose they are tells them from the kit's."""
    if kind == "symlink":
        (tmp_path / "elsewhere").write_text(text)
        (tmp_path / "elsewhere").chmod(0o755)
        path.symlink_to(tmp_path / "elsewhere")
    elif kind == "zero":
        path.symlink_to("/dev/zero")
    elif kind == "device":
        os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 5))  # /dev/zero's numbers
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    else:
        path.write_text(text if kind != "other bytes" else "#!/bin/sh\nexec /tmp/evil \"$@\"\n")
        path.chmod({"world-writable": 0o777, "not executable": 0o644}.get(kind, 0o755))
        if kind == "another owner":
            os.chown(path, 65534, 65534)


@pytest.mark.timeout(20)  # a FIFO opened without O_NONBLOCK would hang here, /dev/zero fill memory
@pytest.mark.parametrize(
    "kind, said",
    [
        ("symlink", "is a symlink"),
        ("zero", "is a symlink"),
        ("device", "is a character device"),
        ("fifo", "is a FIFO"),
        ("directory", "is a directory"),
        ("another owner", "belongs to uid 65534"),
        ("world-writable", "is writable by others (mode 0777)"),
        ("not executable", "is not executable"),
        ("other bytes", "not the proot wrapper the kit writes"),
    ],
)
def test_anything_but_the_kits_own_wrapper_at_its_path_is_refused_and_left(
    tmp_path, monkeypatch, kind, said
):
    """Every rank executes the wrapper: the right bytes are not enough, the file must be a regular
    file of the user's that nobody else can write."""
    if kind in ("device", "another owner") and os.geteuid() != 0:
        pytest.skip("mknod and chown need root")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("KIT_CACHE", raising=False)  # it would move the cache past XDG
    path = wrapper_path("/usr/bin/proot")
    path.parent.mkdir(parents=True, mode=0o700)
    _plant(path, kind, wrapper_text("/usr/bin/proot"), tmp_path)
    before = os.lstat(path)
    with pytest.raises(KitError) as err:
        write_wrapper("/usr/bin/proot")
    assert err.value.where == str(path) and said in err.value.what and "fix: " in str(err.value)
    assert "\n" not in str(err.value)
    after = os.lstat(path)  # left as it was: the kit replaces nothing it did not make
    assert (after.st_ino, after.st_mode, after.st_uid) == (
        before.st_ino,
        before.st_mode,
        before.st_uid,
    )


@pytest.mark.parametrize(
    "where, mode, said",
    [
        ("cache/secure-site-kit/udocker", 0o770, "is writable by others (mode 0770)"),
        ("cache/secure-site-kit", 0o757, "is writable by others (mode 0757)"),
        ("cache", 0o777, "is writable by others (mode 0777) and not sticky"),
    ],
)
def test_the_wrappers_directories_are_the_users_alone(tmp_path, monkeypatch, where, mode, said):
    """Someone who can rename entries of a directory above the wrapper can put their own there."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("KIT_CACHE", raising=False)  # it would move the cache past XDG
    (tmp_path / "cache/secure-site-kit/udocker").mkdir(parents=True)
    (tmp_path / where).chmod(mode)
    with pytest.raises(KitError, match=r"; fix: chmod go-w ") as err:
        write_wrapper("/usr/bin/proot")
    assert err.value.where == str(tmp_path / where) and said in err.value.what
    assert not any((tmp_path / "cache/secure-site-kit/udocker").iterdir())
    (tmp_path / where).chmod(0o1777 if where == "cache" else 0o700)  # sticky, as /tmp: no one
    assert write_wrapper("/usr/bin/proot").is_file()  # else renames what is not theirs


def test_rank_view_names_host_paths_as_the_rank_sees_them(tmp_path):
    """proot leaves host paths in /proc/self/maps; the check judges the rank's own view."""
    root = _image(tmp_path, None)
    launch = Launch(LAPTOP, [("/usr/lib/x86_64-linux-gnu", "/opt/hostmpi/lib0")], {}, {})
    view = REGISTRY["udocker"].rank_view(launch, str(root))
    assert view("/usr/lib/x86_64-linux-gnu/libmpich.so.12") == "/opt/hostmpi/lib0/libmpich.so.12"
    assert (
        view(f"{os.path.realpath(root)}/usr/lib/x86_64-linux-gnu/libc.so.6")
        == "/usr/lib/x86_64-linux-gnu/libc.so.6"
    )
    assert view("/usr/lib/other/libz.so") == "/usr/lib/other/libz.so"
    assert REGISTRY["charliecloud"].rank_view(launch, str(root))("/x/libc.so.6") == "/x/libc.so.6"


def test_rank_view_reads_the_image_through_a_bind_that_holds_it(tmp_path):
    """A site that binds a directory holding the image directory (a work tree with images/ in it):
    a library in the image is the image's, not one the bind brings in from the host."""
    root = _image(tmp_path, None)
    holder = os.path.realpath(tmp_path)
    launch = Launch(LAPTOP, [(holder, holder)], {}, {})
    view = REGISTRY["udocker"].rank_view(launch, str(root))
    real = os.path.realpath(root)
    assert (
        view(f"{real}/usr/lib/x86_64-linux-gnu/libc.so.6") == "/usr/lib/x86_64-linux-gnu/libc.so.6"
    )
    assert view(real) == "/"
    assert view(f"{holder}/data/x.h5") == f"{holder}/data/x.h5"  # beside the image: the bind's


def test_a_run_records_udocker_as_its_container():
    """udocker run exports container_execmode and container_root to the contained process: the
    results name the runtime, so a report keeps udocker, ch-run and bare runs apart."""
    from gan3d.results import container_runtime

    assert (
        container_runtime({"container_execmode": "P1", "container_root": "/images/gan3d"})
        == "udocker"
    )
    assert container_runtime({"CH_RUNNING": "Weird Al Yankovic"}) == "charliecloud"
    assert container_runtime({"container_execmode": "P1"}) is None and container_runtime({}) is None


def test_each_runtime_names_how_an_image_is_installed_for_it():
    """kit transfer push --install asks the site's runtime: ch-convert's form for Charliecloud, the
    installer's own unpack for udocker, which runs no SquashFS image (refused before any upload)."""
    ch, ud = REGISTRY["charliecloud"], REGISTRY["udocker"]
    assert ch.install_format(LAPTOP, "dir", "g.tar.gz") == "dir"
    assert ch.install_format(LAPTOP, "squash", "g.tar.gz") == "squash"
    assert ud.install_format(LAPTOP, "dir", "g.tar.gz") == "unpack"
    for install_as, source in (("squash", "g.tar.gz"), ("dir", "g.sqfs"), ("dir", "g.squashfs")):
        with pytest.raises(KitError, match="udocker runs a directory image") as err:
            ud.install_format(LAPTOP, install_as, source)
        assert err.value.fix and "OUT.tar.gz" in err.value.fix
