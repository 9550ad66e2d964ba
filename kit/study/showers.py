"""Showers enough for one step of every config of a study: the showers held out and those left to
train on must each give every rank one batch, or gan3d train stops the evaluation at its start.
kit.study.spec refuses such a study file when it is read, counting generated showers as gan3d
generates them and data files by the events their headers declare."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit.errors import FIX, KitError
from kit.study.space import Param, Space, Value

LAYOUT = "ranks-per-node"  # the kit's layout option: not gan3d's, it shapes the job around it
MAX_HEADER_FILES = 2000  # data files whose headers kit study plan reads (~1 ms each); more: gan3d's
MAX_SPLIT_EVENTS = 10**7  # generated showers split as gan3d would (bounded work: ~20,000 files)
Fail = Callable[[tuple[str, ...], str, str], KitError]  # (key path in the study file, what, fix)


def _ends(param: Param) -> Param:
    """A range as the choice of its two ends: the worst cases for the showers a step needs."""
    if param.kind == "choice":
        return param
    low, high = param.bounds
    ends = (int(low), int(high)) if param.kind == "int" else (low, high)
    return Param(param.name, "choice", values=ends, when=param.when)


def synthetic_split(events: int, fraction: float) -> tuple[int, int]:
    """(held out, training) showers of gan3d train --synthetic EVENTS --test-fraction FRACTION: the
    files it generates (gan3d.train) split as it splits them (gan3d.data.split_events; equal files,
    so the counts do not depend on the seed)."""
    from gan3d.data import split_events
    from gan3d.train import SYNTHETIC_EVENTS_PER_FILE

    files = max(2, math.ceil(events / SYNTHETIC_EVENTS_PER_FILE))
    counts = [math.ceil(events / files)] * files
    held_out = sum(b - a for _, a, b in split_events(counts, fraction, 0).test)
    return held_out, sum(counts) - held_out


@dataclass(frozen=True)
class DataCounts:
    """Shower files and the events each declares: the training data and, if given, the
    --validation-data (else --test-fraction of the data is held out, as gan3d.data.split_events)."""

    data: tuple[tuple[Path, int], ...]
    held_out: tuple[tuple[Path, int], ...] | None

    def split(self, fraction: float, seed: int) -> tuple[int, int]:
        """(held out, training) showers of one config."""
        from gan3d.data import DataError, split_events

        counts = [n for _, n in self.data]
        if self.held_out is not None:
            return sum(n for _, n in self.held_out), sum(counts)
        try:
            held = sum(b - a for _, a, b in split_events(counts, fraction, seed).test)
        except DataError:  # fewer than 2 events: nothing to hold out
            return 0, sum(counts)
        return held, sum(counts) - held

    def describe(self, fraction: float) -> str:
        """The files, their declared events and the share held out, for a refusal."""

        def files(entries: tuple[tuple[Path, int], ...]) -> str:
            named = ", ".join(f"{path} ({n} events)" for path, n in entries[:3])
            return named + (f" and {len(entries) - 3} more file(s)" if len(entries) > 3 else "")

        if self.held_out is not None:
            return (
                f"data {files(self.data)} with validation-data {files(self.held_out)} (from their headers) "
                "have"
            )
        return f"data {files(self.data)} (from the header) with test-fraction {fraction:g} have"


def check_steps(
    space: Space,
    fixed: Mapping[str, Value],
    options: Mapping[str, argparse.Action],
    *,
    data_files: bool,
    fail: Fail,
) -> None:
    """The showers held out (--test-fraction, or the --validation-data files) and those left to
    train on must each give every rank one batch, or gan3d stops the evaluation at its start:
    refused here for any config of the space (the worst: the largest ranks x batch size against
    the smallest share). Generated showers (``synthetic``) are counted as gan3d generates them;
    data files (fixed ``data``, with ``data_files``) by the events their headers declare."""
    if "synthetic" in fixed or "synthetic" in space.by_name:
        if "validation-data" in fixed:
            return
        source = None
    elif data_files and "data" in fixed:
        source = data_counts(fixed, fail)
        if source is None:
            return
    else:
        return
    default: dict[str, Any] = {
        "batch-size": options["batch-size"].default,
        LAYOUT: 1,
        "test-fraction": options["test-fraction"].default,
        **({"synthetic": None} if source is None else {"seed": options["seed"].default}),
    }
    worst = [_ends(p) for p in map(space.by_name.get, default) if p is not None]
    needed = {c for p in worst for c in p.when}
    reduced = [p for p in space.params if p.name in needed and p.name not in default] + worst
    try:
        configs = Space(reduced).grid(2) if reduced else [{}]
    except KitError:  # too many combinations to try: gan3d checks each evaluation
        return
    for config in configs:
        value = {**default, **{k: v for k, v in fixed.items() if k in default}, **config}
        ranks, batch = int(value[LAYOUT]), int(value["batch-size"])
        fraction = float(value["test-fraction"])
        if source is None:
            # gan3d refuses such a fraction itself; a split this large is left to it to count
            if not 0 < fraction < 1 or int(value["synthetic"]) > MAX_SPLIT_EVENTS:
                continue
            held_out, training = synthetic_split(int(value["synthetic"]), fraction)
            what = f"synthetic {value['synthetic']} with test-fraction {fraction:g} has"
        else:
            if source.held_out is None and not 0 < fraction < 1:
                continue
            held_out, training = source.split(fraction, int(value["seed"]))
            what = source.describe(fraction)
        step = ranks * batch
        if min(held_out, training) >= step:
            continue
        which, count = ("held out", held_out) if held_out < step else ("left to train on", training)
        varied = [n for n in default if n in config]
        if varied:
            path = ("parameters", varied[0])
        elif source is None:
            path = ("fixed", "batch-size" if "batch-size" in fixed else "synthetic")
        else:
            path = ("fixed", "data")
        if source is None:
            more = "raise synthetic (or test-fraction, for the held-out showers)"
        elif source.held_out:
            more = f"give more {'validation-data' if which == 'held out' else 'data'} showers"
        else:
            more = "give more data showers (or raise test-fraction, for the held-out showers)"
        raise fail(
            path,
            f"with batch-size {batch} and {ranks} rank(s) per node a step needs {step} "
            f"showers (ranks x batch size), but {what} {count} {which}",
            f"lower batch-size or ranks-per-node, or {more}",
        )


def data_counts(fixed: Mapping[str, Value], fail: Fail) -> DataCounts | None:
    """The events the fixed data (and validation-data) files declare in their headers; None
    where there are more files than MAX_HEADER_FILES (gan3d counts them when an evaluation
    starts)."""
    from gan3d.data import DataError, expand_data_arg
    from gan3d.showerfile import declared_events

    found: dict[str, tuple[tuple[Path, int], ...]] = {}
    for key in ("data", "validation-data"):
        if key not in fixed:
            continue
        try:
            paths = expand_data_arg(str(fixed[key]))
            if len(paths) > MAX_HEADER_FILES:
                return None
            found[key] = tuple((path, declared_events(path)) for path in paths)
        except DataError as exc:  # gan3d train would stop every evaluation at its start
            what, _, fix = str(exc).partition(FIX)  # gan3d's DataError: "WHAT; fix: FIX"
            raise fail(
                ("fixed", key), what, fix or "give fixed data files gan3d train can read"
            ) from None
    return DataCounts(found["data"], found.get("validation-data"))
