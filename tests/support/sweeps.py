"""Scaling sweeps for the tests: a plan of one node written where `kit scale submit` reads it."""

from __future__ import annotations

import sys
from pathlib import Path

from kit.scale.plan import make_plan, write_plan


def plan_sweep(site, sweep: Path, train_args, **kw) -> Path:
    plan = make_plan(
        site,
        [1],
        kw.pop("ranks_per_node", [1, 2]),
        threads=kw.pop("threads", None),
        walltime="00:10:00",
        python=sys.executable,
        train_args=train_args,
        **kw,
    )
    write_plan(plan, sweep)
    return sweep
