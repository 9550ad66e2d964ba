"""Benchmark ``kit image convert`` against the public-tool pipeline that makes the same
Charliecloud tarball: ``skopeo copy docker-archive: oci:`` + ``umoci raw unpack --rootless``
+ ``tar -czf``. Runs both back to back, alternating, and prints wall time, peak RSS (per
process tree, GNU time's %M which includes reaped children), output size and the ratios.
Then converts a ~2 GB image while sampling RSS to show memory stays flat.

    .venv/bin/python bench/image_convert.py [--reps 3] [--skip-big]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from image_inputs import big_image, debian_image  # noqa: E402

KIT = [sys.executable, "-m", "kit", "image", "convert"]


def timed(cmds: list[list[str]], cwd: Path) -> tuple[float, int, float]:
    """Wall seconds of the sequence, the largest peak RSS (bytes) of any step, CPU seconds."""
    peak, cpu, start = 0, 0.0, time.perf_counter()
    for cmd in cmds:
        stats = cwd / "time.txt"
        subprocess.run(
            ["/usr/bin/time", "-f", "%M %U %S", "-o", str(stats), *cmd],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=cwd,
        )
        rss_kb, user, sys_s = stats.read_text().split()[-3:]
        peak, cpu = max(peak, int(rss_kb) * 1024), cpu + float(user) + float(sys_s)
    return time.perf_counter() - start, peak, cpu


def peer(src: Path, work: Path) -> tuple[float, int, float, int]:
    for p in ("oci", "root", "peer.tar.gz"):
        shutil.rmtree(work / p, ignore_errors=True) if (work / p).is_dir() else (work / p).unlink(
            missing_ok=True
        )
    wall, rss, cpu = timed(
        [
            ["skopeo", "copy", "-q", f"docker-archive:{src}", f"oci:{work}/oci:img"],
            [
                "umoci",
                "raw",
                "unpack",
                "--rootless",
                "--image",
                f"{work}/oci:img",
                str(work / "root"),
            ],
            ["tar", "-czf", str(work / "peer.tar.gz"), "-C", str(work / "root"), "."],
        ],
        work,
    )
    return wall, rss, cpu, (work / "peer.tar.gz").stat().st_size


def kit(src: Path, work: Path, *extra: str) -> tuple[float, int, float, int]:
    out = work / "kit.tar.gz"
    wall, rss, cpu = timed([[*KIT, str(src), str(out), *extra]], work)
    return wall, rss, cpu, out.stat().st_size


def flat_memory(src: Path, work: Path) -> dict:
    """Convert the big image while sampling RSS every 0.25 s."""
    out = work / "big.tar.gz"
    proc = subprocess.Popen([*KIT, str(src), str(out), "--level", "1"], stdout=subprocess.DEVNULL)
    samples: list[tuple[float, int]] = []
    ps = psutil.Process(proc.pid)
    start = time.perf_counter()

    def sample() -> None:
        while proc.poll() is None:
            try:
                samples.append((time.perf_counter() - start, ps.memory_info().rss))
            except psutil.NoSuchProcess:
                break
            time.sleep(0.25)

    t = threading.Thread(target=sample)
    t.start()
    proc.wait()
    t.join()
    wall = time.perf_counter() - start
    if proc.returncode:
        raise SystemExit("big conversion failed")
    quart = [max(r for s, r in samples if s <= wall * q / 4) for q in (1, 2, 3, 4)]
    return {
        "input_bytes": src.stat().st_size,
        "output_bytes": out.stat().st_size,
        "wall_s": round(wall, 2),
        "rss_max_by_quarter_MB": [round(r / 2**20) for r in quart],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--skip-big", action="store_true")
    args = ap.parse_args()
    src = debian_image()
    load_before = os.getloadavg()
    rows = {"peer": [], "kit": []}
    with tempfile.TemporaryDirectory(dir=src.parent) as tmp:
        work = Path(tmp)
        for _ in range(args.reps):
            rows["peer"].append(peer(src, work))
            rows["kit"].append(kit(src, work))
        med = {k: [statistics.median(r[i] for r in v) for i in range(4)] for k, v in rows.items()}
        result = {
            "input": str(src),
            "input_bytes": src.stat().st_size,
            "reps": args.reps,
            "load_before": [round(x, 2) for x in load_before],
            "load_after": [round(x, 2) for x in os.getloadavg()],
            "cpus": os.cpu_count(),
            **{
                k: {
                    "wall_s": round(m[0], 2),
                    "peak_rss_MB": round(m[1] / 2**20),
                    "cpu_s": round(m[2], 2),
                    "output_bytes": m[3],
                }
                for k, m in med.items()
            },
            "all_walls": {k: [round(r[0], 2) for r in v] for k, v in rows.items()},
        }
        result["speedup_wall"] = round(med["peer"][0] / med["kit"][0], 2)
        result["speedup_cpu"] = round(med["peer"][2] / med["kit"][2], 2)
        result["size_ratio"] = round(med["kit"][3] / med["peer"][3], 4)
        if not args.skip_big:
            result["big"] = flat_memory(big_image(), work)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
