"""Benchmark: how often `kit scale predict`'s band holds the truth, on laws it was not built on.

Run: .venv/bin/python bench/predict_coverage.py [--laws 400] [--seed 1] [--whole] [--full-epochs]

Draws --laws scaling laws (tests/scale/laws.py: the step's overhead growing as log, power,
saturating, straggler or log + power; the per-epoch cost constant or growing as log, sqrt or linear
N; noise 0-5% on each part; a slow repeat in 30% of the laws), calibrates each as `kit scale plan
--calibrate` plans (1, 2, 8 nodes x 3 repeats of 20-step epochs), forecasts 64 and 512 nodes (8x
and 64x the largest measured count) and prints, per target and per kind of law: the share of
forecasts whose band holds the true epoch, the median band width ((high - low) / estimate) and the
median absolute error of the estimate. --whole fits the wall epochs whole (results without step
times); --full-epochs calibrates on full epochs instead of 20-step ones. Then the paper's Tables
1-6 fitted on their first 3 rows: the same figures on their unseen rows.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path
from statistics import median

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kit.errors import KitError  # noqa: E402
from kit.scale.predict import backtest, predict  # noqa: E402
from tests.scale.laws import calibration, random_law  # noqa: E402

TARGETS = (64, 512)


def laws(
    count: int, seed: int, whole: bool, cut: bool
) -> list[tuple[str, int, bool, float, float]]:
    """(kind, target, inside, width, |error|) of every forecast."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        law = random_law(rng)
        cal = calibration(law, rng, split=not whole, cut=cut)
        try:
            p = predict(cal, TARGETS)
        except KitError as exc:  # counted as a miss
            print(f"refused: {law}: {exc}")
            out += [
                (f"{law.overhead}/{law.per_epoch}", n, False, float("inf"), 1.0) for n in TARGETS
            ]
            continue
        for f in p.forecasts:
            truth = law.epoch(f.nodes)
            low, high = f.seconds_band
            out.append(
                (
                    f"{law.overhead}/{law.per_epoch}",
                    f.nodes,
                    low <= truth <= high,
                    (high - low) / f.seconds,
                    abs(f.seconds - truth) / truth,
                )
            )
    return out


def summary(rows: list[tuple[str, int, bool, float, float]]) -> str:
    inside = sum(r[2] for r in rows)
    return (
        f"{100 * inside / len(rows):5.1f}% inside ({inside}/{len(rows)}), "
        f"median width {100 * median(r[3] for r in rows):5.1f}%, "
        f"median error {100 * median(r[4] for r in rows):4.1f}%"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--laws", type=int, default=400)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--whole", action="store_true", help="fit the wall epochs whole")
    ap.add_argument(
        "--full-epochs", action="store_true", help="calibrate on full epochs, not 20-step ones"
    )
    args = ap.parse_args()
    rows = laws(args.laws, args.seed, args.whole, not args.full_epochs)
    how = (" fitted whole" if args.whole else "") + (", full epochs" if args.full_epochs else "")
    print(f"{args.laws} generated laws, seed {args.seed}{how}:")
    for n in TARGETS:
        print(f"  {n:4d} nodes: {summary([r for r in rows if r[1] == n])}")
    kinds: dict[str, list] = defaultdict(list)
    for r in rows:
        kinds[r[0]].append(r)
    for kind in sorted(kinds):
        print(f"  {kind:22s} {summary(kinds[kind])}")
    print("paper Tables 1-6, fitted on their first 3 rows (unseen rows; anomalies included):")
    paper = []
    for i in range(1, 7):
        b = backtest(f"table{i}", 3)
        mine = [
            (
                b.table.id,
                r.nodes,
                r.inside,
                (r.forecast.seconds_band[1] - r.forecast.seconds_band[0]) / r.forecast.seconds,
                abs(r.error_percent) / 100,
            )
            for r in b.rows
        ]
        paper += mine
        print(f"  {b.table.id}: {summary(mine)}; max error {100 * max(m[4] for m in mine):.1f}%")
    print(f"  all: {summary(paper)}")


if __name__ == "__main__":
    main()
