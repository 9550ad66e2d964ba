"""`kit scale predict`: epoch time, efficiency and node-hours at N nodes, from a few measured runs.

The runs are grouped into the report's series (kit.scale.runs.Series: one layout, batch, MPI,
preset, epoch size, container and precision); each series with two or more node counts gets its
own model (kit.scale.model: the time per step and the cost paid once per epoch fitted apart, from
each run's steps and wall epoch) and a forecast per asked node count. `backtest` fits the same
model on the first rows of a paper table (whole epochs: the paper prints no step times) and sets
its forecast beside the rows it did not see.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from statistics import median

from kit.atomic import write_together
from kit.errors import KitError, error_line
from kit.readfile import read_bytes
from kit.scale.model import MAX_NODES, Model, Part, fit_model, next_count
from kit.scale.paper import PAPER_EPOCH_EVENTS, TABLES, PaperTable
from kit.scale.runs import RunResult, Series, settings_text

EXTRAPOLATION_WARN = 8  # warn beyond this many times the largest measured count
FEW_STEPS = 32  # below this many steps per epoch, per-epoch costs weigh more than the model assumes
MIN_REPEATS = 2
POOR_FIT = 0.10  # a best fit whose residual is above 10% of its values is named
WHAT = {"step": "time per step", "node-seconds": "node-seconds", "per-epoch": "per-epoch cost"}
DISAGREE = 2.0  # a band whose high end is twice its low end: the calibration cannot tell, say so
MAX_TARGETS = 64
# Rows of the paper's tables no model of the first rows can reach, and why (docs/benchmarks.md).
ANOMALIES = {
    (
        "table4",
        768,
    ): "printed with 1,024-node values: 3.94 s would be 120% efficient at 768 nodes (paper notes)",
    ("table3", 512): "container MPICH's late breakdown (efficiency 83% at 64 nodes, 62.5% at 512)",
}


@dataclass(frozen=True)
class Calibration:
    """What a model is fitted on, and what turns its seconds into showers, FLOP and steps."""

    label: str
    ranks_per_node: int
    nodes: tuple[int, ...]  # ascending, each once
    seconds: tuple[tuple[float, ...], ...]  # the repeats' wall epochs at each count
    events_per_epoch: int | None
    batch_per_rank: int | None
    # model FLOP of one shower's training (results: FLOP/s / showers/s)
    flop_per_shower: float | None = None
    node_peak: float | None = None  # FLOP/s of one node, of `peak_denominator`
    peak_denominator: str | None = None
    stack: str | None = None  # the MPI library, fabric and Horovod settings the runs share
    notes: tuple[str, ...] = ()  # what the runs could not show (become warnings)
    site_max_nodes: int | None = None  # the site's scheduler.max_nodes, where its config is known
    island_nodes: int | None = None  # nodes per island (full bisection inside one)
    # Each run's time per step and the rest of its epoch (paid once per epoch, as measured): None
    # where a run's results hold no step times; then the epoch is fitted whole.
    step_seconds: tuple[tuple[float, ...], ...] | None = None
    rest_seconds: tuple[tuple[float, ...], ...] | None = None


@dataclass(frozen=True)
class Forecast:
    """One asked node count: the estimate and its band ([low, high])."""

    nodes: int
    seconds: float
    seconds_band: tuple[float, float]
    efficiency_percent: float  # the smallest measured count's node-seconds / these
    efficiency_band: tuple[float, float]
    showers_per_second: float | None  # over the wall epoch
    flop_per_second: float | None
    percent_of_peak: float | None
    steps_per_epoch: int | None
    global_batch: int | None
    node_hours_per_epoch: float
    node_hours_band: tuple[float, float]
    node_hours_total: float | None  # for the planned epochs
    # Fitted apart (None when the epoch was fitted whole): the seconds in steps and paid once per
    # epoch, each with its band, and the time per step's overhead against the smallest count.
    step_seconds: float | None = None
    steps_seconds: float | None = None
    steps_band: tuple[float, float] | None = None
    per_epoch_seconds: float | None = None
    per_epoch_band: tuple[float, float] | None = None
    step_overhead_percent: float | None = None


@dataclass(frozen=True)
class Prediction:
    """One series' model and forecasts, with what the user should know before trusting them."""

    calibration: Calibration
    model: Model
    forecasts: tuple[Forecast, ...]
    warnings: tuple[str, ...]
    suggestion: str | None  # the next node count to measure, and why

    def measured_points(self) -> list[tuple[int, float]]:
        """Every calibration run as (nodes, seconds of a full epoch): fitted apart, its steps at a
        full epoch's count plus the per-epoch cost it paid (a cut epoch scaled whole would
        multiply that cost too)."""
        cal, model = self.calibration, self.model
        if model.per_epoch is None or cal.step_seconds is None or cal.rest_seconds is None:
            return [(n, s) for n, runs in zip(cal.nodes, cal.seconds) for s in runs]
        return [
            (n, model.steps(n) * step + rest)
            for n, steps, rests in zip(cal.nodes, cal.step_seconds, cal.rest_seconds)
            for step, rest in zip(steps, rests)
        ]


def check_targets(targets: Sequence[int]) -> tuple[int, ...]:
    if not targets or len(targets) > MAX_TARGETS or not all(1 <= n <= MAX_NODES for n in targets):
        raise KitError(
            f"--nodes {','.join(map(str, targets))}: out of range",
            fix=f"give 1..{MAX_TARGETS} node counts from 1 to {MAX_NODES:,}",
        )
    return tuple(sorted(set(targets)))


def predict(
    cal: Calibration, targets: Sequence[int] | None = None, epochs: int | None = None
) -> Prediction:
    """The forecasts of one calibration at `targets` (default: 4x, 16x and 64x the largest measured
    count); `epochs` adds the node-hours of that many epochs."""
    model = fit_model(
        cal.nodes,
        cal.seconds,
        cal.ranks_per_node,
        step_seconds=cal.step_seconds,
        rest_seconds=cal.rest_seconds,
        events_per_epoch=cal.events_per_epoch,
        batch_per_rank=cal.batch_per_rank,
    )
    top = cal.nodes[-1]
    targets = check_targets(targets or [top * 4, top * 16, top * 64])
    if targets[0] < cal.nodes[0]:
        raise KitError(
            f"--nodes {targets[0]}: below the smallest measured count ({cal.nodes[0]}); "
            "the model knows how the overhead grows above it",
            fix="forecast from it up, or measure the smaller count",
        )
    for n in targets:
        if model.band(n)[0] <= 0 or (model.per_epoch is not None and model.steps(n) == 0):
            raise KitError(
                f"{cal.label}: the fit leaves no time for an epoch at {n} nodes: "
                f"the node-seconds grow from {cal.nodes[0]} node(s) faster than any overhead shape "
                "can follow, or the epoch's showers are fewer than ranks x batch there",
                fix="check the "
                f"{cal.nodes[0]}-node runs (kit scale report shows each run's epoch time)",
            )
    forecasts = tuple(_forecast(cal, model, n, epochs) for n in targets)
    suggestion = _suggestion(model, targets)
    return Prediction(
        calibration=cal,
        model=model,
        forecasts=forecasts,
        warnings=_warnings(cal, model, forecasts, suggestion),
        suggestion=suggestion,
    )


def _forecast(cal: Calibration, model: Model, nodes: int, epochs: int | None) -> Forecast:
    seconds, (low, high) = model.seconds(nodes), model.band(nodes)
    base = model.node_seconds[0]
    showers = cal.events_per_epoch / seconds if cal.events_per_epoch else None
    flops = showers * cal.flop_per_shower if showers and cal.flop_per_shower else None
    ranks = nodes * cal.ranks_per_node
    steps = (
        (cal.events_per_epoch // ranks) // cal.batch_per_rank
        if cal.events_per_epoch and cal.batch_per_rank
        else None
    )
    hours = nodes * seconds / 3600
    peak = 100 * flops / (nodes * cal.node_peak) if flops and cal.node_peak else None
    forecast = Forecast(
        nodes=nodes,
        seconds=seconds,
        seconds_band=(low, high),
        efficiency_percent=100 * base / (nodes * seconds),
        efficiency_band=(100 * base / (nodes * high), 100 * base / (nodes * low)),
        showers_per_second=showers,
        flop_per_second=flops,
        percent_of_peak=peak,
        steps_per_epoch=steps,
        global_batch=cal.batch_per_rank * ranks if cal.batch_per_rank else None,
        node_hours_per_epoch=hours,
        node_hours_band=(nodes * low / 3600, nodes * high / 3600),
        node_hours_total=hours * epochs if epochs else None,
    )
    parts = model.parts(nodes)
    if parts is None or model.per_epoch is None or steps is None:
        return forecast
    step = model.step
    s_low, s_high = step.band(nodes)
    first = step.value(cal.nodes[0])  # 0 only for a fit through no time at the smallest count
    return replace(
        forecast,
        step_seconds=step.value(nodes),
        steps_seconds=parts[0],
        steps_band=(steps * s_low, steps * s_high),
        per_epoch_seconds=parts[1],
        per_epoch_band=model.per_epoch.band(nodes),
        step_overhead_percent=100 * (step.value(nodes) / first - 1) if first > 0 else None,
    )


def _warnings(
    cal: Calibration, model: Model, forecasts: Sequence[Forecast], suggestion: str | None
) -> tuple[str, ...]:
    out = list(cal.notes)
    if model.per_epoch is None and cal.events_per_epoch and cal.batch_per_rank:
        out.append(
            "the results hold no step times (epoch_step_seconds, older gan3d): the epoch is fitted whole, "
            "so costs paid once per epoch are taken to grow as the steps' overhead does"
        )
    best = model.best
    if best.error is not None and best.error > POOR_FIT:
        out.append(
            f"no shape follows the {WHAT[model.step.what]} (the best, {best.name}, "
            f"misses by {100 * best.error:.0f}%): noisy runs, or a change between them"
        )
    if len(cal.nodes) == 2:
        out.append(
            f"only 2 node counts ({cal.nodes[0]}, {cal.nodes[1]}): every shape fits them, "
            "so the estimate is the straggler shape and the band spans them all; "
            "measure a third count to choose"
        )
    few = [n for n, s in zip(cal.nodes, cal.seconds) if len(s) < MIN_REPEATS]
    if few:
        out.append(
            error_line(
                f"{', '.join(map(str, few))} node(s): one run each, "
                "so the band holds no run-to-run spread",
                fix="kit scale plan --repeats 3",
            )
        )
    far = [f.nodes for f in forecasts if f.nodes > EXTRAPOLATION_WARN * cal.nodes[-1]]
    if far:
        out.append(
            f"{', '.join(map(str, far))} node(s): "
            f"more than {EXTRAPOLATION_WARN}x the largest measured count ({cal.nodes[-1]}); "
            f"the band widens {_per_doubling(model)} per doubling beyond it, "
            "as far as the shapes fitted without that count missed it"
        )
    if cal.site_max_nodes and forecasts[-1].nodes > cal.site_max_nodes:
        out.append(
            f"{', '.join(str(f.nodes) for f in forecasts if f.nodes > cal.site_max_nodes)} node(s): "
            f"more than the site's jobs may hold ({cal.site_max_nodes}, scheduler.max_nodes)"
        )
    if cal.island_nodes and cal.nodes[-1] <= cal.island_nodes < forecasts[-1].nodes:
        out.append(
            f"{', '.join(str(f.nodes) for f in forecasts if f.nodes > cal.island_nodes)} node(s): "
            f"more than one island ({cal.island_nodes} nodes, full bisection only inside one); "
            "every run measured fit in one, so the fit has not seen the links between islands"
        )
    none = [f.nodes for f in forecasts if f.steps_per_epoch == 0]
    if none:
        out.append(
            f"{', '.join(map(str, none))} node(s): the epoch's {cal.events_per_epoch:,} showers "
            "are fewer than "
            f"ranks x batch {cal.batch_per_rank}: gan3d train refuses such a run"
        )
    few_steps = [
        f"{f.nodes} ({f.steps_per_epoch})"
        for f in forecasts
        if f.steps_per_epoch and f.steps_per_epoch < FEW_STEPS
    ]
    if few_steps and model.per_epoch is None:
        out.append(
            f"few steps per epoch at {', '.join(few_steps)} node(s): below {FEW_STEPS}, "
            "the costs paid once per epoch (closing all-reduces, data start) "
            "weigh more than at the measured counts"
        )
    last = forecasts[-1]
    low, high = last.seconds_band
    if high > DISAGREE * low:
        out.append(
            f"the shapes the calibration cannot rule out disagree at {last.nodes} nodes: "
            f"the band spans {low:.3g}-{high:.3g} s ({high / low:.1f}x); "
            + (
                suggestion.split(":")[0] + " to settle it (next:)"
                if suggestion
                else "measure a larger count to settle it"
            )
        )
    return tuple(out)


def _per_doubling(model: Model) -> str:
    parts = [model.step] + ([model.per_epoch] if model.per_epoch else [])
    return " and ".join(f"{100 * p.per_doubling:.1f}% ({p.what})" for p in parts)


def _suggestion(model: Model, targets: Sequence[int]) -> str | None:
    """Which count to measure next: of 2x, 4x and 8x the largest measured (below the largest asked),
    the one that would narrow the band at the largest asked count the most."""
    target, top = max(targets), model.nodes[-1]
    candidates = [top * k for k in (2, 4, 8) if top * k < target]
    found = next_count(model, target, candidates) if candidates else None
    low, high = model.band(target)
    now = (high - low) / model.seconds(target)
    if found is None or found[1] >= now:
        return None
    return (
        f"measure {found[0]} nodes: if it lands on the estimate, "
        f"the band at {target} nodes narrows from {100 * now:.0f}% to {100 * found[1]:.0f}% of the estimate"
    )


def calibration_from_runs(series: Series, runs: Sequence[RunResult]) -> Calibration:
    """A series' runs as a calibration. A calibration holds for the stack it was measured on, so
    runs of one series that differ in their MPI library (one vendor, two versions or builds), their
    fabric or provider, or Horovod's fusion and cycle settings are refused."""
    for what, field in (
        ("MPI libraries", "mpi_library_version"),
        ("MPI fabrics", "mpi_fabric"),
        ("Horovod settings", "horovod_settings"),
    ):
        seen: dict[str, RunResult] = {}
        for run in runs:
            value = getattr(run, field)
            if value is None and field != "mpi_library_version":
                continue  # not recorded (older results): cannot differ from what is
            seen.setdefault(
                settings_text(value) if field != "mpi_library_version" else value or "not recorded",
                run,
            )
        if len(seen) > 1:
            (a, ra), (b, rb) = list(seen.items())[:2]
            raise KitError(
                f"series {series.name} mixes {what}: {ra.path} ran with {a.splitlines()[0][:100]!r}, "
                f"{rb.path} with {b.splitlines()[0][:100]!r}",
                fix="predict each stack's runs on their own (--results)",
            )
    unrecorded = sum(r.mpi_fabric is None or r.horovod_settings is None for r in runs)
    notes = (
        (
            f"{unrecorded} of {len(runs)} run(s) predate the mpi_fabric and horovod_settings fields: "
            "whether they ran on the others' fabric and Horovod settings is unknown",
        )
        if unrecorded
        else ()
    )
    known = next(
        (r for r in runs if r.mpi_fabric is not None and r.horovod_settings is not None), None
    )
    stack = (
        f"{runs[0].mpi_library_version or 'MPI not recorded'}; fabric: "
        f"{settings_text(known.mpi_fabric if known else None)}; Horovod: "
        f"{settings_text(known.horovod_settings if known else None)}"
    )
    by_nodes: dict[int, list[RunResult]] = {}
    for run in runs:
        by_nodes.setdefault(run.nodes, []).append(run)
    counts = sorted(by_nodes)
    parts = [[_parts(r) for r in by_nodes[n]] for n in counts]
    split = all(p is not None for runs_at in parts for p in runs_at)
    per_shower = [
        r.flop_per_second / r.showers_per_second for r in runs if r.showers_per_second > 0
    ]
    peaks = [(r, percent) for r in runs if (percent := r.percent_of_peak)]
    site_max_nodes, island_nodes = _site_limits(series.site)
    return Calibration(
        label=series.name,
        ranks_per_node=series.ranks_per_node,
        nodes=tuple(counts),
        seconds=tuple(tuple(r.epoch_seconds for r in by_nodes[n]) for n in counts),
        events_per_epoch=series.events_per_epoch,
        batch_per_rank=series.batch_per_rank,
        flop_per_shower=median(per_shower) if per_shower else None,
        node_peak=median(r.flop_per_second * 100 / percent / r.nodes for r, percent in peaks)
        if peaks
        else None,
        peak_denominator=" / ".join(
            dict.fromkeys(r.percent_of_peak_denominator or "" for r, _ in peaks)
        )
        or None,
        stack=stack,
        notes=notes,
        site_max_nodes=site_max_nodes,
        island_nodes=island_nodes,
        step_seconds=tuple(tuple(p[0] for p in at if p) for at in parts) if split else None,
        rest_seconds=tuple(tuple(p[1] for p in at if p) for at in parts) if split else None,
    )


def _parts(run: RunResult) -> tuple[float, float] | None:
    """(time per step, seconds paid once per epoch) of one run, from its wall epoch and its steps'
    time; None where the results hold no wall clock or no step times. The report scales a cut epoch
    (--steps-per-epoch) whole to a full one; the once-per-epoch rest is taken back to what one
    epoch paid."""
    full, ran = run.full_epoch_steps, run.steps_per_epoch
    if (
        run.step_epoch_seconds is None
        or full is None
        or ran is None
        or not run.epoch_seconds_from.startswith("epoch_wall_times")
    ):
        return None
    rest = (run.epoch_seconds - run.step_epoch_seconds) * min(ran, full) / full
    return run.step_epoch_seconds / full, max(0.0, rest)


def _site_limits(name: str | None) -> tuple[int | None, int | None]:
    """(max nodes per job, nodes per island) of the runs' site, where its config can be found."""
    if not name:
        return None, None
    from kit.site import load_site

    try:
        site = load_site(name)
    except KitError:  # results from a site whose config is not here: no limits to warn about
        return None, None
    return site.scheduler.max_nodes, site.network.island_nodes


def predict_runs(
    runs: Sequence[RunResult], targets: Sequence[int] | None = None, epochs: int | None = None
) -> tuple[list[Prediction], list[KitError]]:
    """A prediction per series that has two or more node counts; the series left out, and why
    (each an error not raised: what, and the fix). Refuses when no series can be predicted."""
    groups: dict[Series, list[RunResult]] = {}
    for run in runs:
        groups.setdefault(run.series, []).append(run)
    out: list[Prediction] = []
    skipped: list[KitError] = []
    for key in sorted(groups, key=Series.sort_key):
        cal = calibration_from_runs(key, groups[key])
        if len(cal.nodes) < 2:
            skipped.append(
                KitError(
                    f"series {key.name}: one node count ({cal.nodes[0]}) "
                    "cannot show how the overhead grows",
                    fix="measure at least two (kit scale plan --nodes N0,2N0,8N0 --repeats 3)",
                )
            )
            continue
        out.append(predict(cal, targets, epochs))
    if len(skipped) == 1 and not out:
        raise skipped[0]
    if not out:
        raise KitError(
            f"no series has two node counts ({len(skipped)} series, each of one count)",
            fix="measure at least two node counts of one layout (kit scale plan --nodes "
            "N0,2N0,8N0 --repeats 3)",
        )
    return out, skipped


def _paper_table(table_id: str) -> PaperTable:
    key = table_id.strip().lower()
    key = f"table{key}" if key.isdigit() else key
    table = TABLES.get(key)
    if table is None or not table.seconds_per_epoch:
        raise KitError(
            f"--reference {table_id}: predict backtests the paper's epoch-time tables",
            fix="--reference one of table1..table6",
        )
    return table


@dataclass(frozen=True)
class BacktestRow:
    nodes: int
    measured: float
    forecast: Forecast
    anomaly: str | None  # why no model reaches this row (ANOMALIES), else None

    @property
    def error_percent(self) -> float:
        return 100 * (self.forecast.seconds - self.measured) / self.measured

    @property
    def inside(self) -> bool:
        low, high = self.forecast.seconds_band
        return low <= self.measured <= high


@dataclass(frozen=True)
class Backtest:
    table: PaperTable
    prediction: Prediction
    rows: tuple[BacktestRow, ...]  # the rows the model did not see

    def errors(self, with_anomalies: bool = False) -> list[float]:
        return [abs(r.error_percent) for r in self.rows if with_anomalies or r.anomaly is None]


def backtest(table_id: str, calibrate_on: int = 3, epochs: int | None = None) -> Backtest:
    """Fit on the first `calibrate_on` rows of a paper table; forecast every other row."""
    table = _paper_table(table_id)
    if not 2 <= calibrate_on < len(table.nodes):
        raise KitError(
            f"--calibrate-on {calibrate_on}: {table.id} has {len(table.nodes)} rows",
            fix=f"give 2..{len(table.nodes) - 1} (the rest are compared)",
        )
    nodes = table.nodes[:calibrate_on]
    cal = Calibration(
        label=table.label,
        ranks_per_node=table.ranks_per_node or 1,
        nodes=nodes,
        seconds=tuple((t,) for t in table.seconds_per_epoch[:calibrate_on]),
        events_per_epoch=PAPER_EPOCH_EVENTS,
        batch_per_rank=None,
    )
    unseen = list(zip(table.nodes[calibrate_on:], table.seconds_per_epoch[calibrate_on:]))
    prediction = predict(cal, [n for n, _ in unseen], epochs)
    by_nodes = {f.nodes: f for f in prediction.forecasts}
    return Backtest(
        table,
        prediction,
        tuple(BacktestRow(n, t, by_nodes[n], ANOMALIES.get((table.id, n))) for n, t in unseen),
    )


PREDICT_SCHEMA = "kit-scale-predict/2"


def _finite(value: float | None) -> float | None:
    return value if value is None or math.isfinite(value) else None


def forecast_document(f: Forecast) -> dict:
    return {
        "nodes": f.nodes,
        "seconds_per_epoch": f.seconds,
        "seconds_band": list(f.seconds_band),
        "efficiency_percent": f.efficiency_percent,
        "efficiency_band": list(f.efficiency_band),
        "showers_per_second": f.showers_per_second,
        "flop_per_second": _finite(f.flop_per_second),
        "percent_of_peak": _finite(f.percent_of_peak),
        "steps_per_epoch": f.steps_per_epoch,
        "global_batch": f.global_batch,
        "node_hours_per_epoch": f.node_hours_per_epoch,
        "node_hours_band": list(f.node_hours_band),
        "node_hours_total": f.node_hours_total,
        # fitted apart (null when the epoch was fitted whole)
        "step_seconds": f.step_seconds,
        "steps_seconds": f.steps_seconds,
        "steps_band": list(f.steps_band) if f.steps_band else None,
        "per_epoch_seconds": f.per_epoch_seconds,
        "per_epoch_band": list(f.per_epoch_band) if f.per_epoch_band else None,
        "step_overhead_percent": f.step_overhead_percent,
    }


def _part_document(part: Part) -> dict:
    return {
        "fitted": part.what,
        "estimate": part.best.name,
        "band_shapes": [f.name for f in part.kept],
        "noise": part.sigma,
        "widening_per_doubling": part.per_doubling,
        "fits": [
            {"shape": f.name, "gamma": f.gamma, "a": f.a, "b": f.b, "error": f.error}
            for f in part.fits
        ],
    }


def prediction_document(p: Prediction) -> dict:
    """One series in the --json document."""
    m = p.model
    return {
        "series": p.calibration.label,
        "ranks_per_node": p.calibration.ranks_per_node,
        "measured": [
            {"nodes": n, "seconds": list(s)}
            for n, s in zip(p.calibration.nodes, p.calibration.seconds)
        ],
        "model": {
            "estimate": m.describe(),
            "fitted_apart": m.per_epoch is not None,
            "step": _part_document(m.step),
            "per_epoch": _part_document(m.per_epoch) if m.per_epoch else None,
        },
        "percent_of_peak_denominator": p.calibration.peak_denominator,
        "stack": p.calibration.stack,
        "forecasts": [forecast_document(f) for f in p.forecasts],
        "warnings": list(p.warnings),
        "suggestion": p.suggestion,
    }


def backtest_document(b: Backtest) -> dict:
    return {
        "table": b.table.id,
        **prediction_document(b.prediction),
        "rows": [
            {
                "nodes": r.nodes,
                "measured": r.measured,
                "error_percent": r.error_percent,
                "inside_band": r.inside,
                "anomaly": r.anomaly,
            }
            for r in b.rows
        ],
    }


PLOT_NAME, DOCUMENT_NAME = "predict.png", "predict.json"


def write_outputs(out: Path, document: dict, plot: bytes) -> list[Path]:
    """OUT/predict.json and OUT/predict.png, replaced together; files at those names are replaced
    only when OUT's predict.json (a regular file) is one this command wrote."""
    names = (DOCUMENT_NAME, PLOT_NAME)
    there = [name for name in names if os.path.lexists(out / name)]
    if there:
        try:
            ours = (
                json.loads(
                    read_bytes(out / DOCUMENT_NAME, "prediction", follow_symlinks=False)
                ).get("schema")
                == PREDICT_SCHEMA
            )
        except (
            OSError,
            KitError,
            ValueError,
            AttributeError,
            RecursionError,
        ):  # absent, a link, not JSON, not ours
            ours = False
        if not ours:
            raise KitError(
                f"{out / there[0]}: already there, "
                f"and {out} holds no prediction kit scale predict wrote, so it is not replaced",
                fix="give --out a new or empty directory",
            )
    text = json.dumps({"schema": PREDICT_SCHEMA, **document}, indent=2, allow_nan=False) + "\n"
    write_together({out / DOCUMENT_NAME: text.encode(), out / PLOT_NAME: plot})
    return [out / name for name in names]
