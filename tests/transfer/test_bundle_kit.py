"""Bundles that stock `sha256sum -c` verifies, and `kit transfer bundle --with-kit`, which carries the
kit's own offline wheelhouse (a real wheel of the kit built by pip, with real SHA256SUMS)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from kit.errors import KitError
from kit.transfer import bundle, verify_bundle
from tests.support.transfer import checkers, random_image

CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "bundle"


def sha256sum_check(directory: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["sha256sum", "--check", "--strict", "SHA256SUMS"],
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=60,
    )


def kit(*args: str, cwd: Path, repo: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(repo)}
    return subprocess.run(
        [sys.executable, "-m", "kit", "transfer", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def files_under(directory: Path) -> set[str]:
    return {str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file()}


@pytest.fixture(scope="session")
def kit_wheel(tmp_path_factory, repo) -> Path:
    """The kit's wheel, built from a copy of the tree (setuptools writes build/ where it builds)."""
    src, out = tmp_path_factory.mktemp("src") / "kit", tmp_path_factory.mktemp("wheel")
    shutil.copytree(
        repo,
        src,
        ignore=shutil.ignore_patterns(
            ".git",
            ".venv",
            "build",
            "dist",
            "results",
            "*.egg-info",
            "__pycache__",
            ".hypothesis",
            ".pytest_cache",
        ),
    )
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(out),
            str(src),
        ],
        check=True,
        timeout=300,
        capture_output=True,
    )
    (wheel,) = out.glob("secure_site_kit-*.whl")
    return wheel


@pytest.fixture
def wheelhouse(tmp_path, kit_wheel, repo) -> Path:
    """A minimal wheelhouse as `make wheelhouse` lays it out: the kit's wheel, install.sh, the
    metadata files and SHA256SUMS written by sha256sum itself (one file one level down)."""
    wh = tmp_path / "dist" / "wheelhouse"
    (wh / "horovod").mkdir(parents=True)
    shutil.copy(kit_wheel, wh)
    shutil.copy(repo / "scripts" / "wheelhouse-install.sh", wh / "install.sh")
    (wh / "PYTHON_VERSION").write_text("3.11\n")
    (wh / "EXTRAS").write_text("report\n")
    (wh / "horovod" / "BUILD.sh").write_text("#!/bin/sh\necho build\n")
    (wh / ".secure-site-kit-wheelhouse").touch()
    names = sorted(files_under(wh) - {".secure-site-kit-wheelhouse"})
    sums = subprocess.run(
        ["sha256sum", "--", *names], cwd=wh, capture_output=True, text=True, check=True
    )
    (wh / "SHA256SUMS").write_text(sums.stdout)
    return wh


@pytest.fixture
def image(tmp_path) -> Path:
    return random_image(tmp_path / "src" / "img.tar", 40_000, seed=7)


def test_sha256sum_checks_a_plain_bundle_and_sees_damage(tmp_path, image):
    out = bundle([image], tmp_path / "usb" / "b")
    listed = {line.split("  ", 1)[1] for line in (out / "SHA256SUMS").read_text().splitlines()}
    assert listed == files_under(out) - {"SHA256SUMS"}, "every file but SHA256SUMS itself"
    assert sha256sum_check(out).returncode == 0
    data = bytearray((out / "img.tar").read_bytes())
    data[1000] ^= 0x80
    (out / "img.tar").write_bytes(bytes(data))
    res = sha256sum_check(out)
    assert res.returncode == 1 and "img.tar: FAILED" in res.stdout
    assert not verify_bundle(out).ok  # the kit's own checkers still read MANIFEST


def test_with_kit_carries_a_verified_wheelhouse(tmp_path, image, wheelhouse, kit_wheel, repo):
    out = tmp_path / "usb" / "b"
    res = kit(
        "bundle", str(image), "--dir", str(out), "--with-kit", cwd=tmp_path, repo=repo
    )  # default dist/wheelhouse
    assert res.returncode == 0, res.stderr
    assert f"sh {out}/kit/install.sh" in res.stdout and "sha256sum -c SHA256SUMS" in res.stdout
    carried = {f"kit/{n}" for n in files_under(wheelhouse) - {".secure-site-kit-wheelhouse"}}
    assert carried <= files_under(out) and f"kit/{kit_wheel.name}" in carried
    assert (out / "kit" / kit_wheel.name).read_bytes() == kit_wheel.read_bytes()
    manifest = {line.split(" ", 2)[2] for line in (out / "MANIFEST").read_text().splitlines()}
    assert carried <= manifest
    assert sha256sum_check(out).returncode == 0
    assert sha256sum_check(out / "kit").returncode == 0, "install.sh's own check passes on the copy"
    assert verify_bundle(out).ok
    for name, (code, text) in checkers(out, repo).items():
        assert code == 0, (name, text)

    os.truncate(out / "kit" / "horovod" / "BUILD.sh", 3)
    assert sha256sum_check(out).returncode == 1
    assert [(p[0], p[1]) for p in verify_bundle(out).problems] == [
        ("kit/horovod/BUILD.sh", "truncated")
    ]
    for name, (code, text) in checkers(out, repo).items():
        assert code == 1 and "TRUNCATED: kit/horovod/BUILD.sh" in text, (name, text)


def test_a_linked_kit_dir_in_a_bundle_is_not_followed(tmp_path, image, wheelhouse, repo):
    """A `kit` link (off the medium) holding the very bytes listed is still no file of the
    bundle.
    """
    out = bundle([image], tmp_path / "usb" / "b", kit_wheelhouse=wheelhouse)
    (out / "kit").rename(tmp_path / "elsewhere")
    (out / "kit").symlink_to(tmp_path / "elsewhere")
    report = verify_bundle(out)
    assert report.problems and {kind for _, kind, _ in report.problems} == {"missing"}
    assert all(name.startswith("kit/") for name, _, _ in report.problems)
    for name, (code, text) in checkers(out, repo).items():
        assert code == 1 and "MISSING: kit/install.sh" in text, (name, text)


def damage_flip(wh: Path) -> None:
    wheel = next(wh.glob("*.whl"))
    data = bytearray(wheel.read_bytes())
    data[100] ^= 1
    wheel.write_bytes(bytes(data))


def damage_link(wh: Path) -> None:
    (wh / "EXTRAS").unlink()
    (wh / "EXTRAS").symlink_to("/etc/hostname")


def damage_fifo(wh: Path) -> None:
    (wh / "EXTRAS").unlink()
    os.mkfifo(wh / "EXTRAS")


def damage_linked_dir(wh: Path) -> None:
    (wh / "horovod").rename(wh.parent / "hv")
    (wh / "horovod").symlink_to(wh.parent / "hv")


@pytest.mark.parametrize(
    "damage,says",
    [
        (lambda wh: shutil.rmtree(wh), "no wheelhouse there"),
        (lambda wh: (wh / "SHA256SUMS").unlink(), "SHA256SUMS: cannot read it"),
        (lambda wh: (wh / "EXTRAS").unlink(), "listed in SHA256SUMS but missing"),
        (damage_flip, "does not match"),
        (damage_link, "symlink"),
        (damage_fifo, "FIFO"),
        (damage_linked_dir, "horovod is a symlink"),
        (
            lambda wh: (wh / "SHA256SUMS").write_text(
                (wh / "SHA256SUMS").read_text().replace("secure_site_kit", "x")
            ),
            "lists no secure_site_kit-",
        ),
    ],
    ids=[
        "missing",
        "no-sums",
        "listed-missing",
        "altered",
        "link",
        "fifo",
        "linked-dir",
        "not-the-kit",
    ],
)
def test_a_bad_wheelhouse_is_refused_in_one_line(tmp_path, image, wheelhouse, repo, damage, says):
    damage(wheelhouse)
    out = tmp_path / "usb" / "b"
    res = kit(
        "bundle",
        str(image),
        "--dir",
        str(out),
        "--with-kit",
        "--kit-wheelhouse",
        str(wheelhouse),
        cwd=tmp_path,
        repo=repo,
    )
    assert res.returncode == 1, res.stderr
    assert (
        len(res.stderr.strip().splitlines()) == 1
        and says in res.stderr
        and "make wheelhouse" in res.stderr
    )
    assert not (tmp_path / "usb").exists() or not list((tmp_path / "usb").iterdir()), (
        "nothing half-made"
    )


ESCAPED = "\\" + "0" * 64 + "  a\\\\b.whl\n"  # what sha256sum writes for a name with a backslash


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    sums=st.one_of(
        st.binary(max_size=200).map(lambda b: b.decode("latin-1")),
        st.lists(
            st.builds(
                lambda h, sep, name: f"{h}{sep}{name}",
                st.text("0123456789abcdef", min_size=63, max_size=65),
                st.sampled_from(["  ", " *", " ", "\t"]),
                st.sampled_from(
                    [
                        "secure_site_kit-0.1.0-py3-none-any.whl",
                        "../x.whl",
                        "a/b/c/d.whl",
                        "a b.whl",
                        ".hidden",
                        "SHA256SUMS",
                        "EXTRAS",
                        "EXTRAS/x",
                        "/etc/passwd",
                        "x\\y",
                    ]
                ),
            ),
            max_size=4,
        ).map(lambda ls: "\n".join(ls) + "\n"),
    )
)
@example(sums=ESCAPED)
@example(sums="0" * 64 + "  secure_site_kit-1.whl\n" + "0" * 64 + "  secure_site_kit-1.whl\n")
def test_fuzzed_wheelhouse_sums_give_a_bundle_or_a_clean_error(tmp_path, image, sums):
    wh = tmp_path / "wh"
    wh.mkdir(exist_ok=True)
    (wh / "EXTRAS").write_text("report\n")
    (wh / "SHA256SUMS").write_bytes(sums.encode("latin-1"))
    out = tmp_path / "usb" / "b"
    shutil.rmtree(tmp_path / "usb", ignore_errors=True)
    try:
        bundle([image], out, kit_wheelhouse=wh)
    except KitError as exc:
        assert "\n" not in str(exc) and "make wheelhouse" in str(exc)
        assert not (tmp_path / "usb").exists() or not list((tmp_path / "usb").iterdir())
        return
    assert sha256sum_check(out).returncode == 0 and verify_bundle(out).ok


WHEEL = "secure_site_kit-0.1.0-py3-none-any.whl"
GOOD_NAMES = [
    "install.sh",
    "EXTRAS",
    "horovod/BUILD.sh",
    "a/b/c.whl",
    "secure_site_kit-0.0.1.tar.gz",
]
BAD_NAMES = ["a/b/c/d.whl", ".hidden", "a b.whl", "x\\y", "../up.whl"]


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    files=st.lists(
        st.tuples(
            st.sampled_from(GOOD_NAMES * 4 + BAD_NAMES),
            st.binary(max_size=64),
            st.sampled_from([True] * 5 + [False]),
        ),
        max_size=4,
        unique_by=lambda f: f[0],
    ),
    wheel=st.one_of(
        st.none(),
        st.tuples(st.just(WHEEL), st.binary(max_size=64), st.sampled_from([True] * 5 + [False])),
    ),
)
@example(files=[("a/b/c/d.whl", b"", True)], wheel=(WHEEL, b"w", True))
def test_a_wheelhouse_is_carried_exactly_when_it_verifies(tmp_path, image, files, wheel):
    """Model: the bundle is made iff every listed name is plain and shallow enough, every sum right
    and the kit's wheel listed; then kit/ holds those bytes and sha256sum -c agrees."""
    import hashlib

    files = files + ([wheel] if wheel else [])
    wh, usb = tmp_path / "wh", tmp_path / "usb"
    shutil.rmtree(wh, ignore_errors=True)
    shutil.rmtree(usb, ignore_errors=True)
    lines = []
    for name, data, right in files:
        if name in GOOD_NAMES + [WHEEL]:
            (wh / name).parent.mkdir(parents=True, exist_ok=True)
            (wh / name).write_bytes(data)
        sha = hashlib.sha256(data if right else data + b"!").hexdigest()
        lines.append(("\\" if "\\" in name else "") + f"{sha}  {name}\n")
    wh.mkdir(exist_ok=True)
    (wh / "SHA256SUMS").write_text("".join(lines))
    expect = wheel is not None and all(
        name in GOOD_NAMES + [WHEEL] and right for name, _, right in files
    )
    event("carried" if expect else "refused")
    try:
        out = bundle([image], usb / "b", kit_wheelhouse=wh)
    except KitError as exc:
        assert not expect, exc
        assert "\n" not in str(exc) and "make wheelhouse" in str(exc)
        assert not usb.exists() or not list(usb.iterdir()), "nothing half-made"
        return
    assert expect
    assert files_under(out / "kit") == {name for name, _, _ in files} | {"SHA256SUMS"}
    assert all((out / "kit" / name).read_bytes() == data for name, data, _ in files)
    assert sha256sum_check(out).returncode == 0 and sha256sum_check(out / "kit").returncode == 0
    assert verify_bundle(out).ok


def test_the_regression_corpus_of_wheelhouse_sums(tmp_path, image):
    """Every file under tests/corpus/bundle/sums-* is a SHA256SUMS a bundle must refuse."""
    cases = sorted(CORPUS.glob("sums-*"))
    assert cases
    for case in cases:
        wh = tmp_path / case.name
        wh.mkdir()
        (wh / "SHA256SUMS").write_bytes(case.read_bytes())
        with pytest.raises(KitError, match="make wheelhouse"):
            bundle([image], tmp_path / "usb" / case.name, kit_wheelhouse=wh)
