"""The example report in docs/example-report/, made by the current code from two sources:

    .venv/bin/python bench/example_report.py [--out docs/example-report] [--paper-only]
        [--repeats 3] [--work DIR]

paper/  the seed paper's Table 4 (4 ranks x 12 threads per node, host Intel MPI, 4-768 nodes) as
        results files, with Table 7's FLOP rates of the same set-up, reported with --reference
        table4. Deterministic: tests/scale/test_example_report.py regenerates it and compares.
laptop/ real runs on this machine (site `laptop`, one node): the tiny preset on simulated showers
        in two layouts (1 rank x 2 threads, 2 ranks x 1 thread) under MPICH's mpiexec, each run
        --repeats times, each run's final checkpoint scored by `gan3d validate` as
        `kit scale plan --validate` does in a job. Measured: it changes from run to run.

Each paper row is one results file: its two epochs both took the printed time; showers/s is the
paper's epoch (180,000 showers, PAPER_EPOCH_EVENTS) over that time; the batch per rank (8) is not
printed in the paper and only names the series. Nothing in the paper's part is measured here.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.progress import Progress

from gan3d import results as res
from gan3d.cpu import describe
from gan3d.peak import site_peaks
from kit.scale import load_results, write_report
from kit.scale.paper import PAPER_EPOCH_EVENTS, PAPER_PRESET, TABLES
from kit.scale.tune import local_launcher
from kit.site import load_site

PAPER_BATCH_PER_RANK = 8  # not printed in the paper: only names the series
# the host Intel MPI of Table 4 (vendor: the series key)
PAPER_MPI = "Intel(R) MPI Library 2019 for Linux* OS"
LAYOUTS = ((1, 2), (2, 1))  # ranks x threads on the laptop's 2 cores
TRAIN = ("--preset", "tiny", "--batch-size", "4", "--epochs", "3", "--seed", "3")
RUN_TIMEOUT = 1800  # seconds per training or validation on a loaded 2-core machine


def paper_results(out: Path) -> list[Path]:
    """Table 4's times with Table 7's FLOP rates as gan3d-run results files, one per node count."""
    times, flops = TABLES["table4"], TABLES["table7"]
    assert times.nodes == flops.nodes, "Tables 4 and 7 are the same set-up at the same node counts"
    site = load_site(times.site)
    paths = []
    for nodes, seconds, pflops in zip(times.nodes, times.seconds_per_epoch, flops.pflop_per_second):
        ranks = nodes * times.ranks_per_node
        rate = pflops * 1e15
        record = {
            "status": "ok",
            "site": site.name,
            "container": "charliecloud",
            "image_digest": None,
            "mpi_library_version": PAPER_MPI,
            "nodes": nodes,
            "ranks": ranks,
            "ranks_per_node": times.ranks_per_node,
            "threads_per_rank": times.threads_per_rank,
            "preset": PAPER_PRESET,
            "train_events": PAPER_EPOCH_EVENTS,
            "precision": "fp32",
            "batch_per_rank": PAPER_BATCH_PER_RANK,
            "global_batch": PAPER_BATCH_PER_RANK * ranks,
            "epochs": 2,
            "epoch_times": [seconds, seconds],
            "epoch_wall_times": [seconds, seconds],
            "epoch_step_seconds": None,
            "full_epoch_seconds_estimate": None,  # the paper gives no step-only time
            "showers_per_second": PAPER_EPOCH_EVENTS / seconds,
            "flop_per_second": rate,
            **res.peak_fields(
                rate, "fp32", nodes, node_peaks=site_peaks(site), measured={}, measured_basis=""
            ),
            "source": f"seed paper Table 4 (time per epoch) and Table 7 (PFLOP/s), {nodes} nodes",
        }
        paths.append(res.write_results(out / f"n{nodes}.json", record))
    return paths


def laptop_runs(work: Path, repeats: int, progress: Progress) -> list[Path]:
    """Real trainings and validations on this machine; the results files of those that finished.
    A run whose results already hold a physics score (an earlier call with the same --work) is kept."""
    from gan3d.simulate import write_files

    data = sorted((work / "data").glob("*.h5")) or write_files(work / "data", 3, 128, seed=5)
    check = (sorted((work / "check").glob("*.h5")) or write_files(work / "check", 1, 600, seed=11))[
        0
    ]
    launcher = local_launcher(load_site("laptop"))
    runs = [(r, t, i) for r, t in LAYOUTS for i in range(1, repeats + 1)]
    task = progress.add_task("laptop runs", total=len(runs))
    done = []
    for ranks, threads, i in runs:
        run_id = f"n1-r{ranks}-t{threads}-x{i}"
        results, checkpoints = work / "results" / f"{run_id}.json", work / "checkpoints" / run_id
        if results.exists() and "physics" in json.loads(results.read_text()):
            done.append(results)
            progress.advance(task)
            continue
        progress.update(task, description=f"training {run_id}")
        ok = _run(
            [
                *launcher,
                "-n",
                str(ranks),
                sys.executable,
                "-m",
                "gan3d",
                "train",
                "--site",
                "laptop",
                "--data",
                f"{data[0]},{data[1]}",
                "--validation-data",
                str(data[2]),
                *TRAIN,
                "--threads",
                str(threads),
                "--checkpoint-dir",
                str(checkpoints),
                "--results",
                str(results),
            ],
            work / "logs" / f"{run_id}.out",
        )
        if ok:
            progress.update(task, description=f"validating {run_id}")
            _run(
                [
                    *launcher,
                    "-n",
                    "1",
                    sys.executable,
                    "-m",
                    "gan3d",
                    "validate",
                    "--checkpoint",
                    str(checkpoints),
                    "--data",
                    str(check),
                    "--out",
                    str(results.with_suffix(".physics")),
                    "--results",
                    str(results),
                ],
                work / "logs" / f"{run_id}.validate.out",
            )
            done.append(results)
        progress.advance(task)
    return done


def _run(cmd: list[str], log: Path) -> bool:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as out:
        code = subprocess.run(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=RUN_TIMEOUT,
            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
        ).returncode
    if code:
        print(f"{cmd[cmd.index('gan3d') + 1]} failed (exit {code}); log {log}", file=sys.stderr)
    return code == 0


def write_paper_report(out: Path) -> list[Path]:
    """out/paper: results files and the report, with paths relative to it (no checkout path
    inside).
    """
    paper = out / "paper"
    paths = paper_results(paper / "results")
    here = Path.cwd()
    os.chdir(paper)
    try:
        return write_report(
            load_results([p.relative_to(paper) for p in paths]),
            ".",
            reference="table4",
            title="Example: the paper's Table 4 as results files",
        )
    finally:
        os.chdir(here)


def write_index(out: Path, measured: str, repeats: int) -> None:
    """out/README.md: what each part is, the command and the machine the laptop part ran on."""
    (out / "README.md").write_text(f"""# Example report

Made by the current code with `.venv/bin/python bench/example_report.py --repeats {repeats}`
(`--paper-only` remakes the deterministic part; `tests/scale/test_example_report.py` checks that
it matches what is committed here). How to read it: [`../scale-report.md`](../scale-report.md).

- [`paper/report.md`](paper/report.md): the seed paper's Table 4 (SuperMUC-NG, 4 ranks x 12
  threads per node, host Intel MPI, 4-768 nodes) written as results files (`paper/results/`), with
  Table 7's FLOP rates of the same set-up, reported with `--reference table4`. Nothing in it is
  measured here: each file's two epochs both took the printed time, showers/s is the paper's
  epoch of 180,000 showers over that time, and the batch of 8 per rank is not printed in the paper
  (it only names the series).
- [`laptop/report.md`](laptop/report.md): real runs on the `laptop` site (one node): the tiny
  preset on simulated showers (2 x 128 training, 128 validation), 3 epochs at batch 4 per rank,
  in two layouts (1 rank x 2 threads, 2 ranks x 1 thread under MPICH's mpiexec), {repeats} repeats
  each; each run's final checkpoint scored by `gan3d validate` against 600 other simulated showers,
  as `kit scale plan --validate` does in a job. One node only: its efficiency plot says so, and its
  loss overlay has one node count per series. The repeats run the same arguments and seed, as
  `kit scale plan --repeats` does: their losses and scores agree, their times differ. Three epochs
  of the tiny preset are far from a trained generator: scores below 0 (farther from the data than
  empty showers) are what such a model gets (docs/physics.md).

Laptop part {measured}; other work shared the machine: its times are this machine's under that
load, not a benchmark.
""")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path("docs/example-report"))
    ap.add_argument("--paper-only", action="store_true", help="only the deterministic paper part")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--work",
        type=Path,
        help="keep the laptop runs here (default: a temporary directory); "
        "a second call reuses the runs that finished",
    )
    args = ap.parse_args()
    out = args.out.absolute()
    write_paper_report(out)
    if args.paper_only:
        return 0
    with tempfile.TemporaryDirectory() as tmp, Progress() as progress:
        work = (args.work or Path(tmp)).absolute()
        stamp = work / "measured.txt"  # when and where the runs ran (a second call reuses them)
        if not stamp.exists():
            work.mkdir(parents=True, exist_ok=True)
            stamp.write_text(
                f"measured from {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on: {describe()}; "
                f"{os.cpu_count()} CPUs, 1-minute load average {os.getloadavg()[0]:.1f} at the start"
            )
        done = laptop_runs(work, args.repeats, progress)
        if not done:
            print("no laptop run finished; see the logs above", file=sys.stderr)
            return 1
        here = Path.cwd()
        os.chdir(work)
        try:
            write_report(
                load_results([p.relative_to(work) for p in done]),
                out / "laptop",
                title=f"Example: tiny-preset laptop runs, {args.repeats} repeats per layout",
            )
        finally:
            os.chdir(here)
        write_index(out, stamp.read_text(), args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
