"""The receiving end of `kit transfer push` run directly (kit/transfer/remote_script.py): its argv
for a push or a probe of a 1 MiB + 4 bytes upload, the stdin that commits it, its one error line."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

from tests.support.paths import REPO

SCRIPT = REPO / "kit" / "transfer" / "remote_script.py"
MiB = 1 << 20
DATA = bytes(range(256)) * 4096 + b"tail"  # 1 MiB + 4 bytes: two chunks of 1 MiB
BOUND = 60  # s: a receiver that blocks is stopped here (and the test fails), no timing is asserted


def one_error_line(stderr: bytes) -> str:
    lines = stderr.decode().strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("KIT-ERROR "), stderr
    return lines[0]


def receive_argv(directory: Path, chunk: int = MiB) -> list[str]:
    sha = hashlib.sha256(DATA).hexdigest()
    return [
        sys.executable,
        str(SCRIPT),
        "push",
        str(directory),
        "img.tar.gz",
        str(len(DATA)),
        sha,
        str(chunk),
        "0",
    ]


def probe_argv(directory: Path) -> list[str]:
    argv = receive_argv(directory)[:-1]  # no DIRECT flag
    argv[argv.index("push")] = "probe"
    return argv


def stdin_for(data: bytes) -> bytes:
    return b"KEEP \n" + data + f"COMMIT {hashlib.sha256(data).hexdigest()}\n".encode()
