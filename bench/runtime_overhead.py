"""Benchmark: bare vs `ch-run` vs udocker (P1) vs Apptainer (SIF) on one node, 2 ranks under
MPICH's mpiexec.

Run (root): .venv/bin/python bench/runtime_overhead.py [--repeats 3] [--epochs 3] [--steps 12]

Two measurements, each a 2-rank MPI job started by the host's MPICH (`mpiexec -n 2`):

- start-up: each rank starts Python, imports TensorFlow and Horovod, calls hvd.init() (and checks
  that the world has 2 ranks), then exits; the wall time of the whole `mpiexec`;
- training: `gan3d train`, tiny preset, --epochs E; seconds per epoch (the epochs' train times
  from the results JSON, the first left out: it traces the graph).

The four ways run in interleaved rounds (round r: bare, ch-run, udocker, apptainer, rotated by
r, so a drift in the machine's load falls on all alike); each figure is the median of the repeats
with [min-max]. The image is the MPI pair tests' MPICH image (cached; tests/support/mpi_fixtures.py), as a
directory, paired for this machine's Debian MPICH; the venv's Python, TensorFlow and Horovod and
this checkout are bound in (as tests/slurm does), so only the runtime differs. udocker runs as root
here (the bench's site allows it), with Debian's proot through the kit's wrapper. Apptainer (the
one scripts/apptainer.sh installs, or one on PATH) runs the same tree as a SIF of the kit's
writer (an lz4 SquashFS partition: quick to make), as root. The CPU and the load average are
printed before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.vcluster_overhead import machine  # noqa: E402
from gan3d.simulate import write_files  # noqa: E402
from kit.image import sif  # noqa: E402
from kit.image.convert import convert  # noqa: E402
from kit.image_names import sha256_file  # noqa: E402
from kit.mpi import make_pair, prepare_image_dir  # noqa: E402
from kit.mpi.launch import launcher_now  # noqa: E402
from tests.support.apptainer import INSTALLED  # noqa: E402
from tests.support.hostmpi import MPICH_PACKAGES  # noqa: E402
from tests.support.images import mpi4py_from_venv, oci_image  # noqa: E402

WAYS = ("bare", "ch-run", "udocker", "apptainer")
TAG = "@JOIN-TAG@"
STARTUP = (
    "import tensorflow, horovod.tensorflow as hvd; hvd.init(); "
    "assert hvd.size() == 2, hvd.size(); hvd.shutdown()"
)


def site_file(work: Path, runtime: str) -> Path:
    """site-configs/laptop.yaml (Debian's MPICH, mpiexec) with this runtime and the binds."""
    doc = yaml.safe_load((ROOT / "site-configs" / "laptop.yaml").read_text())
    doc["name"] = f"bench-{runtime}"
    doc["host_mpi"]["env"] = {"UCX_TLS": "self,sm"}  # one node: shared memory only
    base, venv = Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve()
    doc["container"] = {
        "runtime": runtime,
        "image_dir": str(work / "images"),
        "binds": [f"{p}:{p}" for p in sorted({str(ROOT), str(base), str(venv), str(work)})],
        "join": True,
    }
    if runtime == "apptainer":
        doc["container"].pop("join")
        found = str(INSTALLED) if INSTALLED.is_file() else "apptainer"  # else: on PATH
        doc["container"]["apptainer"] = {"executable": found}
    if runtime == "udocker":
        doc["container"].pop("join")
        doc["container"]["udocker"] = {
            "executable": str(Path(sys.executable).parent / "udocker"),
            "dir": str(work / "udocker"),
            "allow_root": True,
            "mode": "P1",
        }
    path = work / f"bench-{runtime}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def sif_of(image: Path) -> Path:
    """The paired directory image as IMAGE.sif, its partition an lz4 SquashFS of the tree."""
    part, out = image.with_name(image.name + ".part"), image.with_name(image.name + ".sif")
    subprocess.run(
        [*("mksquashfs", str(image), str(part)), *("-noappend", "-no-xattrs", "-comp", "lz4")]
        + ["-quiet", "-no-progress"],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    with open(out, "xb") as fh:
        sif.write(
            fh,
            part,
            sha256_file(part),
            definition=sif.definition_text(None),
            labels=sif.labels_json({}, "amd64", None),
            arch=sif.arch_code("amd64"),
            mtime=0,
        )
    part.unlink()
    return out


def prepare(work: Path) -> dict[str, tuple[list[str], dict[str, str]]]:
    """Per way: the words before the rank's command, and the environment it runs in."""
    src = oci_image(
        MPICH_PACKAGES,
        files={"/usr/local/lib/python3.11/dist-packages/mpi4py": mpi4py_from_venv()},
        tag="mpich-system",
    )
    image = work / "images" / "gan3d"
    image.parent.mkdir(parents=True)
    convert(src, image, fmt="dir")
    sites = {w: site_file(work, w) for w in ("charliecloud", "udocker", "apptainer")}
    prepare_image_dir(make_pair(sites["charliecloud"], image), image)
    images = {"charliecloud": image, "udocker": image, "apptainer": sif_of(image)}
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "UCX_TLS": "self,sm",
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "USER": os.environ.get("USER", "root"),  # ch-run wants it
    }
    launch_words, _ = launcher_now(make_pair(sites["charliecloud"], image).site, 2, 1)
    ways = {"bare": (launch_words, env)}
    for way, runtime in (("ch-run", "charliecloud"), ("udocker", "udocker"), ("apptainer",) * 2):
        path = images[runtime]
        pair = make_pair(sites[runtime], path)
        if pair.missing:
            raise SystemExit(f"the image's pair for {runtime} misses {pair.missing}")
        rt = pair.launch.runtime
        rt.ready(pair.site, str(path), "sif" if runtime == "apptainer" else "dir")
        join = ["--join-ct=2", f"--join-tag={TAG}"]  # a new tag for each run: fresh()
        words = [*launch_words, *pair.launch.run_args(str(path), join)]
        ways[way] = (words, {**env, **rt.check_env(pair.site)})
    return ways


def fresh(words: list[str]) -> list[str]:
    """ch-run --join's tag made new for each run (a killed run's segment is never joined)."""
    return [w.replace(TAG, f"bench-{uuid.uuid4().hex}") for w in words]


def timed(argv: list[str], env: dict[str, str], cwd: Path, timeout: float) -> float:
    argv = fresh(argv)
    t0 = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    seconds = time.perf_counter() - t0
    if done.returncode:
        raise SystemExit(
            f"{' '.join(argv[:12])} ...: exit {done.returncode}\n{done.stderr[-3000:]}"
        )
    return seconds


def summary(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=3, help="per training run (the first left out)")
    ap.add_argument("--steps", type=int, default=12, help="steps per epoch (batch 4 per rank)")
    ap.add_argument(
        "--work", type=Path, default=None, help="scratch directory (default: a new one)"
    )
    args = ap.parse_args()
    machine("start")
    work = args.work or Path(tempfile.mkdtemp(prefix="runtime-overhead-", dir=ROOT / "build"))
    work.mkdir(parents=True, exist_ok=True)
    data = write_files(work / "data", 3, 64, seed=5)
    ways = prepare(work)
    run_dir = work / "runs"
    run_dir.mkdir()
    start: dict[str, list[float]] = {w: [] for w in WAYS}
    epoch: dict[str, list[float]] = {w: [] for w in WAYS}
    for r in range(args.repeats):
        order = WAYS[r % len(WAYS) :] + WAYS[: r % len(WAYS)]
        for way in order:
            words, env = ways[way]
            start[way].append(timed([*words, sys.executable, "-c", STARTUP], env, run_dir, 900))
            results = run_dir / f"{way}-{r}.json"
            train = [
                *("-m", "gan3d", "train", "--preset", "tiny", "--batch-size", "4"),
                *("--data", f"{data[0]},{data[1]}", "--validation-data", str(data[2])),
                *("--epochs", str(args.epochs), "--steps-per-epoch", str(args.steps)),
                *("--validation-steps", "1", "--seed", "3", "--results", str(results)),
            ]
            timed([*words, sys.executable, *train], env, run_dir, 1800)
            times = json.loads(results.read_text())["epoch_times"][1:]
            epoch[way].append(statistics.mean(times))
            print(
                f"round {r + 1} {way}: start-up {start[way][-1]:.2f} s, "
                f"epoch {epoch[way][-1]:.2f} s",
                flush=True,
            )
    machine("end")
    print(
        "\n| way | start-up, s: median [min-max] | s per epoch: median [min-max] | epoch vs bare |"
    )
    print("|---|---:|---:|---:|")
    bare = statistics.median(epoch["bare"])
    for way in WAYS:
        over = (statistics.median(epoch[way]) / bare - 1) * 100
        print(
            f"| {way} | {summary(start[way])} | {summary(epoch[way])} | "
            f"{'' if way == 'bare' else f'{over:+.1f}%'} |"
        )
    print(f"\nwork directory: {work}")


if __name__ == "__main__":
    main()
