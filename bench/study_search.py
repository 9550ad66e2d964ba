"""How much model-based search buys: ``mbo`` against ``random`` at equal budgets on cheap synthetic
objectives with known optima (no training), through the searchers a study uses.

Each objective lives on a mixed space (continuous axes, a whole number and a categorical whose
wrong values add a penalty), so the surrogate has to learn the categories too:
  branin:     Branin on x in [-5, 10], y in [0, 15] (minimum 0.397887) + category + (k - 2)^2
  hartmann6:  Hartmann-6 on [0, 1]^6 (minimum -3.32237) + category
A study of EVALS evaluations keeps Q in flight, as `kit study run --parallel Q` does: Q proposals
first, then each time the oldest finishes, one more proposal with the other Q-1 pending. Regret
is the best value found minus the known minimum; the table gives its median and quartiles over
the seeds (seeds 0..SEEDS-1 for both strategies: mbo's initial design is random's first points).

    .venv/bin/python bench/study_search.py [--seeds 20] [--evals 40] [--q 4] [--objectives branin,hartmann6]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from kit.study.search import Observation, make_searcher  # noqa: E402
from kit.study.space import Space, choice, integer, real  # noqa: E402
from kit.study.spec import Budget, Objective, Strategy, StudySpec  # noqa: E402

PENALTY = {"a": 0.0, "b": 1.0, "c": 3.0}

HARTMANN_A = [
    [10, 3, 17, 3.5, 1.7, 8],
    [0.05, 10, 17, 0.1, 8, 14],
    [3, 3.5, 1.7, 10, 17, 8],
    [17, 8, 0.05, 10, 0.1, 14],
]
HARTMANN_P = [
    [0.1312, 0.1696, 0.5569, 0.0124, 0.8283, 0.5886],
    [0.2329, 0.4135, 0.8307, 0.3736, 0.1004, 0.9991],
    [0.2348, 0.1451, 0.3522, 0.2883, 0.3047, 0.6650],
    [0.4047, 0.8828, 0.8732, 0.5743, 0.1091, 0.0381],
]
HARTMANN_ALPHA = [1.0, 1.2, 3.0, 3.2]


def branin(c: dict) -> float:
    x, y = c["x"], c["y"]
    value = (
        (y - 5.1 / (4 * math.pi**2) * x**2 + 5 / math.pi * x - 6) ** 2
        + 10 * (1 - 1 / (8 * math.pi)) * math.cos(x)
        + 10
    )
    return value + 5 * PENALTY[c["c"]] + (c["k"] - 2) ** 2


def hartmann6(c: dict) -> float:
    x = [c[f"x{i}"] for i in range(6)]
    value = -sum(
        alpha * math.exp(-sum(a * (xi - p) ** 2 for a, xi, p in zip(row, x, prow)))
        for alpha, row, prow in zip(HARTMANN_ALPHA, HARTMANN_A, HARTMANN_P)
    )
    return value + PENALTY[c["c"]]


OBJECTIVES: dict[str, tuple[Space, Callable[[dict], float], float]] = {
    "branin": (
        Space(
            [
                real("x", -5.0, 10.0),
                real("y", 0.0, 15.0),
                choice("c", ["a", "b", "c"]),
                integer("k", 0, 5),
            ]
        ),
        branin,
        0.397887,
    ),
    "hartmann6": (
        Space([*(real(f"x{i}", 0.0, 1.0) for i in range(6)), choice("c", ["a", "b", "c"])]),
        hartmann6,
        -3.32237,
    ),
}


def cpu_flags() -> str:
    flags = next(
        (
            line.split(":", 1)[1].split()
            for line in open("/proc/cpuinfo")
            if line.startswith("flags")
        ),
        [],
    )
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in open("/proc/cpuinfo")
            if line.startswith("model name")
        ),
        "?",
    )
    keep = [f for f in flags if f.startswith(("avx512", "amx")) or f in ("avx2", "fma")]
    return f"{model}; {os.cpu_count()} CPUs; {' '.join(keep)}"


def study(
    kind: str, space: Space, f: Callable[[dict], float], seed: int, evals: int, q: int
) -> float:
    """The best value an asynchronous study of ``evals`` evaluations with ``q`` in flight finds."""
    spec = StudySpec(
        "bench",
        space,
        {},
        Objective("validation.loss", "minimize"),
        Budget(evaluations=evals),
        Strategy(kind),
        seed,
    )
    searcher = make_searcher(spec)
    history: list[Observation] = []
    pending = searcher.ask(history, [], q)
    while pending:
        done = pending.pop(0)  # the oldest in flight finishes
        history.append(Observation(done, f(done)))
        if len(history) + len(pending) < evals:
            pending += searcher.ask(history, pending, 1)
    return min(o.value for o in history)


def quartiles(values: list[float]) -> tuple[float, float, float]:
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--evals", type=int, default=40)
    ap.add_argument("--q", type=int, default=4)
    ap.add_argument("--objectives", default="branin,hartmann6")
    args = ap.parse_args()
    print(f"machine: {cpu_flags()}; load average at start {os.getloadavg()[0]:.1f}")
    print(
        f"budget: {args.evals} evaluations, {args.q} in flight, seeds 0..{args.seeds - 1}; "
        "mbo: defaults (100 trees, 1000 random + 200 local candidates, initial max(4, 2 x parameters))\n"
    )
    print(
        "| objective | strategy | regret median | quartiles (25%–75%) | seeds mbo better "
        "| CPU s per study |"
    )
    print("|---|---|---|---|---|---|")
    for name in args.objectives.split(","):
        space, f, optimum = OBJECTIVES[name]
        regrets: dict[str, list[float]] = {}
        seconds: dict[str, float] = {}
        for kind in ("random", "mbo"):
            start = time.process_time()
            regrets[kind] = [
                study(kind, space, f, seed, args.evals, args.q) - optimum
                for seed in range(args.seeds)
            ]
            seconds[kind] = (time.process_time() - start) / args.seeds
            print(f"  {name} {kind}: done (load average {os.getloadavg()[0]:.1f})", file=sys.stderr)
        better = sum(m < r for m, r in zip(regrets["mbo"], regrets["random"]))
        for kind in ("random", "mbo"):
            q1, q2, q3 = quartiles(regrets[kind])
            print(
                f"| {name} | {kind} | {q2:.3f} | {q1:.3f}–{q3:.3f} "
                f"| {f'{better}/{args.seeds}' if kind == 'mbo' else ''} "
                f"| {seconds[kind]:.2f} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
