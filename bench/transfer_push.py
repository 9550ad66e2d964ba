"""Benchmark: `kit transfer push` vs `scp` of the same 1 GB random file over a loopback sshd.

Run: .venv/bin/python bench/transfer_push.py [--size-mb 1024] [--reps 5] [--cipher NAME] [--buffered]

Each transfer gets a freshly started sshd (tests/transfer/sshd.py) and an empty remote dir,
so its CPU time (client + sshd + remote processes, from getrusage once sshd has exited) can
be counted as well as its wall time; the tools alternate, back to back. Without --cipher
every tool uses its own default (scp: OpenSSH's, chacha20-poly1305; kit: AES-GCM first when
the CPU has AES instructions and ~/.ssh/config names no Ciphers); with --cipher both are
forced to that cipher through the shared ssh config. The image has its IMAGE.sha256 sibling
as `kit image convert` writes it; the push is fully verified (the receiver hashes every
byte, makes the file durable and renames only on a sha256 match). The receiver writes with
O_DIRECT where the filesystem allows it; --buffered measures the page-cache path instead.
"kit" times the library call, "kit-cli" the `python -m kit transfer push` command including
interpreter start and imports.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kit.image_names import sha256_file  # noqa: E402
from kit.transfer import push  # noqa: E402
from tests.transfer.sshd import start_sshd  # noqa: E402


def cpu_seconds() -> float:
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        r = resource.getrusage(who)
        total += r.ru_utime + r.ru_stime
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument(
        "--cipher", default=None, help="force this cipher for both, e.g. aes128-gcm@openssh.com"
    )
    ap.add_argument("--tools", default="scp,kit,kit-cli")
    ap.add_argument("--buffered", action="store_true", help="kit's receiver without O_DIRECT")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kit-bench-transfer-"))
    try:
        img = work / "bench.tar.gz"
        h = hashlib.sha256()
        with open(img, "wb") as fh:
            for _ in range(args.size_mb):
                block = os.urandom(1 << 20)
                h.update(block)
                fh.write(block)
        (work / "bench.tar.gz.sha256").write_text(f"{h.hexdigest()}  bench.tar.gz\n")
        size = img.stat().st_size
        remote = work / "remote"
        home = work / "home"
        base = yaml.safe_load((ROOT / "site-configs" / "laptop.yaml").read_text())
        site = work / "bench-site.yaml"
        site.write_text(
            yaml.safe_dump(
                dict(
                    base,
                    name="bench",
                    transfer=dict(
                        base["transfer"],
                        host="bench-sshd",
                        user=None,
                        port=22,
                        image_dir=str(remote),
                    ),
                )
            )
        )

        def run(tool: str) -> tuple[float, float]:
            shutil.rmtree(remote, ignore_errors=True)
            remote.mkdir()
            server = start_sshd(work / "sshd")
            extra = f"  Ciphers {args.cipher}\n" if args.cipher else ""
            cfg = server.write_ssh_config(home / ".ssh" / "config", alias="bench-sshd", extra=extra)
            subprocess.run(["sync"], check=True)
            cpu0, t0 = cpu_seconds(), time.perf_counter()
            if tool == "scp":
                subprocess.run(
                    ["scp", "-q", "-F", str(cfg), str(img), f"bench-sshd:{remote}/bench.tar.gz"],
                    check=True,
                )
            elif tool == "kit":
                report = push(img, site, ssh_config=cfg, direct_io=not args.buffered)
                assert report.bytes_sent == size and report.direct_io is not args.buffered, report
            else:
                io = "--no-direct-io" if args.buffered else "--direct-io"
                subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "kit",
                        "transfer",
                        "push",
                        str(img),
                        "--site",
                        str(site),
                        io,
                    ],
                    check=True,
                    cwd=ROOT,
                    env=dict(os.environ, HOME=str(home)),
                    stdout=subprocess.DEVNULL,
                )
            wall = time.perf_counter() - t0
            deadline = time.monotonic() + 10  # let the session processes exit and be reaped,
            while (
                time.monotonic() < deadline
                and subprocess.run(  # then stop sshd: their CPU
                    ["pgrep", "-P", str(server.proc.pid)], capture_output=True
                ).returncode
                == 0
            ):
                time.sleep(0.05)  # time reaches us through its getrusage once it has exited
            server.stop()
            cpu = cpu_seconds() - cpu0
            got = sha256_file(remote / "bench.tar.gz")
            assert got == h.hexdigest(), f"{tool}: remote copy differs"
            return wall, cpu

        tools = args.tools.split(",")
        walls: dict[str, list[float]] = {t: [] for t in tools}
        cpus: dict[str, list[float]] = {t: [] for t in tools}
        for _ in range(args.reps):  # interleaved, back to back
            for tool in tools:
                wall, cpu = run(tool)
                walls[tool].append(wall)
                cpus[tool].append(cpu)
        print(
            f"file: {size} bytes; cipher: {args.cipher or 'each tool its default'}; "
            f"kit receiver: {'buffered' if args.buffered else 'O_DIRECT'}; "
            f"load before/after: {os.getloadavg()}"
        )
        rate = {t: size / statistics.median(walls[t]) / 1e6 for t in tools}
        for t in tools:
            print(
                f"{t:8s} wall {[round(x, 2) for x in walls[t]]} median "
                f"{statistics.median(walls[t]):.2f} s = {rate[t]:.0f} MB/s; "
                f"CPU s {[round(x, 2) for x in cpus[t]]} median {statistics.median(cpus[t]):.2f}"
            )
        for t in tools:
            if t != "scp" and "scp" in rate:
                print(
                    f"{t}/scp throughput ratio (median wall): {rate[t] / rate['scp']:.2f}; "
                    f"CPU ratio scp/{t}: {statistics.median(cpus['scp']) / statistics.median(cpus[t]):.2f}"
                )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
