"""The remote installer's unpack (`kit transfer push --install` to a udocker site) against `kit
image convert`: generated hostile archives go to both; both refuse or both accept, and what both
accept unpacks to the same tree (names, types, modes after the umask, link targets, bytes). The
unpack runs in this Python and, through tests/transfer/unpack_driver.py, in the oldest Python 3 on
the machine, as a site's stock python3 runs it. Then each defect the attack review found: a damaged
stream installed in part, modes without the umask, memory per member, quadratic pax records, a
second stop signal cutting the clean-up short, a stop that hangs in Popen.wait."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import signal
import subprocess
import tarfile
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from kit.archive_rules import MAX_PATH
from kit.errors import KitError
from kit.image import convert
from kit.transfer import assemble, remote, remote_install, remote_unpack
from tests.image import fuzz_strategies as fuzz
from tests.image import rawtar
from tests.support.installer import call, install_argv, sha12
from tests.support.transfer import kit_leftovers
from tests.support.unpacked import assert_same_tree
from tests.transfer.oldest import oldest_python3
from tests.transfer.unpack_driver import describe, unpack_one

DRIVER = Path(__file__).with_name("unpack_driver.py")
BOUND = 120  # s: an unpack that blocks is stopped here (the test fails); nothing else is timed
TYPES = {
    "f": tarfile.REGTYPE,
    "d": tarfile.DIRTYPE,
    "l": tarfile.SYMTYPE,
    "h": tarfile.LNKTYPE,
    "o": tarfile.FIFOTYPE,
    "c": tarfile.CHRTYPE,
}


@pytest.fixture(scope="module")
def old_unpack(tmp_path_factory):
    """unpack(archive, out, umask) -> the driver's answer, in the oldest Python 3 (None: none),
    from the script's text as the kit sends it (its shared rules inlined)."""
    python = oldest_python3()
    if python is None:
        yield None
        return
    sent = tmp_path_factory.mktemp("sent") / "remote_script.py"
    sent.write_bytes(assemble.script())
    proc = subprocess.Popen(
        [python, str(DRIVER), str(sent)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )

    def run(archive: Path, out: Path, umask: int) -> dict:
        proc.stdin.write(f"{archive}\t{out}\t{umask:o}\n")
        proc.stdin.flush()
        return json.loads(proc.stdout.readline())

    yield run
    proc.stdin.close()
    proc.wait(timeout=BOUND)


# -- the generated archives -------------------------------------------------------------------

MODES = st.sampled_from([0o644, 0o755, 0o777, 0o1777, 0o4755, 0o2775, 0o555, 0o000, 0o666, 0o1644])
# Forged members put first: extended headers as tarfile never writes them.
FORGED = st.sampled_from(
    [
        rawtar.pax_member("p", rawtar.pax_record("path", b"a/../../x"), b"x"),
        rawtar.pax_member("p", rawtar.pax_record("size", b"-1"), b"x"),
        rawtar.pax_member("p", rawtar.pax_record("size", b"zz"), b"x"),
        rawtar.pax_member("p", rawtar.pax_record("mtime", b"nan"), b"x"),
        rawtar.pax_member("p", rawtar.pax_record("mtime", b"1e3"), b"x"),
        rawtar.pax_member("p", rawtar.pax_record("GNU.sparse.size", b"1"), b"x"),
        rawtar.pax_member("p", rawtar.pax_record("path", b"q\0r"), b"x"),
        rawtar.pax_member("p", rawtar.pax_record("path", b"pax-name"), b"x"),
        rawtar.pax_member("p", rawtar.pax_record("linkpath", b"/etc"), kind="l", linkname="x"),
        rawtar.pax_member("p", b"1" * 600, b"x"),
        rawtar.pax_member("p", rawtar.pax_record("path", b"x") + b"\0" * 7, b"x"),
        rawtar.with_size_field(rawtar.member("neg", b"x"), rawtar.base256(-512)),
        rawtar.member("dev/null", kind="f", data=b"n"),
    ]
)


@st.composite
def archives(draw) -> tuple[bytes, str]:
    """(bytes, file name): tests.image.test_fuzz_archives' members (unsafe names, links out,
    hard links to what is not there, names twice) with drawn modes, FIFOs and devices, a forged
    member now and then, gzip or not, and now and then a few bytes changed."""
    earlier: list[str] = []
    members, unique = [], draw(st.booleans())  # names twice are refused: half the time none
    for name, kind, payload in draw(st.lists(fuzz.member(earlier), max_size=8)):
        if unique and any(n.strip("/.") == name.strip("/.") for n, *_ in members):
            continue
        if draw(st.integers(0, 9)) == 0:
            kind, payload = draw(st.sampled_from("oc")), None
        members.append((name, kind, payload, draw(MODES)))
    if draw(st.booleans()):
        members.insert(0, (draw(st.sampled_from(["./", "", "."])), "d", None, draw(MODES)))
    buf = io.BytesIO()
    fmt = draw(st.sampled_from([tarfile.GNU_FORMAT, tarfile.PAX_FORMAT]))
    with tarfile.open(
        fileobj=buf, mode="w", format=fmt, encoding="utf-8", errors="surrogateescape"
    ) as tf:
        for name, kind, payload, mode in members:
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.mtime = TYPES[kind], mode, 1_700_000_000
            if kind in ("l", "h"):
                info.linkname = payload
            if kind == "f":
                info.size = len(payload)
            tf.addfile(info, io.BytesIO(payload) if kind == "f" else None)
    data = buf.getvalue()
    if draw(st.integers(0, 3)) == 0:
        data = draw(FORGED) + data
    if draw(st.integers(0, 3)) == 0:
        data = fuzz.mutate(data, draw(st.lists(fuzz.mutation, min_size=1, max_size=2)))
    if draw(st.booleans()):
        return data, "img.tar"
    data = gzip.compress(data, 1, mtime=0)
    if draw(st.integers(0, 7)) == 0:
        data = fuzz.mutate(data, draw(st.lists(fuzz.mutation, min_size=1, max_size=2)))
    return data, "img.tar.gz"


# -- the comparison ---------------------------------------------------------------------------


def both(data: bytes, name: str, umask: int, old_unpack) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / name
        src.write_bytes(data)
        old = os.umask(umask)
        try:
            converted = convert(src, Path(tmp) / "converted", fmt="dir")
        except KitError as exc:
            converted = exc
        finally:
            os.umask(old)
        mine = unpack_one(remote_unpack.__dict__, str(src), str(Path(tmp) / "mine"), umask)
        answers = [mine]
        if old_unpack:
            answers.append(old_unpack(src, Path(tmp) / "old", umask))
            assert answers[1] == mine, "the oldest Python 3 unpacks differently"
        assert "bug" not in mine, mine["bug"]
        fuzz.event("both refuse" if isinstance(converted, KitError) else "both accept")
        if old_unpack is None:
            fuzz.event("no oldest Python 3 here")
        if isinstance(converted, KitError):
            assert "refused" in mine, f"unpacked what convert refuses: {converted}"
            assert "\n" not in mine["refused"]
            return
        assert "tree" in mine, f"refused what convert takes: {mine['refused']}"
        made = {p.lstrip("/") for p in converted.mount_points}
        assert_same_tree(mine["tree"], describe(str(Path(tmp) / "converted")), made, umask)


@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(archive=archives(), umask=st.sampled_from([0o022, 0o002, 0o000, 0o077]))
@example(
    archive=(rawtar.archive(rawtar.member("a", b"A"), rawtar.member("a", b"B")), "x.tar"),
    umask=0o022,
)
def test_the_unpack_refuses_what_convert_refuses_and_unpacks_the_same_tree(
    archive, umask, old_unpack
):
    both(*archive, umask, old_unpack)


def extended(kind: bytes, fields: dict[str, str]) -> bytes:
    """An extended header, as tarfile writes one: pax (x, g) records or a GNU long name (L)."""
    if kind == tarfile.GNUTYPE_LONGNAME:
        return tarfile.TarInfo._create_gnu_long_header(fields["path"], kind, "utf-8", "strict")
    return tarfile.TarInfo._create_pax_generic_header(fields, kind, "utf-8")


def old_style_dir(name: str) -> bytes:
    """A regular file's header of old (type NUL) whose name ends in '/': tar reads a directory."""
    info = tarfile.TarInfo(name)
    info.type = tarfile.AREGTYPE
    return info.tobuf(tarfile.USTAR_FORMAT)


LONG = "l" * 120
NESTED = {  # how tarfile nests extended headers: the outermost wins, a global one stays
    "pax outside a long name": extended(b"x", {"path": "pax"})
    + tarfile.TarInfo(LONG).tobuf(tarfile.GNU_FORMAT),
    "a long name outside pax": extended(tarfile.GNUTYPE_LONGNAME, {"path": LONG})
    + rawtar.pax_member("inner", rawtar.pax_record("path", b"pax")),
    "a global name for two members": extended(b"g", {"path": "g"})
    + rawtar.member("a")
    + rawtar.member("b"),
    "a global mtime, then a local one": extended(b"g", {"mtime": "-5"})
    + extended(b"x", {"mtime": "7"})
    + rawtar.member("a"),
    "a global size past the data": extended(b"g", {"size": "600"}) + rawtar.member("a", b"x"),
    "a global size short of it": extended(b"g", {"size": "1"}) + rawtar.member("a", b"xyz"),
    "an old-style directory": old_style_dir("d/") + rawtar.member("d/f", b"f"),
    "a ustar prefix": tarfile.TarInfo("p" * 90 + "/" + "n" * 90).tobuf(tarfile.USTAR_FORMAT),
}


@pytest.mark.parametrize("case", sorted(NESTED))
def test_extended_headers_apply_as_tarfile_nests_them(case, old_unpack):
    both(rawtar.archive(NESTED[case]), "x.tar", 0o022, old_unpack)


# -- each defect found, and the cases that show it ---------------------------------------------


def tar_of(members: list[tuple], fmt: int = tarfile.GNU_FORMAT) -> bytes:
    """members: (name, kind, data, mode), kind as in TYPES."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tf:
        for name, kind, data, mode in members:
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.mtime = TYPES[kind], mode, 1_700_000_000
            info.size = len(data) if kind == "f" else 0
            tf.addfile(info, io.BytesIO(data) if kind == "f" else None)
    return buf.getvalue()


IMAGE = [
    ("etc", "d", b"", 0o755),
    ("etc/kit-version", "f", b"one", 0o644),
    ("bin", "d", b"", 0o755),
    ("bin/tool", "f", b"T" * 3000, 0o755),
    ("lib", "d", b"", 0o755),
    ("lib/libx.so", "f", b"L" * 2000, 0o644),
]
FOURTH = 512 * 4  # the fourth member's header: three headers and one data block before it


def flipped(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0x20]) + data[at + 1 :]


DAMAGES = {  # (file name, the image's bytes -> the damaged upload)
    "a header damaged part-way": ("bb.tar.gz", lambda t: gzip.compress(flipped(t, FOURTH + 2))),
    "a truncated stream": ("bb.tar.gz", lambda t: gzip.compress(t)[: len(gzip.compress(t)) // 2]),
    "a bad gzip CRC": ("bb.tar.gz", lambda t: flipped(gzip.compress(t), -8)),
    "a bad gzip length": ("bb.tar.gz", lambda t: flipped(gzip.compress(t), -1)),
    "a gzip trailer cut off": ("bb.tar.gz", lambda t: gzip.compress(t)[:-6]),
    "junk after the gzip stream": ("bb.tar.gz", lambda t: gzip.compress(t) + b"junk"),
    "a plain tar cut inside a member": ("bb.tar", lambda t: t[: FOURTH + 1000]),
    "data after the archive's end": ("bb.tar", lambda t: t + rawtar.member("late", b"x")),
}


@pytest.mark.timeout(BOUND)
@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_damaged_upload_installs_nothing_and_current_stays(tmp_path, damage, old_unpack):
    """GNU tar and kit image convert refuse these files; so does the installer, whole: no part
    of the image is installed, NAME.current is not switched, one line says why."""
    images, tar = tmp_path / "images", tar_of(IMAGE)
    good = tmp_path / "v1" / "bb.tar.gz"
    good.parent.mkdir()
    good.write_bytes(gzip.compress(tar))
    assert call(["install", str(good), str(images), "bb", sha12(good), "2", "0", "unpack"])[0] == 0
    name, damaged = DAMAGES[damage]
    src = tmp_path / "v2" / name
    src.parent.mkdir()
    src.write_bytes(damaged(tar))
    code, err = call(["install", str(src), str(images), "bb", sha12(src), "2", "0", "unpack"])
    assert code == 6 and err.startswith("KIT-ERROR 6 the unpack of ") and err.count("\n") == 1, err
    assert os.readlink(images / "bb.current") == f"bb@{sha12(good)}"
    assert sorted(p.name for p in images.iterdir()) == ["bb.current", f"bb@{sha12(good)}"]
    with pytest.raises(KitError):
        convert(src, tmp_path / "converted", fmt="dir")
    if old_unpack:
        assert "refused" in old_unpack(src, tmp_path / "old", 0o022)


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o000])
def test_modes_take_the_umask_and_only_a_sticky_directory_stays_world_writable(tmp_path, umask):
    """tar's modes for a user (umask applied; setuid, setgid dropped): a root or directory of
    0777 would otherwise land world-writable without its sticky bit on a shared file system."""
    src = tmp_path / "bb.tar"
    src.write_bytes(
        tar_of(
            [
                ("./", "d", b"", 0o777),
                ("tmp", "d", b"", 0o1777),
                ("open", "d", b"", 0o777),
                ("open/file", "f", b"x", 0o666),
                ("open/su", "f", b"x", 0o4777),
                ("closed", "d", b"", 0o000),
            ]
        )
    )
    tree = unpack_one(remote_unpack.__dict__, str(src), str(tmp_path / "out"), umask)["tree"]
    modes = {name: oct(entry[1]) for name, entry in tree.items()}
    tmp, opened, file = {0o022: (0o1755, 0o755, 0o644), 0o002: (0o1775, 0o775, 0o664)}.get(
        umask, (0o1777, 0o775, 0o664)
    )
    assert modes == {
        "": oct(0o755 & ~umask),
        "tmp": oct(tmp),
        "open": oct(opened),
        "open/file": oct(file),
        "open/su": oct(opened),
        "closed": oct(0o700),
    }


@pytest.mark.timeout(60)
def test_pax_records_are_read_in_linear_time(tmp_path):
    """1 MiB of digits in a pax header: Python's own pax parser (3.6 to 3.11.9, CVE-2024-6232)
    takes hours on it; the unpack refuses it at once."""
    src = tmp_path / "bb.tar"
    src.write_bytes(rawtar.archive(rawtar.pax_member("x", b"1" * (1 << 20), b"x")))
    answer = unpack_one(remote_unpack.__dict__, str(src), str(tmp_path / "out"), 0o022)
    assert "malformed record" in answer.get("refused", ""), answer


def fifos(count: int) -> bytes:
    """4 MiB of a member of an unknown type (skipped: the reader's buffers are at their largest),
    then COUNT FIFO members (dropped: no file is made), gzipped."""
    pad = tarfile.TarInfo("pad")
    pad.type, pad.size = b"V", 4 << 20
    info = tarfile.TarInfo("fifo")
    info.type = tarfile.FIFOTYPE
    head = pad.tobuf(tarfile.GNU_FORMAT) + bytes(pad.size)
    return gzip.compress(head + info.tobuf(tarfile.GNU_FORMAT) * count + bytes(1024), 1)


def test_memory_does_not_grow_with_the_member_count(tmp_path):
    """tarfile keeps every header it reads (a few hundred bytes a member, GBs for two million);
    the unpack keeps none: its peak is the same for 1000 members and for 6000."""
    peaks, answers = [], []
    for count in (1000, 6000):
        src = tmp_path / f"{count}.tar.gz"
        src.write_bytes(fifos(count))
        tracemalloc.start()
        try:
            answer = unpack_one(remote_unpack.__dict__, str(src), str(tmp_path / str(count)), 0o22)
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
        answers.append(answer)
    assert peaks[1] < peaks[0] + (1 << 20), peaks
    assert answers == [{"tree": {"": ["d", 0o755, "", ""]}}] * 2, answers


def many_files(path: Path, count: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz", compresslevel=1) as tf:
        for n in range(count):
            info = tarfile.TarInfo(f"d/{n:05d}")
            info.size = 1
            tf.addfile(info, io.BytesIO(b"x"))
    return path


def entries(path: Path) -> int:
    try:
        return len(os.listdir(path))
    except FileNotFoundError:
        return 0


@pytest.mark.timeout(BOUND)
def test_a_second_stop_signal_does_not_cut_the_clean_up_short(tmp_path):
    """An SSH session that ends brings SIGHUP and, as stdin closes, SIGTERM: the second one,
    arriving while the first one's clean-up removes the work dir, used to cut it short and leave
    the half-unpacked image behind."""
    src = many_files(tmp_path / "up" / "bb.tar.gz", 6000)
    images = tmp_path / "images"
    proc = subprocess.Popen(
        install_argv(src, images, fmt="unpack"), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    unpacked = images / f".bb@{sha12(src)}.{proc.pid}.tmp" / "image" / "d"
    while entries(unpacked) < 2000 and proc.poll() is None:
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    most, hung_up = 0, False
    while proc.poll() is None and not hung_up:  # the clean-up has begun once the dir shrinks
        most = max(most, entries(unpacked))
        if entries(unpacked) < most - 100:
            proc.send_signal(signal.SIGHUP)
            hung_up = True
    _, err = proc.communicate(timeout=BOUND)
    assert hung_up, "the clean-up ended before the second signal could be sent"
    assert proc.returncode == 10 and err.decode().count("\n") == 1, err
    assert "stopped by a signal" in err.decode()
    assert kit_leftovers(images) == [] and not (images / "bb.current").exists()


def test_stopping_ch_convert_never_waits_on_a_lock_an_interrupted_wait_left_held():
    """A stop signal raised inside Popen.wait(timeout) can leave Popen's lock held; a later
    Popen.wait() then blocks for ever (an installer stopped by SIGHUP hung so once)."""
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    proc._waitpid_lock.acquire()  # as the interrupted wait left it
    try:
        stopper = threading.Thread(target=remote_install.stop_group, args=(proc,), daemon=True)
        stopper.start()
        stopper.join(20)
        assert not stopper.is_alive(), "stop_group hangs"
        assert proc.returncode == -signal.SIGKILL
    finally:
        proc._waitpid_lock.release()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


def test_a_name_of_4095_bytes_is_taken_and_one_of_4096_refused_by_both(tmp_path):
    """Linux's PATH_MAX (4096) counts the final NUL: 4095 bytes is the longest path (and link
    target) the kernel takes, which kit.image.layers and the installer both allow."""
    assert MAX_PATH == 4095  # one rule for both (kit.archive_rules)
    for size, taken in ((4095, True), (4096, False)):
        name = "/".join(["n" * 255] * 15 + ["m" * 200, "k" * (size - 15 * 256 - 201)])
        assert len(name) == size
        src = tmp_path / f"{size}.tar"
        src.write_bytes(tar_of([(name, "f", b"x", 0o644)]))
        try:
            convert(src, tmp_path / f"{size}-converted", fmt="dir")
            converted = True
        except KitError:
            converted = False
        fd = os.open(src, os.O_RDONLY)
        try:
            remote_unpack.unpack(fd, str(tmp_path / f"{size}-mine"), 1 << 30)
            mine = True
        except RuntimeError:
            mine = False
        finally:
            os.close(fd)
        assert (converted, mine) == (taken, taken), size


def test_the_script_sent_runs_under_the_oldest_python3(tmp_path):
    """The remote side runs on a site's stock python3, 3.6 and up: the text the kit sends (its
    shared rules inlined) runs there, as `python3 -c`, and answers."""
    python = oldest_python3()
    if python is None:
        pytest.skip("no Python 3.6 or 3.7 here (python3.6 on PATH or under ~/.pyenv)")
    done = subprocess.run(
        [python, "-c", remote.boot(), "versions", str(tmp_path), "img"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"dir": str(tmp_path), "current": None, "versions": []}


def test_a_work_dir_this_install_did_not_make_is_left_where_it_is(tmp_path):
    """The work dir is removed on failure only if this install's mkdir made it: a directory
    already at that name (its mkdir fails) keeps its files."""
    src = many_files(tmp_path / "up" / "bb.tar.gz", 3)
    images = tmp_path / "images"
    entry = f"bb@{sha12(src)}"
    there = images / f".{entry}.{os.getpid()}.tmp"
    (there / "kept").mkdir(parents=True)
    with pytest.raises(SystemExit):
        remote_install.build(
            str(src),
            ".tar.gz",
            str(images),
            entry=entry,
            version=sha12(src),
            fmt="unpack",
            stall=60,
            lock=-1,
            previous=None,
        )
    assert (there / "kept").is_dir() and not (images / entry).exists()
