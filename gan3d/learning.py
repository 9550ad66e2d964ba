"""The demo's second part: the tiny preset trained for a few hundred steps as the convergence
benchmark trains it, its physics score measured at a few checkpoints on held-out showers. The full
preset's dozen steps show Horovod, the forms and the FLOP accounting, but not a model that has
learned; this part shows the score rising past 0 (empty showers) towards 1 (like the data).

The budget is counted in steps, which learn alike on every CPU; minutes only bound it (a slow or
loaded machine stops early, and the table says so)."""

from __future__ import annotations

import io
import json
import math
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from gan3d.checkpoint import EpochCheckpoints
from kit.atomic import atomic_write_bytes, remove_tree
from kit.boundedrun import run_bounded
from kit.excerpt import one_line, printable_text

LEARNING = "learning"  # in the demo's --build: showers, checkpoints, validation plots, learning.png
EXIT_TERMINATED = 143  # gan3d train stopped by SIGTERM at the time bound: its checkpoints stand
DATA_MARKER = ".complete"  # written after the showers: a half-simulated set is redone
TRAIN_SHOWERS, HELDOUT_SHOWERS = 2000, 1000
HELDOUT_SEED_OFFSET = 98  # seed 1's held-out set is the benchmark's (seed 99)
EPOCH_STEPS = 50  # a checkpoint every 50 steps: the curve's resolution
BATCH = 8  # showers per step
POINTS = 4  # checkpoints scored (a validation is some seconds of start-up and scoring)
STOP_GRACE = 60  # seconds gan3d train has, after SIGTERM at the time bound, to end its step
VALIDATE_OUTPUT = 1 << 20  # bytes of `gan3d validate`'s JSON kept
VALIDATE_TIMEOUT = 600


@dataclass(frozen=True)
class Point:
    """One scored checkpoint: steps trained, minutes since the training started, its score (None
    with the reason when validation gave none)."""

    steps: int
    minutes: float
    score: float | None
    why: str = ""


def train_command(
    python: str, data: list[Path], ckpt: Path, *, steps: int, threads: int, seed: int
) -> list[str]:
    """One rank with every thread, as the convergence benchmark trains (docs/benchmarks.md)."""
    epochs = max(1, steps // EPOCH_STEPS)
    return [
        python, "-m", "gan3d", "train", "--preset", "tiny",
        "--data", ",".join(str(p) for p in data[:-1]), "--validation-data", str(data[-1]),
        "--epochs", str(epochs), "--steps-per-epoch", str(EPOCH_STEPS), "--validation-steps", "2",
        "--batch-size", str(BATCH), "--threads", str(threads), "--seed", str(seed),
        "--checkpoint-dir", str(ckpt), "--keep-checkpoints", str(epochs),
        "--heartbeat-seconds", "30",
    ]  # fmt: skip


def train(cmd: list[str], minutes: float) -> tuple[int, float]:
    """Run the training, stopped (SIGTERM: it ends its step, keeps its checkpoints) after
    ``minutes``; its exit status and the wall time it started at."""
    started = time.time()
    try:
        ran = run_bounded(cmd, timeout=minutes * 60, stdout=None, grace=STOP_GRACE)
    except subprocess.TimeoutExpired:  # stopped (SIGTERM, then SIGKILL after the grace)
        return EXIT_TERMINATED, started
    return ran.returncode, started


def chosen(epochs: list[int], points: int = POINTS) -> list[int]:
    """``points`` epochs spread evenly up to the last one (all of them when there are fewer)."""
    if len(epochs) <= points:
        return epochs
    step = len(epochs) / points
    return [epochs[math.ceil(step * (i + 1)) - 1] for i in range(points)]


def score(python: str, weights: Path, *, heldout: Path, out: Path) -> tuple[float | None, str]:
    """`gan3d validate`'s score of one generator on the held-out showers, or None and why."""
    cmd = [python, "-m", "gan3d", "validate", "--generator-weights", str(weights)]
    cmd += ["--preset", "tiny", "--data", str(heldout), "--out", str(out)]
    ran = run_bounded(cmd, timeout=VALIDATE_TIMEOUT, limit=VALIDATE_OUTPUT)
    if ran.returncode != 0:
        return None, f"gan3d validate exit {ran.returncode}: {one_line(ran.err, tail=True)}"
    try:
        value = json.loads(ran.out).get("score")
    except (ValueError, AttributeError):
        return None, "gan3d validate printed no JSON object"
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        return None, "no score"
    return float(value), ""


def measure(python: str, ckpt: Path, *, heldout: Path, out: Path, started: float) -> list[Point]:
    """Score the chosen checkpoints; the minutes are from the training's start to each one's
    writing (start-up and tracing included: what the user waited)."""
    complete = dict(EpochCheckpoints(ckpt).complete())
    points = []
    for epoch in chosen(sorted(complete)):
        path = complete[epoch]
        value, why = score(
            python,
            path / "generator.weights.h5",
            heldout=heldout,
            out=out / f"step-{epoch * EPOCH_STEPS}",
        )
        minutes = (path.stat().st_mtime - started) / 60
        points.append(Point(epoch * EPOCH_STEPS, minutes, value, why))
    return points


def table(points: list[Point], *, planned: int) -> Table:
    stopped = points and points[-1].steps < planned
    caption = f"stopped by the time bound before step {planned}" if stopped else None
    t = Table(title=f"the tiny preset learning (batch {BATCH})", caption=caption)
    t.add_column("steps", justify="right")
    t.add_column("minutes", justify="right")
    t.add_column("physics score (1 = like held-out data, 0 = like empty showers)", justify="right")
    for p in points:
        t.add_row(
            str(p.steps),
            f"{p.minutes:.1f}",
            f"{p.score:.2f}" if p.score is not None else printable_text(f"none: {p.why}", 300),
        )
    return t


def plot(points: list[Point], path: Path) -> Path | None:
    """Score against steps, with the two marks of the scale (0 and 1); None when nothing scored."""
    scored = [(p.steps, p.score) for p in points if p.score is not None]
    if not scored:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot([x for x, _ in scored], [y for _, y in scored], "o-", label="tiny preset")
    ax.axhline(1.0, color="green", linestyle=":", label="1: like held-out data")
    ax.axhline(0.0, color="grey", linestyle="--", label="0: like empty showers")
    ax.set_xlabel(f"optimizer steps (batch {BATCH})")
    ax.set_ylabel("physics score")
    ax.set_title("gan3d demo: the tiny preset learning")
    ax.legend(loc="lower right")
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())
    return path


def ensure_data(out: Path, seed: int) -> tuple[list[Path], Path]:
    """The benchmark's showers (docs/benchmarks.md, convergence): 2,000 to train on, 1,000 held
    out with another seed; simulated once, reused by later runs."""
    from gan3d.simulate import write_files

    train_dir, heldout_dir = out / "data", out / "heldout"
    if not (out / DATA_MARKER).is_file():
        remove_tree(train_dir)  # a half-simulated set, in the demo's own directory
        remove_tree(heldout_dir)
        write_files(train_dir, 2, TRAIN_SHOWERS // 2, seed=seed)
        write_files(heldout_dir, 1, HELDOUT_SHOWERS, seed=seed + HELDOUT_SEED_OFFSET)
        (out / DATA_MARKER).write_text("done\n")
    return sorted(train_dir.glob("*.h5")), next(heldout_dir.glob("*.h5"))


def demo_part(
    console: Console,
    python: str,
    build: Path,
    *,
    steps: int,
    minutes: float,
    threads: int,
    seed: int,
) -> list[Point]:
    """Train, score and show: the table, the plot's path and one line on what it means. ``build``
    is the demo's own directory (claim_build): its learning/ is the demo's."""
    out = build / LEARNING
    for made in ("ckpt", "checks", "learning.png"):  # the last run's; its showers are reused
        remove_tree(out / made)
    with console.status(f"simulating {TRAIN_SHOWERS + HELDOUT_SHOWERS} showers into {out}"):
        train_files, heldout = ensure_data(out, seed)
    cmd = train_command(
        python, [*train_files, heldout], out / "ckpt", steps=steps, threads=threads, seed=seed
    )
    console.print(
        f"\nPart 2: the tiny preset, {steps} steps (at most {minutes:g} minutes), "
        "to watch it learn:\n  " + " ".join(cmd),
        highlight=False,
    )
    code, started = train(cmd, minutes)
    if code not in (0, EXIT_TERMINATED):
        console.print(f"gan3d demo: the tiny training failed (exit {code})", style="red")
    with console.status("physics score of the tiny preset's checkpoints"):
        points = measure(python, out / "ckpt", heldout=heldout, out=out / "checks", started=started)
    if not points:
        console.print("no checkpoint of the tiny preset to score", style="red")
        return points
    console.print(table(points, planned=steps))
    png = plot(points, out / "learning.png")
    console.print(f"plot: {png if png else 'not produced (no score)'}", highlight=False)
    scored = [p.score for p in points if p.score is not None]
    if len(scored) >= 2:
        verdict = "the model learns" if scored[-1] > max(scored[0], 0.0) else "no learning shown"
        console.print(
            f"physics score {scored[0]:.2f} -> {scored[-1]:.2f} over {points[-1].steps} steps: "
            f"{verdict} (kit docs physics)",
            highlight=False,
        )
    return points
