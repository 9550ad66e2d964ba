"""`kit image build` stopped by SIGTERM or Ctrl-C while buildah runs a RUN step: one line,
143/130, no OUT and no part of it, no process of the build left (buildah's RUN step included),
its storage unmounted, and the next build succeeds."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.image.builders import RECIPE
from tests.support.interrupts import signalled_env, tagged
from tests.support.parts import require
from tests.support.paths import REPO

LIMIT = 300  # seconds: a bound only a hung build reaches
NAP = "3517"  # the RUN step's sleep, found by its command line


def _napping() -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if (
                entry.name.isdigit()
                and (entry / "cmdline").read_bytes() == f"sleep\0{NAP}\0".encode()
            ):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


@pytest.mark.parametrize(
    "sig,status,words", [("SIGTERM", 143, "terminated (SIGTERM)"), ("SIGINT", 130, "interrupted")]
)
def test_a_stopped_build_leaves_no_builder_no_step_and_no_output(
    context, tmp_path, sig, status, words
):
    require(shutil.which("buildah") is not None, "buildah not installed (scripts/setup.sh)")
    (context / "Dockerfile").write_text(RECIPE + "ARG NAP=0\nRUN sleep $NAP\n")
    out, storage = tmp_path / "out" / "gan3d.tar", tmp_path / "storage"
    argv = [
        sys.executable,
        "-m",
        "kit",
        "image",
        "build",
        str(out),
        "--site",
        "laptop",
        "--recipe",
        str(context / "Dockerfile"),
        "--context",
        str(context),
        "--builder",
        "buildah",
        "--storage",
        str(storage),
    ]
    tag = f"KIT_TEST_RUN_{uuid.uuid4().hex}"
    proc = subprocess.Popen(
        [*argv, "--build-arg", f"NAP={NAP}"],
        cwd=REPO,
        env=signalled_env(**{tag: "1"}),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + LIMIT
    while proc.poll() is None and not _napping():
        assert time.monotonic() < deadline, "the build never reached its RUN step"
        time.sleep(0.05)
    assert proc.poll() is None, proc.stderr.read()
    proc.send_signal(getattr(signal, sig))
    _, err = proc.communicate(timeout=LIMIT)
    assert proc.returncode == status and err.splitlines() == [
        f"kit: {words}; outputs are replaced only when complete"
    ], err
    # at once: the kit waits for what it stops
    assert not tagged(tag) and not _napping(), "processes of the build outlived it"
    assert sorted(p.name for p in out.parent.iterdir()) == []
    assert str(storage) not in Path("/proc/self/mounts").read_text(), (
        "the stopped step's container is still mounted"
    )

    again = subprocess.run(
        argv, cwd=REPO, env=signalled_env(), capture_output=True, text=True, timeout=LIMIT
    )
    assert again.returncode == 0 and out.is_file(), again.stderr
