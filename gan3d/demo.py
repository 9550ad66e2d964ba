"""`python -m gan3d demo --site laptop`: the main job end to end on one machine.

Synthetic showers (reused when already there) -> a short 2-rank Horovod training of the
full-size 3DGAN launched with MPICH's mpiexec -> the physics check -> a summary table; then the
tiny preset trained a few hundred steps, its physics score rising (gan3d.learning).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from gan3d import learning
from gan3d.learning import LEARNING
from gan3d.results import TAGGED
from kit.atomic import remove_tree
from kit.boundedrun import run_bounded
from kit.errors import KitError
from kit.excerpt import plain_console, printable, printable_lines, printable_text
from kit.readfile import read_json_object
from kit.schema import check_value

DATA_FILES, EVENTS_PER_FILE = 3, 256  # 2 files to train on, 1 for validation
MARKER = ".complete"  # written after the last file: a half-simulated set is redone
VALIDATE_OUTPUT = 1 << 20  # bytes kept of the physics check's stdout and stderr (its tail is shown)
OWNED = ".gan3d-demo"  # in --build: the demo made this directory, so it may remove what is in it
# the second part: the tiny preset for a few minutes, counted in steps (a step learns alike on any
# CPU; 600 score above 0 on Zen 4 and AVX2, docs/benchmarks.md); the minutes only bound it
LEARN_STEPS, LEARN_MINUTES = 600, 10.0
EARLIER_PLOTS = ".plots.earlier"  # the last run's plots while a new check runs
OWN_ENTRIES = {"data", "ckpt", "plots", EARLIER_PLOTS, OWNED, LEARNING}  # all it writes in --build


def claim_build(build: Path) -> Path:
    """--build for this demo: new, empty, or one an earlier demo wrote (marked, or holding only what
    a demo writes, with a complete data set); anything else is a user's directory and is refused,
    since the demo starts each run by removing its data and checkpoints there."""
    if build.is_symlink() or (build.exists() and not build.is_dir()):
        raise KitError(
            f"--build {build}: not a directory the demo made", fix="give a new or empty directory"
        )
    build.mkdir(parents=True, exist_ok=True)
    names = set(os.listdir(build))
    # unmarked: empty, or a demo's from before the marker (its complete data set, nothing foreign);
    # a lone "plots" or "ckpt" may be anybody's, and the demo replaces those
    earlier = names <= OWN_ENTRIES and (not names or (build / "data" / MARKER).is_file())
    if OWNED not in names and not earlier:
        raise KitError(
            f"--build {build}: holds files gan3d demo did not write (no {OWNED})",
            fix="give a new or empty directory",
        )
    (build / OWNED).touch()
    return build


def find_mpiexec() -> str:
    """MPICH's hydra launcher (Debian's mpiexec may be an alternative pointing at Open MPI)."""
    for name in ("mpiexec.hydra", "mpiexec.mpich", "mpiexec"):
        path = shutil.which(name)
        if path:
            return path
    raise SystemExit(
        "gan3d demo: error: no mpiexec on PATH; fix: apt-get install mpich (or run scripts/setup.sh)"
    )


def ensure_data(directory: Path, seed: int, console: Console) -> list[Path]:
    """Simulate the demo's showers once; later runs reuse them."""
    from gan3d.simulate import write_files

    if (directory / MARKER).is_file():
        console.print(Text(f"reusing synthetic showers in {directory}", style="dim"))
        return sorted(directory.glob("*.h5"))
    remove_tree(directory)  # inside the demo's own --build (claim_build): a half-simulated set
    with console.status(f"simulating {DATA_FILES * EVENTS_PER_FILE} showers into {directory}"):
        paths = write_files(directory, DATA_FILES, EVENTS_PER_FILE, seed=seed)
    (directory / MARKER).write_text("done\n")
    return paths


def train_command(python: str, args: argparse.Namespace, data: list[Path]) -> list[str]:
    return [
        find_mpiexec(),
        "-n",
        str(args.ranks),
        python,
        "-m",
        "gan3d",
        "train",
        "--data",
        ",".join(str(p) for p in data[:-1]),
        "--validation-data",
        str(data[-1]),
        "--preset",
        args.preset,
        "--epochs",
        str(args.epochs),
        "--steps-per-epoch",
        str(args.steps),
        "--validation-steps",
        "2",
        "--batch-size",
        str(args.batch_size),
        "--threads",
        str(args.threads),
        "--site",
        args.site,
        "--measure-peak",
        "2",
        "--seed",
        str(args.seed),
        "--warmup-epochs",
        "1",
        "--results",
        str(args.results),
        "--checkpoint-dir",
        str(args.build / "ckpt"),
    ]


def summary(record: dict, plots: Path | None, results: Path) -> tuple[Table, list[str]]:
    """The run in one table, what a newcomer looks at first, and the lines to print under it. Only
    figures the run can back are rows; a line says which peaks are unknown on this site, and why."""
    rows, notes = peak_rows(record)
    fft = record.get("fft_convolutions") or []
    if fft:  # docs/peaks.md: an effective rate, more than the arithmetic done
        notes.append(
            f"model FLOP: {len(fft)} convolution(s) ran as FFTs, less arithmetic than counted, "
            "so a % may pass 100 (kit docs peaks)"
        )
    table = Table(
        title=Text(
            f"3DGAN demo on site '{printable(record['site'])}': "
            f"{record['ranks']} ranks x {record['threads_per_rank']} thread(s), "
            f"preset {printable(record['preset'])}"
        )
    )
    table.add_column("quantity")
    table.add_column("value", justify="right")

    def add_row(label: str, value: str) -> None:  # the record's text as text, never as markup
        table.add_row(Text(label), printable_text(value, 400))

    for i, seconds in enumerate(record["epoch_times"], start=1):
        add_row(f"time of epoch {i} ({record['steps_per_epoch']} steps)", f"{seconds:.1f} s")
    add_row("first step (tracing), excluded below", f"{record['first_step_seconds']:.1f} s")
    add_row("showers/s (job)", f"{record['showers_per_second']:.2f}")
    add_row("GFLOP per shower (train step)", f"{record['flop_per_shower'] / 1e9:.1f}")
    add_row(
        "GFLOP/s (job)" + (", model FLOP" if fft else ""), f"{record['flop_per_second'] / 1e9:.1f}"
    )
    for label, value in rows:
        add_row(label, value)
    add_row("peak memory per rank", f"{max(record['peak_rss_bytes_per_rank']) / 2**30:.2f} GiB")
    last = record["losses"][-1] if record["losses"] else {}
    if last:
        add_row(
            "last epoch d_loss / g_loss (train)",
            f"{last['train'].get('d_loss', float('nan')):.3f} / "
            f"{last['train'].get('g_loss', float('nan')):.3f}",
        )
    if "physics" in record:
        score = record["physics"].get("score")
        add_row(
            "physics score (1 = like held-out data, 0 = like empty showers)",
            f"{score:.3g}"
            if score is not None
            else f"none: {record['physics'].get('score_null_reason')}",
        )
    add_row("results JSON", str(results))
    add_row("physics plots", str(plots) if plots else "not produced")
    return table, notes


def print_summary(console: Console, record: dict, *, plots: Path | None, results: Path) -> None:
    table, notes = summary(record, plots, results)
    console.print(table)
    for note in notes:  # one line each: the terminal wraps it, not rich into the table's width
        console.print(
            printable(note, 2000), style="dim", soft_wrap=True, highlight=False, markup=False
        )


def peak_rows(record: dict) -> tuple[list[tuple[str, str]], list[str]]:
    """(label, value) rows for the % of each peak the record knows, in the precision of the run's
    arithmetic only (a % of another precision's peak compares unlike things), and the seed
    paper's FP64-at-max-clock figure where the site states it; plus one note line saying which
    peaks are left out and why (the record's basis), since an absent row must not look like an
    oversight."""
    # bf16-emulated runs on the fp32 units: the record holds the peaks of what the CPU ran
    p = next(p for p in ("bf16", "fp32", "fp64") if f"percent_of_peak_{p}_measured" in record)
    rows: list[tuple[str, str]] = []
    for kind, what in (
        ("theoretical", "theoretical (site config)"),
        ("measured", "measured matmul"),
    ):
        percent = record[f"percent_of_peak_{p}_{kind}"]
        if percent is not None:
            peak = record[f"peak_{p}_{kind}_flop_per_second"]
            rows.append((f"% of {what} {p} peak ({peak / 1e9:.0f} GFLOP/s)", f"{percent:.1f} %"))
    paper = record["percent_of_peak_fp64_max_clock"]
    if paper is not None:
        rows.append(("% of FP64 peak at max clock (the paper's convention)", f"{paper:.1f} %"))
    theory, measured = (record[f"percent_of_peak_{p}_{k}"] for k in ("theoretical", "measured"))
    why: list[str] = []
    if theory is None:  # the basis: "unknown clock and FLOP/cycle: the site config gives no ..."
        basis = record[f"peak_{p}_theoretical_basis"]
        why.append(f"theoretical peaks unknown: {basis.split(': ', 1)[-1]}")
    elif paper is None:
        why.append(record["peak_fp64_max_clock_basis"])
    if measured is None:
        why.append(f"no % of the measured {p} peak: {record[f'peak_{p}_measured_basis']}")
    elif theory is None:
        why.append(f"the % above is of the {p} peak measured here")
    return rows, ["; ".join(why)] if why else []


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gan3d demo", description=__doc__.split("\n")[0])
    ap.add_argument("--site", default="laptop")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="threads per rank")
    ap.add_argument("--preset", choices=["full", "tiny"], default="full")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--steps", type=int, default=6, help="optimizer steps per epoch")
    ap.add_argument("--batch-size", type=int, default=8, help="showers per rank per step")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--build",
        type=Path,
        default=Path("build", "demo"),
        help="data, checkpoints and plots (default: build/demo in the current directory)",
    )
    ap.add_argument(
        "--results",
        type=Path,
        default=Path("results", "demo.json"),
        help="results JSON (default: results/demo.json in the current directory)",
    )
    ap.add_argument(
        "--learn-steps",
        type=int,
        default=LEARN_STEPS,
        help="then train the tiny preset this many steps and show its physics score rising (0: not)",
    )
    ap.add_argument(
        "--learn-minutes", type=float, default=LEARN_MINUTES, help="time bound of that training"
    )
    args = ap.parse_args(argv)
    console = plain_console()  # site and record values print as text, never as markup

    from kit.site import load_site

    try:
        site = load_site(args.site)
        claim_build(args.build)
    except KitError as exc:
        console.print(Text.assemble(("gan3d demo: error:", "red"), f" {exc}"))
        return 1
    # TensorFlow's CUDA/TensorRT start-up chatter (C++ INFO and WARNING) drowns the summary on a
    # CPU machine; level 2, as in the batch jobs, still shows its errors. A user's value wins.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    data = ensure_data(args.build / "data", args.seed, console)
    remove_tree(args.build / "ckpt")  # a fresh run, not a resume (the demo's own, claim_build)
    cmd = train_command(sys.executable, args, data)
    console.print(
        Text.assemble(
            (f"site {printable(site.name)}", "bold"),
            f": {site.node.cores} cores; running\n  " + " ".join(cmd),
        )
    )
    t0 = time.time()
    proc = subprocess.run(cmd)
    if proc.returncode != 0:
        console.print(f"gan3d demo: training failed (exit {proc.returncode})", style="red")
        return proc.returncode
    console.print(f"training job took {time.time() - t0:.0f} s", style="dim")
    plots = run_validation(args, data, console)
    record = read_json_object(args.results, "gan3d results file", "run the demo again")
    check_value(record, args.results, TAGGED, what="gan3d results file", fix="run the demo again")
    print_summary(console, record, plots=plots, results=args.results)
    if args.learn_steps > 0:
        threads = args.ranks * args.threads  # the cores the first part used, in one rank
        points = learning.demo_part(
            console, sys.executable, args.build, steps=args.learn_steps,
            minutes=args.learn_minutes, threads=threads, seed=args.seed,
        )  # fmt: skip
        return 0 if points else 1  # nothing to score: the tiny training failed (it said why)
    return 0


def run_validation(args: argparse.Namespace, data: list[Path], console: Console) -> Path | None:
    """The physics check on the trained generator; the demo still reports training if it fails.

    The earlier run's plots are renamed aside while validate writes new ones (the results JSON
    names their paths under plots/), and come back if it fails: at every instant they are whole
    under one of the two names, and a run killed meanwhile has them restored by the next."""
    out, aside = args.build / "plots", args.build / EARLIER_PLOTS
    if os.path.lexists(aside):  # a run killed during its check: its partial plots give way
        remove_tree(out)
        os.rename(aside, out)
    if os.path.lexists(out):
        os.rename(out, aside)
    cmd = [
        sys.executable,
        "-m",
        "gan3d",
        "validate",
        "--preset",
        args.preset,
        "--checkpoint",
        str(args.build / "ckpt"),
        "--data",
        str(data[-1]),
        "--out",
        str(out),
        "--results",
        str(args.results),
    ]
    with console.status("physics check of the trained generator"):
        proc = run_bounded(cmd, timeout=None, limit=VALIDATE_OUTPUT)  # it adds to --results itself
    if proc.returncode != 0:
        console.print(  # validate's stderr: its last lines, escaped
            Text.assemble(
                (f"physics validation failed (exit {proc.returncode}): {' '.join(cmd)}", "yellow"),
                "\n" + printable_lines(proc.err),
            )
        )
        remove_tree(out)  # what this check began (the earlier plots are aside)
        if os.path.lexists(aside):
            os.rename(aside, out)
        return None
    remove_tree(aside)
    return out
