"""Benchmark: `kit transfer push` vs `scp` of the same 1 GB random file over loopback sshd.

Run: .venv/bin/python bench/transfer_push.py [--size-mb 1024] [--reps 3] [--cipher NAME]

Both tools go to the same sshd (started here, tests/transfer/sshd.py) with the same
ssh config; with --cipher both are forced to that cipher, else both use OpenSSH's default.
The image has its IMAGE.sha256 sibling, as `kit image convert` writes it; the push still
re-hashes the file locally (overlapped with sending) and the remote verifies the full
sha256 before renaming into place. Each push starts from an empty remote dir.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kit.site import load_site  # noqa: E402
from kit.transfer import push  # noqa: E402
from tests.transfer.sshd import start_sshd  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--cipher", default=None, help="e.g. aes128-gcm@openssh.com (both tools)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kit-bench-transfer-"))
    server = start_sshd(work / "sshd")
    try:
        extra = f"  Ciphers {args.cipher}\n" if args.cipher else ""
        cfg = server.write_ssh_config(work / "ssh_config", alias="127.0.0.1", extra=extra)
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
        site = load_site("laptop")
        site = dataclasses.replace(site, transfer=dataclasses.replace(
            site.transfer, host="127.0.0.1", port=server.port, user="root", image_dir=str(remote)))

        def fresh() -> None:
            shutil.rmtree(remote, ignore_errors=True)
            remote.mkdir()
            subprocess.run(["sync"], check=True)

        def run_scp() -> float:
            fresh()
            t = time.perf_counter()
            subprocess.run(["scp", "-q", "-F", str(cfg), str(img), f"127.0.0.1:{remote}/bench.tar.gz"], check=True)
            return time.perf_counter() - t

        def run_kit() -> float:
            fresh()
            t = time.perf_counter()
            report = push(img, site, ssh_config=cfg)
            elapsed = time.perf_counter() - t
            assert report.bytes_sent == size, report
            return elapsed

        times: dict[str, list[float]] = {"scp": [], "kit": []}
        for _ in range(args.reps):  # interleaved, back to back
            times["scp"].append(run_scp())
            times["kit"].append(run_kit())
        med = {k: statistics.median(v) for k, v in times.items()}
        mbps = {k: size / v / 1e6 for k, v in med.items()}
        print(f"file: {size} bytes; cipher: {args.cipher or 'OpenSSH default'}; load: {os.getloadavg()}")
        for k in ("scp", "kit"):
            print(f"{k:4s} times {[round(x, 2) for x in times[k]]} median {med[k]:.2f} s = {mbps[k]:.0f} MB/s")
        print(f"kit/scp throughput ratio: {mbps['kit'] / mbps['scp']:.2f}")
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
