"""Benchmark: `kit scale predict` checked on real runs of a virtual cluster.

Run (root): .venv/bin/python bench/predict_vcluster.py [--targets 3,6] [--repeats 3] [--target-repeats 2]

Brings up a `kit vcluster` of its own (--name, default `kpred`: the tests' clusters are named
t + 5 hex digits; `up` picks a /24 no interface or route of the host uses, under a host-wide
lock, so a test suite's cluster started beside it gets another), as many nodes as the largest
target count; converts the MPI pair tests' MPICH image for its `vcluster.yaml` site (Intel MPI
runtime as host MPI, srun --mpi=pmi2) as bench/vcluster_overhead.py does; then, as a user would:

1. `kit scale plan --calibrate --nodes 1` (n0, 2n0, 8n0 nodes x 3 repeats; 1, 2, 4 on a cluster of
   fewer than 8 nodes) on the tiny preset,
   each job submitted alone (`kit scale submit --only`, `collect --wait`), so that no two jobs
   share the cores; the repeats of the node counts interleaved, so that a drift in the machine's
   load falls on every count alike;
2. `kit scale predict CAL --nodes TARGETS --out CAL/predict`;
3. `kit scale plan --nodes TARGETS --repeats N` with the same training arguments, run the same way;
4. a table: node count, predicted epoch time and band, the measured epoch times (each repeat,
   median and spread), inside the band or not; beside it, what the best of the saturating shapes
   alone (bandwidth, log, straggler: no per-epoch term) forecasts.

The epoch is one fixed set of showers (2 files x --events) that every node count splits over its
ranks; --events is a multiple of ranks x batch at every count asked, and --steps-per-epoch covers
the whole epoch, so no run's epoch is cut and scaled. The cluster is taken down at the end, also on
failure, Ctrl-C or SIGTERM. Prints the CPU and the load average at the start, before each job and
at the end: the N virtual nodes share this machine's cores, so the node-seconds here grow by the
time-sharing itself, and that is what predict fits.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from vcluster_overhead import _repeat, image_for, on_own_cluster, run  # noqa: E402

from kit.scale import sweep_jobs  # noqa: E402
from kit.scale.model import fit_model  # noqa: E402
from kit.scale.plan import calibration_nodes, load_plan  # noqa: E402
from kit.scale.runs import load_results  # noqa: E402
from kit.vcluster import up  # noqa: E402
from tests.support import hostmpi as mpi_tests  # noqa: E402
from tests.support.rootfs import CACHE  # noqa: E402


def _counts(text: str) -> list[int]:
    return sorted({int(x) for x in text.split(",") if x})


def run_sweep(sweep: Path, deadline: float) -> None:
    """Every run of the plan, one job at a time: repeat 1 of each node count, then repeat 2, ..."""
    order = sorted((_repeat(r.run_id), r.nodes, r.run_id) for r in load_plan(sweep).runs)
    for i, (_, nodes, run_id) in enumerate(order, 1):
        print(
            f"--- job {i}/{len(order)}: {run_id} ({nodes} node(s)); "
            f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}",
            flush=True,
        )
        started = time.monotonic()
        run(["-q", "scale", "submit", str(sweep), "--only", run_id])
        left = max(1.0, deadline - time.monotonic())
        run(
            [
                "-q",
                "scale",
                "collect",
                str(sweep),
                "--wait",
                "--poll",
                "3",
                "--timeout",
                f"{left:.0f}",
            ]
        )
        print(f"    job took {time.monotonic() - started:.0f} s", flush=True)


def measured(sweep: Path) -> dict[int, list[float]]:
    """Epoch seconds per node count, as the report and predict read them."""
    failed: list[str] = []
    if (sweep / "plan.yaml").exists():
        paths = sweep_jobs.results(sweep, failed)
    else:  # a calibration reused with --calibration: its results alone
        paths = sorted((sweep / "results").glob("*.json"))
    for problem in failed:
        print(f"failed run: {problem}", flush=True)
    out: dict[int, list[float]] = {}
    for r in load_results(paths):
        out.setdefault(r.nodes, []).append(r.epoch_seconds)
    return out


def fitted_whole(calibration: dict[int, list[float]], ranks_per_node: int, nodes: int) -> str:
    """What the calibration's wall epochs fitted whole forecast (as results without step times
    are fitted), beside the forecast of the parts fitted apart."""
    counts = sorted(calibration)
    model = fit_model(counts, [calibration[n] for n in counts], ranks_per_node)
    return f"{model.seconds(nodes):.2f} ({model.best.name})"


def band_shapes(model: dict) -> str:
    parts = [model["step"]] + ([model["per_epoch"]] if model["per_epoch"] else [])
    return "; ".join(f"{p['fitted']}: {', '.join(p['band_shapes'])}" for p in parts)


def drivers(forecast: dict) -> str:
    """steps / per-epoch shares of the forecast epoch, and the step's overhead."""
    if forecast["steps_seconds"] is None:
        return "- (fitted whole)"
    t = forecast["seconds_per_epoch"]
    return (
        f"{100 * forecast['steps_seconds'] / t:.0f}% / {100 * forecast['per_epoch_seconds'] / t:.0f}%, "
        f"step {forecast['step_overhead_percent']:+.0f}%"
    )


def table(
    prediction: dict, check: dict[int, list[float]], calibration: dict[int, list[float]]
) -> str:
    lines = [
        "| nodes | role | predicted s/epoch [band] | measured s/epoch (repeats) | median | spread | inside | "
        "steps / per-epoch | the epoch fitted whole |",
        "|---:|---|---:|---|---:|---:|---|---|---:|",
    ]
    for n, times in sorted(calibration.items()):
        med = statistics.median(times)
        lines.append(
            f"| {n} | calibration | - | {', '.join(f'{t:.2f}' for t in times)} | {med:.2f} | "
            f"{100 * (max(times) - min(times)) / med:.0f}% | - | - | - |"
        )
    for f in prediction["forecasts"]:
        n, (low, high) = f["nodes"], f["seconds_band"]
        times = check.get(n, [])
        if not times:
            lines.append(
                f"| {n} | check | {f['seconds_per_epoch']:.2f} [{low:.2f}-{high:.2f}] | no run | - | - | - | "
                f"{drivers(f)} | {fitted_whole(calibration, prediction['ranks_per_node'], n)} |"
            )
            continue
        med = statistics.median(times)
        inside = sum(low <= t <= high for t in times)
        lines.append(
            f"| {n} | check | {f['seconds_per_epoch']:.2f} [{low:.2f}-{high:.2f}] | "
            f"{', '.join(f'{t:.2f}' for t in times)} | {med:.2f} | "
            f"{100 * (max(times) - min(times)) / med:.0f}% | median {'yes' if low <= med <= high else 'NO'}, "
            f"{inside} of {len(times)} runs | {drivers(f)} | "
            f"{fitted_whole(calibration, prediction['ranks_per_node'], n)} |"
        )
    return "\n".join(lines)


def measure(args: argparse.Namespace, work: Path, cluster: Path) -> None:
    base, venv = Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve()
    binds = tuple(sorted({f"{p}:{p}" for p in (ROOT, base, venv, work)}))
    impi = CACHE / "impi" / mpi_tests.IMPI_VERSION
    if not (impi / "lib" / "libmpi.so.12").is_file():
        raise SystemExit(
            f"no Intel MPI runtime in {impi}: run tests/mpi once (its impi_prefix fixture installs it)"
        )
    size = max(args.targets)
    report = up(cluster, size, args.name, intel_mpi=impi, binds=binds)
    print(f"cluster {report.state.name}: {size} nodes on {report.state.subnet}", flush=True)
    os.environ["SLURM_CONF"] = str(report.state.conf)
    site = cluster / "vcluster.yaml"
    image = image_for(site)

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
        "--steps-per-epoch",
        str(2 * args.events // args.batch_size),
        "--validation-steps",
        "2",
        "--seed",
        "3",
    ]
    common = [
        "--site",
        str(site),
        "--image",
        str(image),
        "--ranks-per-node",
        "1",
        "--python",
        sys.executable,
        "--walltime",
        "00:20:00",
    ]
    deadline = time.monotonic() + args.timeout
    cal, check = work / "calibration", work / "check"
    if args.calibration:  # a finished calibration of an earlier run: its results, not its jobs
        (cal / "results").mkdir(parents=True)
        for result in (args.calibration / "results").glob("*.json"):
            (cal / "results" / result.name).write_bytes(result.read_bytes())
    else:
        run(
            [
                "scale",
                "plan",
                *common,
                "--calibrate",
                "--nodes",
                "1",
                "--repeats",
                str(args.repeats),
                "--dir",
                str(cal),
                "--",
                *train,
            ]
        )
        run_sweep(cal, deadline)
    targets = ",".join(map(str, args.targets))
    results = [str(p) for p in sorted((cal / "results").glob("*.json"))]
    run(
        [
            "scale",
            "predict",
            "--results",
            *results,
            "--nodes",
            targets,
            "--out",
            str(cal / "predict"),
        ]
    )
    doc = json.loads((cal / "predict" / "predict.json").read_text())
    if len(doc["series"]) != 1:
        raise SystemExit(
            f"expected one series, predict found {len(doc['series'])}: {doc['left_out']}"
        )
    run(
        [
            "scale",
            "plan",
            *common,
            "--nodes",
            targets,
            "--repeats",
            str(args.target_repeats),
            "--dir",
            str(check),
            "--",
            *train,
        ]
    )
    run_sweep(check, deadline)
    tabulate(work)


def tabulate(work: Path) -> None:
    """The prediction beside the runs at its counts, from a run's files (--tabulate: again,
    later).
    """
    cal, check = work / "calibration", work / "check"
    prediction = json.loads((cal / "predict" / "predict.json").read_text())["series"][0]
    print(
        f"\nseries {prediction['series']}; estimate {prediction['model']['estimate']}, "
        f"band {band_shapes(prediction['model'])}; stack: {prediction['stack']}"
    )
    for w in prediction["warnings"]:
        print(f"warning: {w}")
    print(f"next: {prediction['suggestion']}\n")
    print(table(prediction, measured(check), measured(cal)), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--targets",
        type=_counts,
        default=[3, 6],
        help="node counts to forecast and then run (the cluster has as many nodes as the largest)",
    )
    ap.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="of each calibration count (kit scale plan --calibrate's)",
    )
    ap.add_argument("--target-repeats", type=int, default=2)
    ap.add_argument(
        "--epochs", type=int, default=2, help="the first traces the step and is left out"
    )
    ap.add_argument(
        "--events",
        type=int,
        default=96,
        help="showers per file (2 training files): 2 x events a multiple of ranks x batch at every count",
    )
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--batch-size", type=int, default=4, help="per rank")
    ap.add_argument("--name", default="kpred", help="the cluster's name (1-8 letters and digits)")
    ap.add_argument(
        "--dir",
        type=Path,
        default=ROOT / "build" / "vc-predict",
        help="a fresh run directory is made under it",
    )
    ap.add_argument("--timeout", type=float, default=5400, help="seconds for all jobs together")
    ap.add_argument(
        "--calibration",
        type=Path,
        metavar="DIR",
        help="reuse the calibration sweep DIR of an earlier run (its results/*.json): "
        "only the check runs run",
    )
    ap.add_argument(
        "--tabulate",
        type=Path,
        metavar="WORKDIR",
        help="print the table of a finished run again; run nothing",
    )
    args = ap.parse_args()
    if args.tabulate:
        return tabulate(args.tabulate)
    if os.geteuid() != 0:
        raise SystemExit("the virtual cluster needs root")
    counts = sorted(
        {*calibration_nodes(1, max(args.targets)), *args.targets}
    )  # what the sweeps will run
    uneven = [n for n in counts if (2 * args.events) % (n * args.batch_size)]
    if uneven:
        raise SystemExit(
            f"--events {args.events}: 2 x {args.events} showers do not split into whole batches of "
            f"{args.batch_size} over {uneven} rank(s); fix: a multiple of their batches"
        )
    on_own_cluster(
        args.dir, lambda work, cluster: measure(args, work, cluster), "runs, logs and predictions"
    )


if __name__ == "__main__":
    main()
