"""Images to push and install in the transfer tests (a tiny busybox image, incompressible bytes,
each with its .sha256), and looks at what the transfer left: ch-run, the page cache, O_DIRECT."""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

from tests.support.parts import require

ALIAS = "kit-test"  # the ssh config alias of the loopback sshd


def write_sha256(path: Path) -> Path:
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    out = path.with_name(path.name + ".sha256")
    out.write_text(f"{digest}  {path.name}\n")
    return out


def busybox_image(out: Path, extra: bytes = b"") -> Path:
    """A tiny but genuine Charliecloud image tarball: busybox-static plus the dirs ch-run binds."""
    require(Path("/bin/busybox").exists(), "busybox-static not installed")
    root = out.parent / (out.name + ".root")
    out.parent.mkdir(parents=True, exist_ok=True)
    for d in ("bin", "dev", "etc", "home", "proc", "root", "sys", "tmp", "usr", "var"):
        (root / d).mkdir(parents=True, exist_ok=True)
    for f in ("hosts", "resolv.conf", "passwd", "group"):
        (root / "etc" / f).touch()
    shutil.copy2("/bin/busybox", root / "bin" / "busybox")
    if not (root / "bin" / "sh").exists():
        os.symlink("busybox", root / "bin" / "sh")
    (root / "etc" / "kit-version").write_bytes(extra)
    with tarfile.open(out, "w:gz") as tar:
        tar.add(root, arcname=".")
    shutil.rmtree(root)
    write_sha256(out)
    return out


def random_image(out: Path, size: int, seed: int = 0) -> Path:
    """Incompressible bytes under an image name (the push does not look inside)."""
    import random

    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(random.Random(seed).randbytes(size))
    write_sha256(out)
    return out


def have_charliecloud() -> None:
    require(
        shutil.which("ch-convert") is not None and shutil.which("ch-run") is not None,
        "Charliecloud not installed (apt-get install charliecloud)",
    )


def ch_run(image_dir: Path, *cmd: str) -> str:
    env = dict(os.environ, USER=os.environ.get("USER", "root"))
    return subprocess.run(
        ["ch-run", str(image_dir), "--", *cmd], capture_output=True, text=True, check=True, env=env
    ).stdout


def cached_bytes(path: Path) -> int:
    """How much of `path` sits in the page cache (fincore, util-linux)."""
    require(shutil.which("fincore") is not None, "fincore (util-linux) not installed")
    out = subprocess.run(
        ["fincore", "--raw", "--noheadings", "--bytes", "-o", "RES", str(path)],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(out.stdout.split()[0])


def direct_io_works(directory: Path) -> bool:
    """Does the filesystem under `directory` take O_DIRECT opens (tmpfs before Linux 6.6 does
    not)?
    """
    try:
        fd = os.open(directory / ".probe", os.O_WRONLY | os.O_CREAT | os.O_DIRECT)
    except OSError as exc:
        if exc.errno == errno.EINVAL:
            return False
        raise
    os.close(fd)
    os.unlink(directory / ".probe")
    return True


def checkers(bundle_dir, repo):
    """Run all three checkers; return {name: (exit code, output)}."""
    runs = {
        "kit": [sys.executable, "-m", "kit", "transfer", "verify", str(bundle_dir)],
        "sh": ["sh", str(bundle_dir / "verify.sh")],
        "py": ["python3", str(bundle_dir / "verify.py")],
    }
    out = {}
    for name, cmd in runs.items():
        res = subprocess.run(cmd, capture_output=True, text=True, cwd=repo)
        out[name] = (res.returncode, res.stdout + res.stderr)
    return out


def kit_leftovers(images: Path) -> list[str]:
    return sorted(p.name for p in images.iterdir() if p.name.startswith("."))


def live_processes(text: str) -> list[str]:
    """Command lines holding `text` of processes that are not zombies."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            state = (proc / "stat").read_bytes().rsplit(b")", 1)[1].split()[0]
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError):
            continue
        if text in cmdline and state not in (b"Z", b"X"):
            found.append(cmdline)
    return found
