"""Generated scaling laws for `kit scale predict`'s coverage: epoch times whose overhead follows
laws of our own, not the model's shapes, calibrated as `kit scale plan --calibrate` plans (1, 2, 8
nodes x 3 repeats of 20-step epochs, 4 ranks per node, the paper's 180,000-shower epoch at batch
8). Shared by tests/scale/test_predict_coverage.py and bench/predict_coverage.py."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from kit.scale.paper import PAPER_EPOCH_EVENTS
from kit.scale.predict import Calibration

RANKS_PER_NODE, BATCH, RUN_STEPS = 4, 8, 20
CALIBRATION = (1, 2, 8)
REPEATS = 3
OVERHEADS = ("log", "power", "saturating", "straggler", "log+power")
PER_EPOCH = ("constant", "log", "sqrt", "linear")


@dataclass(frozen=True)
class Law:
    """s(P) = step0 (1 + share g(P) / g(32)) with g(4) = 0; r(N) = rest0 (1 + growth k(N))."""

    overhead: str
    share: float  # the step's overhead at 8 nodes (32 ranks), of step0
    gamma: float  # power's exponent; saturating's half-way rank count is 2^(8 gamma)
    per_epoch: str
    growth: float
    rest_share: float  # the per-epoch cost at 8 nodes, of the 8-node epoch
    noise: float  # relative run-to-run noise of each part
    straggler_run: bool  # one repeat of each count runs slow
    step0: float = 0.5

    def _g(self, p: float) -> float:
        def raw(q: float) -> float:
            if self.overhead == "log":
                return math.log2(q)
            if self.overhead == "power":
                return q**self.gamma
            if self.overhead == "saturating":
                k = 2 ** (8 * self.gamma)
                return q / (q + k)
            if self.overhead == "straggler":
                return math.sqrt(2 * math.log(q))
            return math.log2(q) + 0.2 * q**self.gamma  # log+power: a tree, then contention

        return (raw(p) - raw(4)) / (raw(32) - raw(4))

    def step(self, nodes: int) -> float:
        return self.step0 * (1 + self.share * self._g(nodes * RANKS_PER_NODE))

    def rest(self, nodes: int) -> float:
        k = {
            "constant": 0.0,
            "log": math.log2(nodes),
            "sqrt": math.sqrt(nodes) - 1,
            "linear": nodes - 1.0,
        }[self.per_epoch]
        base = self.rest_share * full_steps(8) * self.step(8) / (1 - self.rest_share)
        k8 = {"constant": 0.0, "log": 3.0, "sqrt": math.sqrt(8) - 1, "linear": 7.0}[self.per_epoch]
        return base * (1 + self.growth * k) / (1 + self.growth * k8)

    def epoch(self, nodes: int) -> float:
        """The true full epoch at `nodes`."""
        return full_steps(nodes) * self.step(nodes) + self.rest(nodes)


def full_steps(nodes: int) -> int:
    return PAPER_EPOCH_EVENTS // (nodes * RANKS_PER_NODE) // BATCH


def random_law(rng: np.random.Generator) -> Law:
    return Law(
        overhead=str(rng.choice(OVERHEADS)),
        share=float(rng.uniform(0.02, 0.4)),
        gamma=float(rng.uniform(0.2, 0.8)),
        per_epoch=str(rng.choice(PER_EPOCH)),
        growth=float(rng.uniform(0.05, 0.5)),
        rest_share=float(rng.uniform(0.005, 0.2)),
        noise=float(rng.uniform(0.0, 0.05)),
        straggler_run=bool(rng.random() < 0.3),
    )


Runs = tuple[tuple[float, ...], ...]  # per calibration count, its repeats


def runs(law: Law, rng: np.random.Generator, cut: bool = True) -> tuple[Runs, Runs, Runs]:
    """The law's calibration runs as predict reads them: each run's full-epoch wall (a 20-step
    epoch scaled, as the report scales it; with `cut` False a full epoch), time per step and
    per-epoch remainder."""
    walls, steps, rests = [], [], []
    for n in CALIBRATION:
        w, s, r = [], [], []
        for i in range(REPEATS):
            slow = 1.15 if law.straggler_run and i == 0 else 1.0
            step = law.step(n) * (1 + law.noise * rng.standard_normal()) * slow
            rest = max(0.0, law.rest(n) * (1 + law.noise * rng.standard_normal()))
            ran = RUN_STEPS if cut else full_steps(n)
            w.append(full_steps(n) / ran * (ran * step + rest))
            s.append(step)
            r.append(rest)
        walls.append(tuple(w))
        steps.append(tuple(s))
        rests.append(tuple(r))
    return tuple(walls), tuple(steps), tuple(rests)


def calibration(
    law: Law, rng: np.random.Generator, *, split: bool = True, cut: bool = True
) -> Calibration:
    """The calibration of `runs`; without `split`, as results without step times give it."""
    walls, steps, rests = runs(law, rng, cut)
    return Calibration(
        label="law",
        ranks_per_node=RANKS_PER_NODE,
        nodes=CALIBRATION,
        seconds=walls,
        events_per_epoch=PAPER_EPOCH_EVENTS,
        batch_per_rank=BATCH,
        step_seconds=steps if split else None,
        rest_seconds=rests if split else None,
    )
