"""Hostile or broken inputs around a transfer: FIFOs, devices and garbage where the kit reads a
checksum, a manifest or a pair file; a remote side that answers garbage or drops the SSH
connection. Each gives one clean line (KitError, exit 1), quickly, never a traceback or a hang."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from kit.errors import KitError
from kit.transfer import bundle, installed_versions, push, remote, verify_bundle
from kit.transfer import verify as checker
from kit.transfer.local_image import open_local_image, recorded_sha256
from kit.transfer.push import _read_pair
from tests.support.transfer import random_image
from tests.transfer.sshd import start_sshd

BOUND = 60  # s: a reader that blocks is stopped here (and the test fails); nothing is timed
CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "transfer"


def limited_memory() -> None:
    """A checker that reads /dev/zero whole must fail in its child, not take the machine down."""
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


def kit_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kit", *args],
        capture_output=True,
        text=True,
        timeout=BOUND,
        env=env,
        preexec_fn=limited_memory,
    )


def assert_clean_exit_1(res: subprocess.CompletedProcess, *words: str) -> None:
    assert res.returncode == 1, (res.returncode, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kit: error: "), res.stderr
    for word in words:
        assert word in lines[0], res.stderr


# ---------------------------------------------------------------- the image's own files


@pytest.mark.timeout(2 * BOUND)
@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "dangling"])
def test_a_checksum_file_that_is_no_file_is_refused(tmp_path, make_site, kind):
    img = random_image(tmp_path / "a.tar.gz", 1000)
    sha_file = tmp_path / "a.tar.gz.sha256"
    sha_file.unlink()
    if kind == "fifo":
        os.mkfifo(sha_file)
    else:
        sha_file.symlink_to("/dev/zero" if kind == "dev-zero" else tmp_path / "nowhere")
    with pytest.raises(
        KitError, match="a.tar.gz.sha256.*not a regular file|a.tar.gz.sha256.*dangling"
    ):
        push(img, make_site())
    assert_clean_exit_1(
        kit_cli("transfer", "push", str(img), "--site", str(make_site()), "--dry-run"),
        "a.tar.gz.sha256",
    )


@pytest.mark.timeout(2 * BOUND)
def test_a_fifo_or_device_as_the_image_is_refused(tmp_path, make_site):
    os.mkfifo(tmp_path / "f.tar.gz")
    (tmp_path / "z.tar.gz").symlink_to("/dev/zero")
    for name in ("f.tar.gz", "z.tar.gz"):
        with pytest.raises(
            KitError, match=f"{name}: the image is a (FIFO|device), not a regular file"
        ):
            push(tmp_path / name, make_site())
        assert_clean_exit_1(
            kit_cli("transfer", "bundle", str(tmp_path / name), "--dir", str(tmp_path / "out")),
            "not a regular file",
        )
    assert not (tmp_path / "out").exists()


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    content=st.one_of(
        st.binary(max_size=200),
        st.text(max_size=120).map(str.encode),
        st.builds(
            lambda h, sep, name: f"{h}{sep}{name}\n".encode(),
            st.text("0123456789abcdefABCDEF", min_size=60, max_size=66),
            st.sampled_from(["  ", " *", " ", "\t"]),
            st.sampled_from(["s.tar.gz", "./s.tar.gz", "x/s.tar.gz", "s.tar"]),
        ),
    )
)
@example(content=b"\xff\xfe\x00garbage")
@example(content=b"0" * 64 + b"  s.tar.gz\n\xff")
@example(content=("٠" * 64 + "  s.tar.gz\n").encode())  # Arabic-Indic digits are no hex
def test_fuzzed_checksum_files_give_a_digest_or_a_clean_error(tmp_path, content):
    img = tmp_path / "s.tar.gz"
    img.write_bytes(b"image")
    (tmp_path / "s.tar.gz.sha256").write_bytes(content)
    try:
        digest = recorded_sha256(open_local_image(img))
    except KitError as exc:
        assert "s.tar.gz.sha256" in str(exc) and "\n" not in str(exc)
        return
    assert len(digest) == 64 and set(digest) <= set("0123456789abcdef")


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    doc=st.one_of(
        st.binary(max_size=100),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(max_size=10),
            lambda kids: (
                st.lists(kids, max_size=3)
                | st.dictionaries(st.sampled_from(["site", "binds", "kit_pair"]), kids, max_size=3)
            ),
            max_leaves=8,
        ).map(lambda v: repr(v).encode()),
    )
)
@example(doc=b"binds: 5\nsite: x\n")
@example(doc=b"binds: {a: b}\n")
@example(doc=b"- just\n- a list\n")
@example(doc=b"\x80")
@example(doc=b"[" * 100_000)
@example(doc=b"'\xc4\x80'")
def test_fuzzed_pair_files_give_paths_or_a_warning(tmp_path, doc):
    img = tmp_path / "p.tar.gz"
    img.write_bytes(b"image")
    (tmp_path / "p.tar.gz.pair.yaml").write_bytes(doc)
    paths, warnings = _read_pair(SimpleNamespace(name="x"), open_local_image(img))
    assert all(isinstance(p, str) for p in paths) and all("\n" not in w for w in warnings)


def test_a_pair_file_that_is_not_utf8_is_a_warning(sshd, home, tmp_path, make_site):
    img = random_image(tmp_path / "u.tar.gz", 1000)
    (tmp_path / "u.tar.gz.pair.yaml").write_bytes(b"site: \xff\xfe\n")
    res = kit_cli(
        "transfer",
        "push",
        str(img),
        "--site",
        str(make_site()),
        "--dry-run",
        env=dict(os.environ, HOME=str(home)),
    )
    assert res.returncode == 0, res.stderr
    assert "warning: u.tar.gz.pair.yaml is not a pair file kit mpi pair wrote" in res.stdout
    assert "not UTF-8" in res.stdout


# ---------------------------------------------------------------- bundles


def checkers(directory: Path) -> dict[str, subprocess.CompletedProcess]:
    runs = {
        "py": ["python3", str(directory / "verify.py"), str(directory)],
        "sh": ["sh", str(directory / "verify.sh"), str(directory)],
    }
    return {
        name: subprocess.run(
            cmd, capture_output=True, text=True, timeout=BOUND, preexec_fn=limited_memory
        )
        for name, cmd in runs.items()
    }


@pytest.fixture
def made(tmp_path) -> Path:
    return bundle([random_image(tmp_path / "src" / "b.sqfs", 5000)], tmp_path / "usb" / "bundle")


@pytest.mark.timeout(4 * BOUND)
@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "too-big"])
def test_a_manifest_that_is_no_manifest_is_refused(made, kind):
    manifest = made / "MANIFEST"
    manifest.unlink()
    if kind == "fifo":
        os.mkfifo(manifest)
    elif kind == "dev-zero":
        manifest.symlink_to("/dev/zero")
    else:
        manifest.write_bytes(b"x" * (2 << 20))
    with pytest.raises(KitError, match="MANIFEST"):
        verify_bundle(made)
    assert_clean_exit_1(kit_cli("transfer", "verify", str(made)), "MANIFEST")
    for name, res in checkers(made).items():
        assert res.returncode == 2 and "MANIFEST" in res.stderr, (name, res.stderr)


@pytest.mark.timeout(4 * BOUND)
def test_a_bundle_file_that_is_a_link_is_not_followed(made, tmp_path):
    """A link in a bundle may point anywhere (off the medium, /dev/zero): the bundle holds files."""
    target = made / "b.sqfs"
    target.rename(tmp_path / "elsewhere.sqfs")
    target.symlink_to(tmp_path / "elsewhere.sqfs")  # the very bytes the manifest names
    report = verify_bundle(made)
    assert [(p[0], p[1]) for p in report.problems] == [("b.sqfs", "missing")]
    for name, res in checkers(made).items():
        assert res.returncode == 1 and "MISSING: b.sqfs" in res.stdout, (
            name,
            res.stdout,
            res.stderr,
        )


MANIFEST_LINES = st.builds(
    lambda h, n, name: f"{h} {n} {name}",
    st.text("0123456789abcdef", min_size=63, max_size=65),
    st.one_of(st.integers(0, 10**6).map(str), st.text("0123456789", min_size=18, max_size=5000)),
    st.sampled_from(["b.sqfs", "b.sqfs.sha256", "../b.sqfs", ".b", "a b", "MANIFEST"]),
)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    content=st.one_of(
        st.binary(max_size=300),
        st.lists(MANIFEST_LINES, max_size=4).map(lambda ls: ("\n".join(ls) + "\n").encode()),
    )
)
@example(content=b"\xff\xfe")
@example(content=b"0" * 64 + b" " + b"9" * 5000 + b" b.sqfs\n")
@example(content=b"0" * 64 + b" 1 b.sqfs\n\n")
@example(content=b"0" * 64 + b" 1 b.sqfs\r\n")
def test_fuzzed_manifests_give_a_report_or_a_clean_error(made, content):
    (made / "MANIFEST").write_bytes(content)
    try:
        report = verify_bundle(made)
    except KitError as exc:
        assert "MANIFEST" in str(exc) and "\n" not in str(exc)
        return
    assert report.files == len(checker.read_manifest(str(made)))


def test_the_regression_corpus_of_manifests(made):
    """Every file under tests/corpus/transfer/manifest-* (hostile manifests, kept) is refused."""
    cases = sorted(CORPUS.glob("manifest-*"))
    assert cases
    for case in cases:
        (made / "MANIFEST").write_bytes(case.read_bytes())
        with pytest.raises(KitError, match="MANIFEST"):
            verify_bundle(made)
        res = subprocess.run(
            ["python3", str(made / "verify.py")], capture_output=True, text=True, timeout=BOUND
        )
        assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, (
            case.name,
            res.stderr,
        )


# ---------------------------------------------------------------- a remote side that lies or drops


@pytest.fixture(scope="module")
def liar(tmp_path_factory):
    """An sshd whose every session runs answer.sh instead of the command: what the test writes there
    is what the 'remote kit' answers."""
    root = tmp_path_factory.mktemp("liar")
    answer = root / "answer.sh"
    answer.write_text("exit 0\n")
    server = start_sshd(root / "sshd", extra_config=f"ForceCommand sh {answer}\n")
    home = root / "home"
    server.write_ssh_config(home / ".ssh" / "config", alias="liar")
    yield SimpleNamespace(answer=answer, home=home, config=home / ".ssh" / "config")
    server.stop()


PROBES = [
    b'KIT-PROBE [1, 2]\n',
    b'KIT-PROBE {"dir": "/x", "free": "lots"}\n',
    b"KIT-PROBE \xff\xfe\n",
    b'KIT-PROBE {"dir": "/x", "free": 1, "final_matches": false, "part_size": 0, "chunk_hashes": 5, '
    b'"missing": []}\n',
]


def says(liar, answer: bytes) -> None:
    """Every session of the liar prints `answer`, whatever it was asked."""
    (liar.answer.parent / "said").write_bytes(answer)
    liar.answer.write_text(f"cat {liar.answer.parent / 'said'}\n")


def site_file(tmp_path: Path, repo: Path) -> Path:
    site = tmp_path / "site.yaml"
    site.write_text((repo / "site-configs" / "laptop.yaml").read_text())
    return site


@pytest.mark.system  # an sshd of its own, logged in as root
@pytest.mark.timeout(2 * BOUND)
@pytest.mark.parametrize("said", PROBES)
def test_a_push_to_a_remote_that_answers_garbage(liar, tmp_path, repo, said):
    says(liar, said)
    img = random_image(tmp_path / "g.tar.gz", 3000)
    (tmp_path / "g.tar.gz.sha256").unlink()
    site = site_file(tmp_path, repo)
    with pytest.raises(KitError, match="unexpected answer|malformed probe") as err:
        push(img, site, host="liar", remote_dir=str(tmp_path / "remote"), ssh_config=liar.config)
    assert "\n" not in str(err.value)
    assert_clean_exit_1(
        kit_cli(
            "transfer",
            "push",
            str(img),
            "--site",
            str(site),
            "--host",
            "liar",
            "--remote-dir",
            str(tmp_path / "remote"),
            env=dict(os.environ, HOME=str(liar.home)),
        )
    )


@pytest.mark.system  # an sshd of its own, logged in as root
@pytest.mark.timeout(2 * BOUND)
def test_a_push_whose_connection_drops_after_the_upload(liar, tmp_path, repo):
    """The data stream completes, then the control connection dies while the siblings are copied."""
    flag = liar.answer.parent / "uploaded"
    flag.unlink(missing_ok=True)
    liar.answer.write_text(
        f'if [ -e {flag} ]; then kill -9 $PPID; exit 1; fi\ntouch {flag}\n'
        'eval "$SSH_ORIGINAL_COMMAND"\n'
    )
    img = random_image(tmp_path / "d.tar.gz", 3000)
    with pytest.raises(
        KitError, match="sibling files failed: .*; fix: run the same command again"
    ) as err:
        push(
            img,
            site_file(tmp_path, repo),
            host="liar",
            remote_dir=str(tmp_path / "remote"),
            ssh_config=liar.config,
        )
    assert "\n" not in str(err.value)
    assert (tmp_path / "remote" / "d.tar.gz").read_bytes() == img.read_bytes(), (
        "the upload itself landed"
    )


@pytest.mark.system  # an sshd of its own, logged in as root
@pytest.mark.timeout(2 * BOUND)
def test_a_push_to_a_remote_that_never_answers_is_stopped(liar, tmp_path, repo, monkeypatch):
    """The data stream's progress watchdog: a live connection on which nothing moves ends the
    push.
    """
    liar.answer.write_text("sleep 20\n")  # longer than the stall; ends by itself after the test
    monkeypatch.setattr(
        sys.modules["kit.transfer.push"], "STREAM_STALL", 2, raising=False
    )  # the module
    img = random_image(tmp_path / "w.tar.gz", 3000)
    (tmp_path / "w.tar.gz.sha256").unlink()
    with pytest.raises(
        KitError, match="moved no byte for 2 s .*; fix: .* run the same command again"
    ) as err:
        push(
            img,
            site_file(tmp_path, repo),
            host="liar",
            remote_dir=str(tmp_path / "remote"),
            ssh_config=liar.config,
        )
    assert "\n" not in str(err.value)


@pytest.mark.system  # an sshd of its own, logged in as root
@pytest.mark.timeout(2 * BOUND)
def test_a_push_whose_sftp_server_stops_answering_is_stopped(liar, tmp_path, repo, monkeypatch):
    """The upload completes; the SFTP session for the siblings then never answers: a timeout."""
    flag = liar.answer.parent / "uploaded"
    flag.unlink(missing_ok=True)
    liar.answer.write_text(
        f'if [ -e {flag} ]; then sleep 20; exit 1; fi\ntouch {flag}\neval "$SSH_ORIGINAL_COMMAND"\n'
    )
    monkeypatch.setattr(sys.modules["kit.transfer.push"], "SFTP_TIMEOUT", 2, raising=False)
    img = random_image(tmp_path / "t.tar.gz", 3000)
    with pytest.raises(
        KitError, match="sibling files failed: .*; fix: run the same command again"
    ) as err:
        push(
            img,
            site_file(tmp_path, repo),
            host="liar",
            remote_dir=str(tmp_path / "remote"),
            ssh_config=liar.config,
        )
    assert "\n" not in str(err.value)


LISTINGS = [
    b'[]',
    b'{"dir": 5}',
    b"[" * 100_000,
    b'{"dir": "/x", "current": null, "versions": [{"entry": 1}]}',
    b'{"dir": "/x", "current": "a@1", "versions": "no"}',
    b'null',
    b'"text"',
]


@pytest.mark.system  # an sshd of its own, logged in as root
@pytest.mark.timeout(2 * BOUND)
@pytest.mark.parametrize("said", LISTINGS)
def test_versions_from_a_remote_that_answers_garbage(liar, tmp_path, repo, said):
    says(liar, said + b"\n")
    site = site_file(tmp_path, repo)
    with pytest.raises(KitError, match="listing app: unexpected answer") as err:
        installed_versions("app", site, host="liar", ssh_config=liar.config)
    assert "\n" not in str(err.value) and err.value.where.endswith(":images")  # the site's ~/images
    env = dict(os.environ, HOME=str(liar.home))
    where = ("--site", str(site), "--host", "liar")
    assert_clean_exit_1(kit_cli("transfer", "rollback", "app", *where, env=env), "app")
    # with --json, the parts a script acts on: HOST:DIR and the fix
    listed = kit_cli("transfer", "versions", "app", "--json", *where, env=env)
    assert (listed.returncode, listed.stdout, listed.stderr.count("\n")) == (1, "", 1)
    error = json.loads(listed.stderr)["error"]
    assert (error["where"], error["fix"]) == (err.value.where, remote.ODD_ANSWER_FIX)
