"""Benchmark: container vs bare, the same sweep on a 2-node virtual cluster.

Run (root): .venv/bin/python bench/vcluster_overhead.py [--repeats 3] [--epochs 3] [--events 64]

Brings up a 2-node `kit vcluster` of its own (--name, --dir under build/; `down` at the end, also on
failure, Ctrl-C or SIGTERM), converts the MPI pair tests' MPICH image for its `vcluster.yaml` site
(Intel MPI runtime as host MPI, srun --mpi=pmi2), writes synthetic showers, plans the same sweep
(1 and 2 nodes x 1 rank per node, tiny preset) once with `--image` and once with `--no-container`,
and submits the runs ONE AT A TIME through Slurm, alternating container and bare (ABBA per repeat,
so a drift in the machine's load falls on both alike and no two jobs share the cores). Then
`kit scale report` over both with `--reference table8` and `table9`; prints the CPU and the load
average at the start and the end.

Bare jobs get the same host MPI as the container's: the venv's mpi4py and Horovod link
libmpich.so.12, so the bare site config puts a libmpich.so.12 -> Intel's libmpi.so.12 alias first
on LD_LIBRARY_PATH (what the image's compat link does inside, and what a site's MPI module does for
its own Python); its name stays the container config's, so the report pairs the two series.

The image and the Intel MPI prefix are the tests' cached parts (tests.support.hostmpi,
tests.support.images): a bench script may import them; the kit itself never does.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kit.cli import main as kit_main  # noqa: E402
from kit.mpi import convert_paired  # noqa: E402
from kit.scale.plan import load_plan  # noqa: E402
from kit.site import load_site  # noqa: E402
from kit.vcluster import down, up  # noqa: E402
from tests.support import hostmpi as mpi_tests  # noqa: E402
from tests.support.images import mpi4py_from_venv, oci_image  # noqa: E402
from tests.support.rootfs import CACHE  # noqa: E402

WATCHED_FLAGS = (
    "avx2",
    "fma",
    "avx512f",
    "avx512_bf16",
    "avx512_vnni",
    "amx_bf16",
    "amx_tile",
    "hypervisor",
)


def machine(when: str) -> None:
    """The CPU the figures belong to and how busy the machine was: the VM's CPU changes between
    boots.
    """
    info = Path("/proc/cpuinfo").read_text()
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in info.splitlines()
            if line.startswith("model name")
        ),
        "?",
    )
    flags = set(
        next(
            (
                line.split(":", 1)[1].split()
                for line in info.splitlines()
                if line.startswith("flags")
            ),
            [],
        )
    )
    shown = " ".join(f for f in WATCHED_FLAGS if f in flags)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"[{when}] {datetime.now(timezone.utc):%Y-%m-%d %H:%M:%S} UTC; {os.cpu_count()} CPUs, {model}; "
        f"flags: {shown}; load average {load}",
        flush=True,
    )


def image_for(site: Path) -> Path:
    """The MPICH test image, paired with the site and converted to SquashFS, with the .current link
    `kit transfer push --install` would leave."""
    src = oci_image(
        mpi_tests.MPICH_PACKAGES,
        files={"/usr/local/lib/python3.11/dist-packages/mpi4py": mpi4py_from_venv()},
        links={f"{mpi_tests.TARGET}/compat/libmpich.so.12": "../lib0/libmpi.so.12"},
        tag="mpich",
    )
    images = Path(load_site(str(site)).container.image_dir)
    images.mkdir(parents=True, exist_ok=True)
    done = convert_paired(src, images / "gan3d.sqfs", site)
    if done.pair.missing:
        raise SystemExit(f"the image's pair misses {done.pair.missing}")
    (images / "gan3d.current").symlink_to("gan3d.sqfs")
    return images / "gan3d.sqfs"


def bare_site(site: Path, impi: Path, work: Path) -> Path:
    """The container site's config with the host Intel MPI first on LD_LIBRARY_PATH under the name
    the venv's MPI modules were linked with (libmpich.so.12): the same MPI library both ways."""
    compat = work / "bare-mpi"
    compat.mkdir()
    (compat / "libmpich.so.12").symlink_to(impi / "lib" / "libmpi.so.12")
    doc = yaml.safe_load(site.read_text())
    doc["host_mpi"]["env"]["LD_LIBRARY_PATH"] = f"{compat}:{impi / 'lib'}"
    out = work / "vcluster-bare.yaml"
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    return out


def _repeat(run_id: str) -> int:
    """n2-r1-t2-x3 -> 3 (a plan without repeats: 1)."""
    _, sep, tail = run_id.rpartition("-x")
    return int(tail) if sep and tail.isdigit() else 1


def interleaved(runs: dict[str, list[tuple[int, int, str]]]) -> list[tuple[str, str]]:
    """(way, run id), one job at a time, repeat by repeat and node count by node count: both ways
    back to back, the way that goes first alternating (ABBA), so that a drift in the machine's load
    falls on both alike."""
    out, counts = [], sorted({nodes for _, nodes, _ in runs["container"]})
    for c, b in zip(runs["container"], runs["bare"]):
        assert c == b, (c, b)  # the same sweep both ways
        # each node count alternates across the repeats, and they with each other
        repeat, nodes, run_id = c
        ways = (
            ("container", "bare") if (repeat + counts.index(nodes)) % 2 else ("bare", "container")
        )
        out += [(way, run_id) for way in ways]
    return out


def run(argv: list[str]) -> None:
    print("$ kit " + " ".join(argv), flush=True)
    code = kit_main(argv)
    if code != 0:
        raise SystemExit(f"kit {' '.join(a for a in argv[:3] if a != '-q')} failed (exit {code})")


def measure(args: argparse.Namespace, work: Path, cluster: Path) -> None:
    base, venv = Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve()
    binds = tuple(sorted({f"{p}:{p}" for p in (ROOT, base, venv)}))
    impi = CACHE / "impi" / mpi_tests.IMPI_VERSION
    if not (impi / "lib" / "libmpi.so.12").is_file():
        raise SystemExit(
            f"no Intel MPI runtime in {impi}: run tests/mpi once (its impi_prefix fixture installs it)"
        )
    report = up(cluster, 2, args.name, intel_mpi=impi, binds=binds)
    os.environ["SLURM_CONF"] = str(report.state.conf)
    site = cluster / "vcluster.yaml"
    image = image_for(site)
    bare = bare_site(site, impi, work)

    from gan3d.simulate import write_files

    data = write_files(work / "data", 3, args.events, seed=5)
    train = [
        "--data",
        f"{data[0]},{data[1]}",
        "--validation-data",
        str(data[2]),
        "--preset",
        args.preset,
        "--batch-size",
        str(args.batch_size),
        "--epochs",
        str(args.epochs),
        "--validation-steps",
        "2",
        "--seed",
        "3",
    ]
    sweeps = {"container": work / "sweep-container", "bare": work / "sweep-bare"}
    common = [
        "--nodes",
        "1,2",
        "--ranks-per-node",
        "1",
        "--repeats",
        str(args.repeats),
        "--python",
        sys.executable,
        "--walltime",
        "00:30:00",
    ]
    run(
        [
            "scale",
            "plan",
            "--site",
            str(site),
            "--image",
            str(image),
            *common,
            "--dir",
            str(sweeps["container"]),
            "--",
            *train,
        ]
    )
    run(
        [
            "scale",
            "plan",
            "--site",
            str(bare),
            "--no-container",
            *common,
            "--dir",
            str(sweeps["bare"]),
            "--",
            *train,
        ]
    )

    order = interleaved(
        {
            way: sorted((_repeat(r.run_id), r.nodes, r.run_id) for r in load_plan(d).runs)
            for way, d in sweeps.items()
        }
    )
    deadline = time.monotonic() + args.timeout
    for i, (way, run_id) in enumerate(order, 1):
        print(
            f"--- job {i}/{len(order)}: {run_id} {way}; load average {os.getloadavg()[0]:.2f}",
            flush=True,
        )
        run(["-q", "scale", "submit", str(sweeps[way]), "--only", run_id])
        left = max(1.0, deadline - time.monotonic())
        run(
            [
                "-q",
                "scale",
                "collect",
                str(sweeps[way]),
                "--wait",
                "--poll",
                "3",
                "--timeout",
                f"{left:.0f}",
            ]
        )

    bare_results = sorted(str(p) for p in (sweeps["bare"] / "results").glob("*.json"))
    for table in ("table8", "table9"):
        out = work / f"report-{table}"
        run(
            [
                "scale",
                "report",
                str(sweeps["container"]),
                "--results",
                *bare_results,
                "--reference",
                table,
                "--out",
                str(out),
            ]
        )
        print((out / "report.md").read_text(), flush=True)


def _interrupted(signum, frame) -> None:
    """SIGTERM as Ctrl-C: the finally clause takes the cluster down."""
    raise KeyboardInterrupt(f"signal {signum}")


def on_own_cluster(directory: Path, measure, outputs: str) -> None:
    """measure(WORK, CLUSTER) in a new timestamped WORK under DIRECTORY, the machine described before
    and after, and the cluster it brings up at CLUSTER taken down however it ends (Ctrl-C, SIGTERM)."""
    os.environ.setdefault(
        "PYTHONPATH", str(ROOT)
    )  # the jobs' Python imports gan3d from this checkout
    work = directory.absolute() / datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    work.mkdir(parents=True)
    cluster = work / "cluster"
    signal.signal(signal.SIGTERM, _interrupted)
    machine("start")
    try:
        measure(work, cluster)
    finally:
        if cluster.is_dir():  # nothing recorded there: down does nothing
            down(cluster)
        machine("end")
        print(f"{outputs}: {work}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--epochs", type=int, default=3, help="the first traces the step and is left out"
    )
    ap.add_argument(
        "--events", type=int, default=64, help="showers per file (2 training files, 1 validation)"
    )
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--batch-size", type=int, default=4, help="per rank")
    ap.add_argument("--name", default="kovh", help="the cluster's name (1-8 letters and digits)")
    ap.add_argument(
        "--dir",
        type=Path,
        default=ROOT / "build" / "vc-overhead",
        help="a fresh run directory is made under it",
    )
    ap.add_argument("--timeout", type=float, default=5400, help="seconds for all jobs together")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("the virtual cluster needs root")
    on_own_cluster(
        args.dir, lambda work, cluster: measure(args, work, cluster), "runs, logs and reports"
    )


if __name__ == "__main__":
    main()
