"""`kit transfer push` stopped by SIGTERM (scancel, kill) or Ctrl-C while its ssh data stream
runs: one line, 143/130, no ssh process of it left, nothing installed at the image's name, and
the next push resumes and finishes."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import time
import uuid

import pytest

from tests.support.interrupts import signalled_env, tagged
from tests.support.paths import REPO
from tests.support.transfer import random_image

MiB = 1 << 20
LIMIT = 300  # seconds: a bound only a hung run reaches


# Before the ssh(1) of the data stream starts (Fabric, in-process, is the control channel), and
# with it connected, as the image is opened again to send its chunks (after its .sha256 and the hashing).
MOMENTS = ["subprocess.Popen|ssh|1", "open|blob.tar.gz|3"]
SIGNALS = [("SIGTERM", 143, "terminated (SIGTERM)"), ("SIGINT", 130, "interrupted")]


@pytest.mark.parametrize("moment", MOMENTS)
@pytest.mark.parametrize("sig,status,words", SIGNALS)
def test_a_stopped_push_leaves_no_ssh_behind_and_the_next_resumes(
    sshd, user_home, make_site, tmp_path, moment, sig, status, words
):
    site = make_site(direct_io=False)
    img = random_image(tmp_path / "blob.tar.gz", 24 * MiB + 5)
    argv = ["kit", "transfer", "push", str(img), "--site", str(site)]
    tag, fired = f"KIT_TEST_RUN_{uuid.uuid4().hex}", tmp_path / "fired"
    run = subprocess.run(
        [sys.executable, "-m", "tests.support.signal_at", *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=LIMIT,
        env=signalled_env(
            **{
                tag: "1",
                "KIT_TEST_SIGNAL_AT": f"{moment}|{sig}",
                "KIT_TEST_SIGNAL_FIRED": str(fired),
            }
        ),
    )
    assert fired.exists(), run.stderr
    assert run.returncode == status and run.stderr.splitlines() == [
        f"kit: {words}; outputs are replaced only when complete"
    ], run.stderr
    deadline = time.monotonic() + LIMIT
    while left := tagged(tag):
        assert time.monotonic() < deadline, f"processes of the push still alive: {left}"
        time.sleep(0.1)
    assert not (tmp_path / "remote" / "blob.tar.gz").exists()

    again = subprocess.run(
        [sys.executable, "-m", *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=LIMIT,
        env=signalled_env(),
    )
    assert again.returncode == 0, again.stderr
    assert (
        hashlib.sha256((tmp_path / "remote" / "blob.tar.gz").read_bytes()).hexdigest()
        == hashlib.sha256(img.read_bytes()).hexdigest()
    )
