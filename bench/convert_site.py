"""Benchmark: what `kit image convert --site` costs over a plain conversion.

Run: .venv/bin/python bench/convert_site.py [--reps 3]

The image is the MPI pair tests' Debian bookworm + MPICH OCI archive (built once by buildah
and cached), the site the tests' Intel MPI host (impi-rt, cached). Interleaved, medians, all
to tar.gz: "plain" = convert with the pair's mount point given by hand (no pairing),
"one pass" = convert_paired (the pair decided while the layers stream), "two passes" =
make_pair on the source, then convert with its mount points and links.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kit.image.convert import convert  # noqa: E402
from kit.mpi import convert_paired, make_pair  # noqa: E402
from tests.support import hostmpi as mpi_tests  # noqa: E402
from tests.support.images import mpi4py_from_venv, oci_image  # noqa: E402
from tests.support.rootfs import CACHE  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    src = oci_image(
        mpi_tests.MPICH_PACKAGES,
        files={"/usr/local/lib/python3.11/dist-packages/mpi4py": mpi4py_from_venv()},
        links={f"{mpi_tests.TARGET}/compat/libmpich.so.12": "../lib0/libmpi.so.12"},
        tag="mpich",
    )
    prefix = CACHE / "impi" / mpi_tests.IMPI_VERSION
    if not (prefix / "lib" / "libmpi.so.12").is_file():
        sys.exit(f"{prefix}: run the MPI tests once first (they install impi-rt there)")
    work = Path(tempfile.mkdtemp(prefix="kit-bench-site-"))
    try:
        site = work / "impi-host.yaml"
        site.write_text(yaml.safe_dump(mpi_tests.impi_site_dict(prefix)))
        ways = {
            "plain": lambda o: convert(src, o, mount_points=[f"{mpi_tests.TARGET}/lib0"]),
            "one pass": lambda o: convert_paired(src, o, site),
            "two passes": lambda o: (
                lambda p: convert(src, o, mount_points=p.mount_points, links=p.links)
            )(make_pair(site, src)),
        }
        times: dict[str, list[float]] = {k: [] for k in ways}
        for rep in range(args.reps):
            for name, run in ways.items():
                t0 = time.perf_counter()
                run(work / f"{name.replace(' ', '-')}-{rep}.tar.gz")
                times[name].append(time.perf_counter() - t0)
        print(f"{src.name}: {src.stat().st_size} bytes; load {os.getloadavg()}")
        for name, ts in times.items():
            print(
                f"{name:10s} {[round(t, 2) for t in ts]} median {statistics.median(ts):.2f} s "
                f"({statistics.median(ts) / statistics.median(times['plain']):.2f}x plain)"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
