"""kit transfer bundle|verify, and the bundle's own verify.sh (POSIX sh) and verify.py checkers."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from kit.errors import KitError
from kit.transfer import bundle, verify_bundle
from tests.support.transfer import busybox_image, cached_bytes, checkers, random_image


@pytest.fixture
def made(tmp_path):
    a = busybox_image(tmp_path / "src" / "a.tar.gz", b"a")
    (tmp_path / "src" / "a.pair.yaml").write_text("verdict: compatible\n")
    b = random_image(tmp_path / "src" / "b.sqfs", 300_000, seed=3)
    out = bundle([a, b], tmp_path / "media" / "bundle")
    return out


def test_bundle_contents_and_clean_verify(made, repo):
    names = sorted(p.name for p in made.iterdir())
    assert names == sorted(
        [
            "a.tar.gz",
            "a.tar.gz.sha256",
            "a.pair.yaml",
            "b.sqfs",
            "b.sqfs.sha256",
            "MANIFEST",
            "MANIFEST.json",
            "verify.sh",
            "verify.py",
            "SHA256SUMS",
        ]
    )
    assert verify_bundle(made).ok and verify_bundle(made).files == 5
    for name, (code, text) in checkers(made, repo).items():
        assert code == 0, (name, text)
        assert "5 files, 0 problem(s)" in text, (name, text)


@pytest.mark.parametrize(
    "damage,kind", [("flip", "ALTERED"), ("truncate", "TRUNCATED"), ("delete", "MISSING")]
)
def test_damaged_bundle_names_the_file(made, repo, damage, kind):
    target = made / "b.sqfs"
    if damage == "flip":
        data = bytearray(target.read_bytes())
        data[123_456] ^= 0x01
        target.write_bytes(bytes(data))
    elif damage == "truncate":
        os.truncate(target, target.stat().st_size - 1)
    else:
        target.unlink()
    report = verify_bundle(made)
    assert [(p[0], p[1]) for p in report.problems] == [("b.sqfs", kind.lower())]
    for name, (code, text) in checkers(made, repo).items():
        assert code == 1, (name, text)
        assert f"{kind}: b.sqfs" in text, (name, text)
        assert "a.tar.gz" not in text.replace("a.tar.gz.sha256", ""), (name, text)


def test_bundle_is_written_whole(tmp_path):
    img = random_image(tmp_path / "x.tar", 10_000)
    (tmp_path / "x.tar.sha256").write_text("f" * 64 + "  x.tar\n")  # damaged source
    with pytest.raises(KitError, match="does not match"):
        bundle([img], tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.tar", "x.tar.sha256"], (
        "no partial bundle"
    )
    (tmp_path / "x.tar.sha256").unlink()
    bundle([img], tmp_path / "out")
    with pytest.raises(KitError, match="already exists"):
        bundle([img], tmp_path / "out")
    with pytest.raises(KitError, match="MANIFEST"):
        verify_bundle(tmp_path)


def test_cli_bundle(tmp_path, repo):
    img = random_image(tmp_path / "one.tar", 50_000)
    out = tmp_path / "usb" / "b1"
    res = subprocess.run(
        [sys.executable, "-m", "kit", "transfer", "bundle", str(img), "--dir", str(out)],
        capture_output=True,
        text=True,
        cwd=repo,
    )
    assert res.returncode == 0, res.stderr
    assert "2 files" in res.stdout and (out / "verify.sh").exists()
    again = subprocess.run(
        [sys.executable, "-m", "kit", "transfer", "bundle", str(img), "--dir", str(out)],
        capture_output=True,
        text=True,
        cwd=repo,
    )
    assert again.returncode == 1 and "already exists" in again.stderr


def test_progress_and_verify_reads_the_medium_not_the_cache(tmp_path):
    img = random_image(tmp_path / "src" / "big.tar", 24 << 20, seed=5)
    copied, hashed = [], []
    out = bundle([img], tmp_path / "usb", progress=lambda done, total: copied.append((done, total)))
    total = img.stat().st_size + (tmp_path / "src" / "big.tar.sha256").stat().st_size
    assert copied[-1] == (total, total) and [d for d, _ in copied] == sorted(d for d, _ in copied)
    # the copy is on the medium and out of the page cache: the verify below reads the device
    assert cached_bytes(out / "big.tar") < (1 << 20)
    assert verify_bundle(out, progress=lambda done, total: hashed.append((done, total))).ok
    assert hashed[-1] == (total, total)


def test_a_sidecar_two_images_share_goes_in_once(tmp_path, repo):
    """a.tar.gz and a.sqfs both pick up a.pair.yaml (the stem's sidecar): one copy, both
    verified.
    """
    a = busybox_image(tmp_path / "src" / "a.tar.gz", b"a")
    b = random_image(tmp_path / "src" / "a.sqfs", 20_000, seed=5)
    (tmp_path / "src" / "a.pair.yaml").write_text("verdict: compatible\n")
    bundle([a, b], tmp_path / "media" / "bundle")
    names = sorted(p.name for p in (tmp_path / "media" / "bundle").iterdir())
    assert names.count("a.pair.yaml") == 1 and {"a.tar.gz", "a.sqfs"} <= set(names)
    assert all(code == 0 for code, _ in checkers(tmp_path / "media" / "bundle", repo).values())


def test_a_directory_made_at_out_while_the_bundle_is_written_is_left_alone(tmp_path, monkeypatch):
    """OUT did not exist when the bundle began; someone makes it (empty) before the bundle gets its
    name: rename(2) would have replaced it. It is kept, the bundle's temp tree goes, one line says why."""
    import importlib

    module = importlib.import_module("kit.transfer.bundle")
    img, out = random_image(tmp_path / "x.tar", 10_000), tmp_path / "out"
    real = module.fsync_path

    def meanwhile(path):  # the last step before the rename: the files are being made durable
        out.mkdir(exist_ok=True)
        real(path)

    monkeypatch.setattr(module, "fsync_path", meanwhile)
    with pytest.raises(KitError, match="appeared while the bundle was written"):
        bundle([img], out)
    assert out.is_dir() and list(out.iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "x.tar", "x.tar.sha256"], (
        "no temp tree left"
    )


@pytest.mark.timeout(120)
def test_every_entry_the_manifest_does_not_list_is_reported(made, repo, tmp_path):
    """A verifier of removable media names every file it was not told about: an extra script beside
    the images, a directory (named once, not walked), a link off the medium and a FIFO (not opened)."""
    (made / "run-me.sh").write_text("#!/bin/sh\nrm -rf ~\n")
    (made / "more" / "deep").mkdir(parents=True)
    (made / "more" / "deep" / "x.py").write_text("x\n")
    (made / "passwd").symlink_to("/etc/passwd")
    os.mkfifo(made / "pipe")
    (made / "we\nird").write_text("x")
    report = verify_bundle(made)
    assert [(name, kind) for name, kind, _ in report.problems] == [
        ("'we\\nird'", "unlisted"),
        ("more", "unlisted"),
        ("passwd", "unlisted"),
        ("pipe", "unlisted"),
        ("run-me.sh", "unlisted"),
    ]
    for name, (code, text) in checkers(made, repo).items():
        assert code == 1, (name, text)
        for shown in ("run-me.sh", "more", "passwd", "pipe"):
            assert f"UNLISTED: {shown} (" in text, (name, text)
        assert "deep" not in text and "ird" in text, (name, text)
        assert "5 files, " in text and "problem(s)" in text and ", 0 problem(s)" not in text, (
            name,
            text,
        )
