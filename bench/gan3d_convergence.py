"""Does training learn? The physics score of checkpoints against minutes of training, fp32 and bf16.

    .venv/bin/python bench/gan3d_convergence.py --preset tiny --minutes 8 --every 2
    .venv/bin/python bench/gan3d_convergence.py --preset full --minutes 30 --every 10 --steps-per-epoch 4

Simulates a training set and a held-out set (another seed) once, then per precision trains one
rank with `--threads` threads (epochs of `--steps-per-epoch` steps, a checkpoint per epoch) until
`--minutes` have passed, and scores with `gan3d validate` the checkpoint closest to each multiple
of `--every` minutes against the held-out showers (1 = like held-out data, 0 = like empty showers).
The precisions run one after the other, each alone; the table gives steps as well as minutes,
since minutes depend on the machine and on what else it runs (the load is printed).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PY = sys.executable


def _gan3d(*args: str, timeout: float = 3600) -> str:
    done = subprocess.run(
        [PY, "-m", "gan3d", *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode:
        sys.exit(f"gan3d {args[0]} failed ({done.returncode}): {done.stderr.strip()[-600:]}")
    return done.stdout


def train_for(args: argparse.Namespace, data: Path, ckpt: Path, precision: str) -> dict[int, float]:
    """Train until args.minutes have passed; the minute at which each epoch's checkpoint appeared."""
    cmd = [PY, "-m", "gan3d", "train", "--preset", args.preset, "--precision", precision]
    cmd += [
        "--data",
        str(data),
        "--epochs",
        "100000",
        "--steps-per-epoch",
        str(args.steps_per_epoch),
    ]
    cmd += ["--batch-size", str(args.batch_size), "--threads", str(args.threads), "--seed", "1"]
    cmd += ["--forms", args.forms]
    cmd += [
        "--checkpoint-dir",
        str(ckpt),
        "--keep-checkpoints",
        "100000",
    ]
    start = time.monotonic()
    seen: dict[int, float] = {}
    with subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    ) as proc:
        while time.monotonic() - start < args.minutes * 60 and proc.poll() is None:
            time.sleep(1)
            for entry in ckpt.glob("epoch-*"):
                seen.setdefault(int(entry.name.split("-")[1]), (time.monotonic() - start) / 60)
        if proc.poll() is not None:
            sys.exit(f"gan3d train ended early ({proc.returncode}): {proc.stderr.read()[-600:]}")
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=300)
    return seen


def score(
    args: argparse.Namespace, heldout: Path, weights: Path, precision: str, out: Path
) -> float | None:
    printed = _gan3d(
        "validate", "--generator-weights", str(weights), "--preset", args.preset,
        "--precision", precision, "--data", str(heldout), "--events", str(args.events),
        "--out", str(out),
    )  # fmt: skip
    return json.loads(printed).get("score")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", choices=["tiny", "full"], default="tiny")
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--minutes", type=float, default=8.0)
    ap.add_argument("--every", type=float, default=2.0, help="score a checkpoint every N minutes")
    ap.add_argument("--steps-per-epoch", type=int, default=8)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument(
        "--forms",
        default="auto",
        choices=["auto", "probe", "fft", "direct"],
        help="gan3d train --forms (fft: every bf16 convolution in bfloat16)",
    )
    ap.add_argument("--showers", type=int, default=2000, help="training showers (2 files)")
    ap.add_argument("--events", type=int, default=1000, help="held-out showers scored")
    ap.add_argument("--work", type=Path, default=None, help="keep data and checkpoints here")
    args = ap.parse_args()
    flags = sorted(
        f
        for f in Path("/proc/cpuinfo").read_text().split("flags")[1].split("\n")[0].split()
        if f.startswith(("avx", "amx"))
    )
    print(f"CPU flags: {' '.join(flags)}; load before: {os.getloadavg()[0]:.2f}", flush=True)
    work = args.work or Path(tempfile.mkdtemp(prefix="gan3d-convergence-"))
    data, heldout = work / "data", work / "heldout"
    if not data.exists():
        _gan3d(
            "simulate",
            "--out",
            str(data),
            "--files",
            "2",
            "--events-per-file",
            str(args.showers // 2),
        )
        _gan3d(
            "simulate",
            "--out",
            str(heldout),
            "--files",
            "1",
            "--events-per-file",
            str(args.events),
            "--seed",
            "99",
        )
    marks = [args.every * k for k in range(1, int(args.minutes / args.every) + 1)]
    table: dict[str, list[tuple[float, int, float | None]]] = {}
    for precision in args.precisions.split(","):
        ckpt = work / f"ckpt-{args.preset}-{precision}"
        seen = train_for(args, data, ckpt, precision)
        rows = []
        for mark in marks:
            epochs = [e for e, m in seen.items() if m <= mark + 0.05]
            if not epochs:
                rows.append((mark, 0, None))
                continue
            epoch = max(epochs)
            weights = ckpt / f"epoch-{epoch:04d}" / "generator.weights.h5"
            plots = work / f"plots-{precision}-{epoch}"
            rows.append(
                (
                    mark,
                    epoch * args.steps_per_epoch,
                    score(args, heldout, weights, precision, plots),
                )
            )
            print(f"{precision} {mark:g} min: {rows[-1]}", flush=True)
        table[precision] = rows
    print(f"load after: {os.getloadavg()[0]:.2f}; work: {work}")
    head = " | ".join(f"{p}: steps, score" for p in table)
    print(f"\n| {args.preset}, minutes | {head} |\n|---|" + "---|" * len(table))
    for i, mark in enumerate(marks):
        cells = " | ".join(
            f"{rows[i][1]}, {'-' if rows[i][2] is None else f'{rows[i][2]:.3f}'}"
            for rows in table.values()
        )
        print(f"| {mark:g} | {cells} |")


if __name__ == "__main__":
    main()
