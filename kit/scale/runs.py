"""One run's results JSON as the report reads it: validated figures, and the key of its series.

A series holds runs that differ only in their node count (and repeats of the same run): everything
that changes the work is in the key. Files older than a field are read as follows, and the report
says which clock it used:
- no `container`: a run that names an `image_digest` ran in the container (the launcher exports
  the digest only for a container launch), else bare;
- no `precision`: fp32 (the only precision before the field);
- no `preset` / `train_events`: not recorded; such a run only ever shares a series with runs
  that also lack it;
- no `epoch_wall_times`: the train-loop times `epoch_times` (without the closing all-reduces),
  else the step-only `full_epoch_seconds_estimate`;
- no memory fields: shown as "-";
- no `mpi_fabric` / `horovod_settings`: not recorded (None), unlike a recorded empty mapping (every
  variable unset: the libraries' defaults);
- no `losses`: no loss curves; no `physics`: not validated, unless the sweep's plan asked for it
  (`RunResult.validation`: the validation failed, and why, or has not finished).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from statistics import mean
from typing import Any, NamedTuple

from gan3d.results import TAGGED
from kit.errors import KitError
from kit.excerpt import shown
from kit.readfile import read_json
from kit.schema import Bad, Field, Items, Names, Section, check_value, section_of
from kit.schema import record as record_of
from kit.site.model import vendor_named_in

_RERUN = "re-run the job with the current gan3d, or leave this file out"
MAX_COUNT = 10**12  # nodes, ranks, batches, steps, events: far past any machine
# FLOP/s, showers/s, % of peak, seconds: 1e24 is a thousand zettaFLOP/s; 1e308 overflows sums
MAX_RATE = 1e24
# an epoch or its steps: shorter is no measurement (5e-324 made the stall share -inf)
MIN_SECONDS = 1e-6
MAX_TEXT = 200  # a heading, label or setting a report shows


def _one_line(text: str) -> Bad | None:
    """A name a report shows as it is (a heading, a label): no control character (the "str"
    kind's own check), not empty and not long."""
    return None if 0 < len(text) <= MAX_TEXT else Bad(f"{shown(text)} is not 1 to 200 characters")


COUNT = Field("int", minimum=1, maximum=MAX_COUNT)  # nodes, ranks, batches, steps, events
RATE = Field("float", minimum=0, maximum=MAX_RATE)  # FLOP/s, showers/s, % of peak
FINITE = Field("float", minimum=-MAX_RATE, maximum=MAX_RATE)  # a loss, a score: may be negative
SECONDS = Field("float", minimum=MIN_SECONDS, maximum=MAX_RATE)
NAME = Field("str", check=_one_line)
# per rank, null for a rank that did not say
BYTE_COUNTS = Field(Items(Field("int", nullable=True, minimum=1, maximum=2**62), 1, 10**6))


LOSS_NAMES = ("d_loss", "g_loss")  # the discriminator's and the generator's total losses
LOSS_KINDS = ("train", "validation")
MAX_EPOCHS = 100_000  # bound on a results file's loss history
MAX_STEP_POINTS = 4096  # bound on its per-step losses (gan3d writes at most 1024)


@dataclass(frozen=True)
class LossCurve:
    """One loss of one run per epoch, e.g. kind "train", name "d_loss" (as gan3d train averaged it
    over the epoch's steps and the ranks)."""

    kind: str
    name: str
    epochs: tuple[int, ...]
    values: tuple[float, ...]


@dataclass(frozen=True)
class StepLossCurve:
    """One loss of rank 0 at its logged steps; `epochs` places each step on the epoch axis
    (epoch e's step s of n at e - 1 + s / n), so it lies under the per-epoch curve."""

    name: str
    epochs: tuple[float, ...]
    values: tuple[float, ...]


@dataclass(frozen=True)
class Physics:
    """A run's physics validation (gan3d validate, docs/physics.md): the score on its fixed scale
    (1 = held-out data, 0 = empty showers; None with the reason when the showers could not set the
    scale) and the raw terms it was made of."""

    score: float | None = None
    score_raw: float | None = None
    score_reference_data: float | None = None
    score_reference_empty: float | None = None
    score_null_reason: str | None = None


class Validation(NamedTuple):
    """Why a run its plan had validated holds no physics: "failed" (reason: the validation log's
    last line) or "not finished"; a report must not show it as a run never validated."""

    status: str
    reason: str


class Series(NamedTuple):
    """Everything that changes the work of a run but its node count (Optional: the core runs on
    3.9).
    """

    site: str | None
    ranks_per_node: int
    threads_per_rank: int
    batch_per_rank: int
    mpi: str
    preset: str | None
    events_per_epoch: int | None
    container: str | None  # None: bare
    precision: str
    image_digest: str | None

    @property
    def name(self) -> str:
        """A short id, e.g. `laptop/1x2/b4/mpich/tiny/512ev/charliecloud@3f2a9c1b0d4e/fp32`."""
        where = "bare" if self.container is None else self.container
        if self.image_digest:
            where += "@" + self.image_digest.split(":")[-1][:12]
        events = f"{self.events_per_epoch}ev" if self.events_per_epoch else "ev?"
        return (
            f"{self.site or 'no-site'}/{self.ranks_per_node}x{self.threads_per_rank}/b{self.batch_per_rank}/"
            f"{self.mpi}/{self.preset or 'preset?'}/{events}/{where}/{self.precision}"
        )

    @property
    def layout(self) -> Series:
        """The same key without the container: what a container run and a bare run share."""
        return self._replace(container=None, image_digest=None)

    def sort_key(self) -> tuple:
        return tuple(
            "" if v is None else str(v) if not isinstance(v, int) else f"{v:012d}" for v in self
        )


@dataclass(frozen=True)
class RunResult:
    """What the report needs from one run's results JSON."""

    path: Path
    site: str | None
    nodes: int
    ranks: int
    ranks_per_node: int
    threads_per_rank: int
    batch_per_rank: int
    global_batch: int
    epoch_seconds: float  # wall clock of one full epoch (the paper's), see epoch_seconds_from
    epoch_seconds_from: str  # which measurement epoch_seconds is, for the CSV
    step_epoch_seconds: float | None  # the step-only estimate of a full epoch
    showers_per_second: float
    flop_per_second: float
    # None: not known, or a results file from before per-precision peaks
    percent_of_peak: float | None
    percent_of_peak_denominator: str | None  # e.g. "fp32 theoretical peak", "fp32 measured peak"
    percent_of_peak_fp64_max_clock: float | None  # the seed paper's convention (its Table 7)
    mpi_library_version: str | None
    preset: str | None = None
    events_per_epoch: int | None = None
    container: str | None = None
    container_from: str = "recorded"
    precision: str = "fp32"
    # layers run through FFTs: flop_per_second is then model FLOP/s
    fft_convolutions: tuple[str, ...] = ()
    image_digest: str | None = None
    mpi_fabric: tuple[tuple[str, str], ...] | None = None  # the set variables; None: not recorded
    horovod_settings: tuple[tuple[str, str], ...] | None = None
    peak_rss_bytes: int | None = None  # the largest rank's
    memory_available_bytes: int | None = None  # the lowest any rank's node had at an epoch's end
    losses: tuple[LossCurve, ...] = ()
    step_losses: tuple[StepLossCurve, ...] = ()  # rank 0's logged steps; () in older results
    physics: Physics | None = None  # None: not validated, or see `validation`
    # set from the sweep's plan and logs, not from the results file
    validation: Validation | None = None
    steps_per_epoch: int | None = None  # the steps each epoch ran (--steps-per-epoch may cut it)
    full_epoch_steps: int | None = None  # the steps of a full epoch

    @property
    def physics_status(self) -> str:
        """scored, no scale, failed, not finished or not validated: what became of the run's
        physics.
        """
        if self.physics is not None:
            return "scored" if self.physics.score is not None else "no scale"
        return self.validation.status if self.validation else "not validated"

    def loss(self, kind: str, name: str) -> LossCurve | None:
        return next((c for c in self.losses if (c.kind, c.name) == (kind, name)), None)

    @property
    def mpi(self) -> str:
        """The MPI vendor the job ran on: container MPI vs host MPI is the paper's Table 3 vs 4."""
        return vendor_named_in((self.mpi_library_version or "").encode()) or "unknown-mpi"

    @property
    def series(self) -> Series:
        return Series(
            self.site,
            self.ranks_per_node,
            self.threads_per_rank,
            self.batch_per_rank,
            self.mpi,
            self.preset,
            self.events_per_epoch,
            self.container,
            self.precision,
            self.image_digest,
        )

    @property
    def data_stall_percent(self) -> float | None:
        """The share of the wall epoch the steps do not explain: data loading, the closing
        all-reduces.
        """
        if self.step_epoch_seconds is None or not self.epoch_seconds_from.startswith(
            "epoch_wall_times"
        ):
            return None
        return 100 * (self.epoch_seconds - self.step_epoch_seconds) / self.epoch_seconds


def load_results(paths: Iterable[str | os.PathLike]) -> list[RunResult]:
    """Read results JSONs; any file the report cannot use is a KitError naming it, the key and the
    fix.
    """
    return [_load_one(Path(p)) for p in paths]


def _load_one(path: Path) -> RunResult:
    try:
        record = read_json(path, "gan3d results file", "re-run the job, or leave this file out")
    except FileNotFoundError:
        raise KitError(
            f"{path}: no such file", fix="pass the results JSON of a finished job"
        ) from None
    fix = "pass the JSON written by `python -m gan3d train --results FILE`"
    check_value(record, path, TAGGED, what="gan3d results file", fix=fix)
    if record.get("status") == "failed":
        raise KitError(
            f"{path}: the run failed ({shown(record.get('error'))}), it has no figures to report",
            fix="leave this file out, or re-run the job",
        )
    fig = check_value(record, path, RESULTS, what="gan3d results file", fix=_RERUN)
    counts = {k: fig[k] for k in _COUNTS}
    seconds, source = _epoch_seconds(fig)
    digest = fig["image_digest"]
    container, container_from = (
        (fig["container"], "recorded")
        if "container" in record
        else ("charliecloud" if digest else None, "inferred from image_digest")
    )
    rss, available = fig["peak_rss_bytes_per_rank"], fig["memory_available_bytes_min_per_rank"]
    return RunResult(
        path=path,
        site=fig["site"],
        **counts,
        epoch_seconds=seconds,
        epoch_seconds_from=source,
        step_epoch_seconds=_step_only_seconds(fig),
        showers_per_second=fig["showers_per_second"],
        flop_per_second=fig["flop_per_second"],
        percent_of_peak=fig["percent_of_peak"],
        percent_of_peak_denominator=fig["percent_of_peak_denominator"],
        percent_of_peak_fp64_max_clock=fig["percent_of_peak_fp64_max_clock"],
        mpi_library_version=fig["mpi_library_version"],
        preset=fig["preset"],
        events_per_epoch=fig["train_events"],
        container=container,
        container_from=container_from,
        precision=fig["precision"] or "fp32",
        fft_convolutions=tuple(fig["fft_convolutions"] or ()),
        image_digest=digest,
        mpi_fabric=_settings(fig["mpi_fabric"]),
        horovod_settings=_settings(fig["horovod_settings"]),
        peak_rss_bytes=max((x for x in rss or [] if x), default=None),
        memory_available_bytes=min((x for x in available or [] if x), default=None),
        losses=_losses(fig["losses"]),
        step_losses=_step_losses(fig["step_losses"], fig["steps_per_epoch"]),
        physics=None if fig["physics"] is None else record_of(Physics, fig["physics"]),
        steps_per_epoch=fig["steps_per_epoch"],
        full_epoch_steps=fig["full_epoch_steps"],
    )


def _step_row(row: Any) -> Bad | None:
    """A `step_losses` point: [global_step, epoch, step, d_loss, g_loss]."""
    if (
        isinstance(row, list)
        and len(row) == len(STEP_COLUMNS)
        and all(
            isinstance(x, int) and not isinstance(x, bool) and 0 < x <= MAX_COUNT for x in row[1:3]
        )
        and all(
            isinstance(x, (int, float)) and not isinstance(x, bool) and abs(x) <= MAX_RATE
            for x in row[3:]
        )
    ):
        return None
    return Bad(f"{shown(row)} is not a row of {', '.join(STEP_COLUMNS)} (epoch and step from 1)")


_COUNTS = ("nodes", "ranks", "ranks_per_node", "threads_per_rank", "batch_per_rank", "global_batch")
_OPTIONAL: dict[str, Any] = {"nullable": True, "required": False}
STEP_COLUMNS = ["global_step", "epoch", "step", *LOSS_NAMES]
_LOSS = dataclasses.replace(FINITE, required=False)
# gan3d train's history: one entry per epoch; an entry and its losses may hold more keys
_EPOCH_LOSSES = Section(
    {
        "epoch": Field("int", minimum=1),
        **{
            kind: Field(Section({n: _LOSS for n in LOSS_NAMES}, open=True), **_OPTIONAL)
            for kind in LOSS_KINDS
        },
    },
    open=True,
)
_STEP_LOSSES = Section(
    {
        "columns": Field(
            "list[str]",
            check=lambda v: None if v == STEP_COLUMNS else Bad(f"{shown(v)} is not {STEP_COLUMNS}"),
        ),
        "points": Field(Items(Field("any", check=_step_row), max_len=MAX_STEP_POINTS)),
    },
    open=True,
)
_SCORE = dataclasses.replace(FINITE, **_OPTIONAL)
PHYSICS = section_of(
    Physics,
    fields={f.name: _SCORE for f in dataclasses.fields(Physics) if f.name != "score_null_reason"},
    open=True,
)
# epoch_wall_times, epoch_times, epoch_step_seconds: one entry per epoch of the run
_SECONDS_LIST = Items(SECONDS, 1, 10**6)
MAX_SETTINGS = 64


def _short(text: str) -> Bad | None:
    return None if len(text) <= MAX_TEXT else Bad(f"{shown(text)} is longer than 200 characters")


# mpi_fabric, horovod_settings: variable -> value (set to "" counts), null where unset
_SETTINGS = Field(
    Names(Field("str", nullable=True, check=_short), name=_one_line),
    check=lambda v: (
        Bad(f"holds {len(v)} variables, at most {MAX_SETTINGS}") if len(v) > MAX_SETTINGS else None
    ),
    **_OPTIONAL,
)
_EPOCH_CLOCKS = ("epoch_wall_times", "epoch_times", "full_epoch_seconds_estimate")


def _check_results(fig: dict[str, Any]) -> list[tuple[str, Bad]]:
    """What holds between keys: a time per epoch, and step_losses' steps within an epoch."""
    out = []
    if all(fig[k] is None for k in _EPOCH_CLOCKS):
        no_time = "missing, and so are epoch_times and full_epoch_seconds_estimate: no epoch time"
        out.append(("epoch_wall_times", Bad(no_time)))
    n, rows = fig["steps_per_epoch"], (fig["step_losses"] or {}).get("points")
    if rows and (n is None or any(r[2] > n for r in rows)):
        out.append(("step_losses", Bad(f"a step is past steps_per_epoch ({n})")))
    return out


def _optional(spec: Field) -> Field:
    return dataclasses.replace(spec, **_OPTIONAL)


# The figures of a results file the report reads (gan3d.results writes more: passed over).
RESULTS = Section(
    {
        **{k: COUNT for k in _COUNTS},
        "site": dataclasses.replace(NAME, nullable=True),
        "showers_per_second": RATE,
        "flop_per_second": RATE,
        "mpi_library_version": Field("str", nullable=True),
        # Files from before per-precision peaks lack these three: loaded, their % of peak shown as "-".
        "percent_of_peak": _optional(RATE),
        "percent_of_peak_denominator": _optional(NAME),
        "percent_of_peak_fp64_max_clock": _optional(RATE),
        "image_digest": _optional(NAME),
        "container": _optional(NAME),
        "preset": _optional(NAME),
        "train_events": _optional(COUNT),
        "precision": _optional(NAME),
        "fft_convolutions": Field(Items(NAME, max_len=64), **_OPTIONAL),  # layer names
        "mpi_fabric": _SETTINGS,
        "horovod_settings": _SETTINGS,
        "peak_rss_bytes_per_rank": _optional(BYTE_COUNTS),
        "memory_available_bytes_min_per_rank": _optional(BYTE_COUNTS),
        "steps_per_epoch": dataclasses.replace(COUNT, required=False),
        "full_epoch_steps": dataclasses.replace(COUNT, required=False),
        "epoch_wall_times": Field(_SECONDS_LIST, required=False),
        "epoch_times": Field(_SECONDS_LIST, required=False),
        "epoch_step_seconds": Field(_SECONDS_LIST, **_OPTIONAL),
        "full_epoch_seconds_estimate": _optional(SECONDS),
        "losses": Field(Items(Field(_EPOCH_LOSSES), max_len=MAX_EPOCHS), **_OPTIONAL),
        "step_losses": Field(_STEP_LOSSES, **_OPTIONAL),
        "physics": Field(PHYSICS, **_OPTIONAL),
    },
    check=_check_results,
    open=True,
)


def _settings(recorded: dict | None) -> tuple[tuple[str, str], ...] | None:
    """The variables a results file recorded as set, sorted; None where it recorded none at all."""
    return (
        None
        if recorded is None
        else tuple(sorted((k, v) for k, v in recorded.items() if v is not None))
    )


def settings_text(settings: tuple[tuple[str, str], ...] | None) -> str:
    """`K=V K=V`, "defaults" when every variable was unset, "not recorded" for older files."""
    if settings is None:
        return "not recorded"
    return " ".join(f"{k}={v}" for k, v in settings) or "defaults"


def _losses(history: list[dict] | None) -> tuple[LossCurve, ...]:
    """The per-epoch D and G losses, train and validation, of `losses` (gan3d train's history)."""
    points: dict[tuple[str, str], list[tuple[int, float]]] = {}
    for entry in history or ():
        for kind in LOSS_KINDS:
            for name, value in (entry[kind] or {}).items():
                if value is not None:
                    points.setdefault((kind, name), []).append((entry["epoch"], value))
    return tuple(
        LossCurve(kind, name, *(tuple(v) for v in zip(*sorted(points[kind, name]))))
        for kind in LOSS_KINDS
        for name in LOSS_NAMES
        if (kind, name) in points
    )


def _step_losses(logged: dict | None, n: int | None) -> tuple[StepLossCurve, ...]:
    """`step_losses` (gan3d.steplosses): rows of (global_step, epoch, step, d_loss, g_loss), each
    step placed on the epoch axis (of n steps)."""
    rows = logged["points"] if logged else []
    if not rows or n is None:
        return ()
    at = tuple(r[1] - 1 + r[2] / n for r in rows)
    return tuple(
        StepLossCurve(name, at, tuple(float(r[3 + i]) for r in rows))
        for i, name in enumerate(LOSS_NAMES)
    )


def _epoch_seconds(fig: dict[str, Any]) -> tuple[float, str]:
    """Wall clock first (the paper's epoch time): the mean of the epochs after the first (which
    holds the tf.function tracing) unless the first is all there is; an epoch capped by
    --steps-per-epoch is scaled to the full epoch, and the source says so."""
    for key, what in (
        ("epoch_wall_times", "epoch_wall_times"),
        ("epoch_times", "epoch_times (train loop only: no epoch_wall_times in this file)"),
    ):
        if (times := fig[key]) is not None:
            seconds = mean(times[1:]) if len(times) > 1 else times[0]
            source = (
                f"{what}, mean of epochs 2-{len(times)}"
                if len(times) > 1
                else f"{what}[0], includes tracing"
            )
            return _scaled_to_full_epoch(fig, seconds, source)
    # RESULTS' check: with neither list, the estimate is there
    return (
        fig["full_epoch_seconds_estimate"],
        "full_epoch_seconds_estimate (step-only: no wall clock in this file)",
    )


def _step_only_seconds(fig: dict[str, Any]) -> float | None:
    """The steps alone of the epochs the wall figure takes (after the first, unless it is all there
    is), scaled alike, so wall - steps is what the steps leave out of those very epochs; a file
    without per-epoch step times has the run's mean timed step x a full epoch's steps."""
    sums = fig["epoch_step_seconds"]
    if sums is None:
        return fig["full_epoch_seconds_estimate"]
    return _scaled_to_full_epoch(fig, mean(sums[1:]) if len(sums) > 1 else sums[0], "")[0]


def _scaled_to_full_epoch(fig: dict[str, Any], seconds: float, source: str) -> tuple[float, str]:
    steps, full = fig["steps_per_epoch"], fig["full_epoch_steps"]
    if steps is None or full is None:
        return seconds, source + " (epoch length not recorded)"
    if steps >= full:
        return seconds, source
    return seconds * full / steps, f"{source}, scaled x {full}/{steps} steps to a full epoch"
