"""`kit scale report`: a sweep's results JSONs become the
paper's scaling tables (md, csv) and plots (png).

Definitions follow the paper (section 5): the base of a series is its smallest node count n0, linear
time per epoch is T(n0) * n0 / n, and scaling efficiency is linear time / measured time.
"""

from __future__ import annotations

import csv
import io
import os
import stat
from collections.abc import Iterable, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from statistics import median

from kit.atomic import write_together
from kit.errors import KitError
from kit.excerpt import printable
from kit.readfile import kind_name, read_bytes
from kit.scale import sweep_jobs
from kit.scale.overhead import Overhead, container_overhead
from kit.scale.paper import (
    PAPER_EPOCH_EVENTS,
    PAPER_PRESET,
    OverheadTable,
    PaperTable,
    Reference,
    paper_table,
)
from kit.scale.rows import UNNAMED_PEAK, Row, comparable_with_paper, flop_unit
from kit.scale.runs import RunResult, Series, load_results, settings_text
from kit.slurm.script import physics_dir

__all__ = ["Row", "RunResult", "Series", "load_results", "scaling_table", "write_report"]


def _median(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return median(known) if known else None


def scaling_table(runs: Sequence[RunResult]) -> list[Row]:
    """One series' rows, sorted by nodes; repeats of a node count become their median and min-max.
    Linear time is T(n0) * n0 / n with n0 the smallest node count and T its median; efficiency is
    linear / median measured, None for the base row."""
    if not runs:
        raise KitError("no runs to tabulate", fix="pass at least one results JSON")
    keys = sorted({r.series.name for r in runs})
    if len(keys) > 1:
        raise KitError(
            f"scaling_table takes one series, got {', '.join(keys)}",
            fix="group runs by RunResult.series (write_report does)",
        )
    by_nodes: dict[int, list[RunResult]] = {}
    for run in runs:
        by_nodes.setdefault(run.nodes, []).append(run)
    rows = []
    for nodes in sorted(by_nodes):
        group = sorted(by_nodes[nodes], key=lambda r: str(r.path))
        seconds = [r.epoch_seconds for r in group]
        rows.append(
            Row(
                nodes=nodes,
                seconds_per_epoch=median(seconds),
                seconds_min=min(seconds),
                seconds_max=max(seconds),
                step_seconds=_median([r.step_epoch_seconds for r in group]),
                data_stall_percent=_median([r.data_stall_percent for r in group]),
                linear_seconds=0.0,
                efficiency_percent=None,
                showers_per_second=median(r.showers_per_second for r in group),
                flop_per_second=median(r.flop_per_second for r in group),
                percent_of_peak=_median([r.percent_of_peak for r in group]),
                percent_of_peak_denominator=" / ".join(
                    dict.fromkeys(
                        r.percent_of_peak_denominator or UNNAMED_PEAK
                        for r in group
                        if r.percent_of_peak is not None
                    )
                )
                or None,
                percent_of_peak_fp64_max_clock=_median(
                    [r.percent_of_peak_fp64_max_clock for r in group]
                ),
                runs=tuple(group),
            )
        )
    base = rows[0]
    out = []
    for row in rows:
        linear = base.seconds_per_epoch * base.nodes / row.nodes
        out.append(
            replace(
                row,
                linear_seconds=linear,
                efficiency_percent=None if row is base else 100 * linear / row.seconds_per_epoch,
            )
        )
    return out


def group_series(runs: Sequence[RunResult]) -> dict[Series, list[Row]]:
    """Runs grouped by their whole key, each group a scaling table; in a stable order."""
    groups: dict[Series, list[RunResult]] = {}
    for run in runs:
        groups.setdefault(run.series, []).append(run)
    return {key: scaling_table(groups[key]) for key in sorted(groups, key=Series.sort_key)}


def report_sweep(
    sweep_dir: Path | None,
    results: Sequence[Path] = (),
    *,
    out: Path | None = None,
    reference: str | None = None,
    failed: list[str] | None = None,
) -> list[Path]:
    """The report of a sweep's results (runs that failed are left out and named in ``failed``) and
    of the results files named, in ``out`` (default SWEEP/report, or ./report without a sweep):
    which results a report covers and where it goes are decided here, not by the command line."""
    paths = sweep_jobs.results(sweep_dir, failed) if sweep_dir else []
    paths += results
    if not paths:
        raise KitError(
            "no results to report: "
            f"{sweep_dir or 'no sweep dir'} has none yet and no RESULT.json was named",
            fix="kit scale collect DIR shows why; or name the results files",
        )
    if out is None and sweep_dir:  # the sweep's own report directory: never written through a link
        out = sweep_dir / "report"
        mode = os.lstat(out).st_mode if os.path.lexists(out) else None
        if mode is not None and not stat.S_ISDIR(mode):
            raise KitError(
                f"{out}: is {kind_name(mode)}, not the report directory kit scale report makes in the sweep; "
                "it writes nothing through what it did not make",
                fix="move it aside, or give --out",
            )
    out = out or Path("report")
    title = f"scaling sweep {sweep_dir.absolute().name}" if sweep_dir else None
    unscored = sweep_jobs.unscored(sweep_dir) if sweep_dir else {}
    runs = [replace(run, validation=unscored.get(run.path)) for run in load_results(paths)]
    return write_report(runs, out, reference=reference, title=title)


def write_report(
    runs: Sequence[RunResult],
    out_dir: str | os.PathLike,
    *,
    reference: str | None = None,
    title: str | None = None,
) -> list[Path]:
    """report.md, report.csv and the PNGs in out_dir; everything is rendered before the first write,
    so a bad input leaves out_dir untouched, and the files are replaced together (a stopped run
    leaves the whole old report or the whole new one)."""
    if not runs:
        raise KitError("no results to report", fix="pass the results JSONs of a sweep")
    ref = paper_table(reference) if reference else None
    series = group_series(runs)
    overheads = container_overhead(series)
    from kit.scale.plots import plots

    outputs = {
        "report.md": _markdown(series, overheads, ref, title).encode(),
        "report.csv": _csv(series).encode(),
        **plots(series, overheads, ref),
        **_physics_plots(series),
    }
    out = Path(out_dir)
    _check_out(out, outputs)
    write_together({out / name: data for name, data in outputs.items()})
    return [out / name for name in outputs]


# every report.md says it
SIGNATURE = "A series holds the runs that differ only in their node count"


def _check_out(out: Path, names: Iterable[str]) -> None:
    """Refuse to replace files in OUT unless OUT holds a report this command wrote (its report.md,
    a regular file, carries the signature): a user's own report.md, notes or plots at these names
    in a shared --out are never overwritten."""
    there = [name for name in names if os.path.lexists(out / name)]
    if not there:
        return
    try:
        ours = SIGNATURE in read_bytes(out / "report.md", "report", follow_symlinks=False).decode(
            "utf-8", "replace"
        )
    except (OSError, KitError):  # absent, a link, a FIFO, unreadable, huge: not the kit's report
        ours = False
    if not ours:
        raise KitError(
            f"{out / there[0]}: already there, and {out} holds no report kit scale report wrote, "
            "so it is not replaced",
            fix="give --out a new or empty directory",
        )


DEFINITIONS = (
    "Time per epoch: the wall clock of a full epoch (the paper's definition), "
    "from its first batch to the end of its closing all-reduces, data loading included; "
    "the mean of a run's epochs after the first (which traces the step), "
    "scaled to a full epoch when --steps-per-epoch cut it; "
    "the median of the repeats with [min-max]. Step-only: the same epochs' steps alone, "
    "scaled alike (older files: the mean timed step x the steps of a full epoch), "
    "which leaves out data loading between steps and the all-reduces after the last step; "
    "data stall = (wall - step-only) / wall. "
    "Linear time = T(n0) x n0 / n with n0 the series' smallest node count; "
    "scaling efficiency = linear / measured (the paper's definitions)."
)


def _markdown(
    series: dict[Series, list[Row]],
    overheads: list[Overhead],
    ref: Reference | None,
    title: str | None,
) -> str:
    runs = [run for rows in series.values() for row in rows for run in row.runs]
    lines = [
        f"# {title or 'Scaling report'}",
        "",
        f"Runs: {len(runs)}, in {len(series)} series. "
        "A series holds the runs that differ only in their node count: same site, layout, batch, "
        "MPI, preset, epoch size, container or bare, precision and image. "
        "Each % of peak names its denominator: \"% of peak\" is of the peak in the run's precision, "
        "theoretical (site config: cores x AVX clock x FLOP/cycle) where the site states it, "
        "else measured (a dense matmul in that precision by all ranks at once); "
        "\"% of FP64 max-clock peak\" is the seed paper's convention (its Table 7: "
        "cores x max clock x FP64 FLOP/cycle).",
        "",
    ]
    inferred = [r for r in runs if r.container_from != "recorded"]
    if inferred:
        lines += [
            f"{len(inferred)} result(s) predate the `container` field: "
            "container when they name an image digest, else bare.",
            "",
        ]
    for key, rows in series.items():
        lines += _series_markdown(key, rows)
    lines += _overhead_markdown(overheads)
    lines += _runs_markdown(series)
    if isinstance(ref, PaperTable):
        lines += _reference_markdown(ref, series)
    elif isinstance(ref, OverheadTable):
        lines += _overhead_reference_markdown(ref)
    return "\n".join(lines)


def _series_markdown(key: Series, rows: list[Row]) -> list[str]:
    mpi = " / ".join(  # the one label a results file does not bound: cut and escaped here
        dict.fromkeys(
            printable(r.mpi_library_version or "not recorded") for row in rows for r in row.runs
        )
    )
    where = (
        "bare"
        if key.container is None
        else f"in {key.container}" + (f" ({key.image_digest})" if key.image_digest else "")
    )
    epoch = (
        f"epoch of {key.events_per_epoch:,} events"
        if key.events_per_epoch
        else "epoch size not recorded"
    )
    unit, scale = flop_unit(max(r.flop_per_second for r in rows))
    lines = [
        f"## {key.site or 'no site'}: {key.ranks_per_node} ranks/node × {key.threads_per_rank} threads/rank, "
        f"batch {key.batch_per_rank}/rank, MPI: {mpi}",
        "",
        f"Preset {key.preset or 'not recorded'}, {epoch}, {where}, {key.precision}. "
        f"Series `{key.name}` in report.csv.",
        "",
        f"| Nodes | Time per epoch (s, wall) | Runs | Step-only (s) | Data stall | Linear time (s) "
        f"| Scaling efficiency | Showers/s | {unit} | % of peak | of | % of FP64 max-clock peak |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for r in rows:
        spread = f" [{r.seconds_min:.2f}–{r.seconds_max:.2f}]" if r.repeats > 1 else ""
        eff = _pct(r.efficiency_percent)
        if r.efficiency_range and r.repeats > 1:
            eff += f" [{r.efficiency_range[0]:.1f}–{r.efficiency_range[1]:.1f}]"
        lines.append(
            f"| {r.nodes} | {r.seconds_per_epoch:.2f}{spread} | {r.repeats} | {_opt(r.step_seconds)} "
            f"| {_pct(r.data_stall_percent)} | {r.linear_seconds:.2f} | {eff} | {_num(r.showers_per_second)} "
            f"| {_num(r.flop_per_second / scale)} | {_peak(r.percent_of_peak)} "
            f"| {r.percent_of_peak_denominator or '—'} | {_peak(r.percent_of_peak_fp64_max_clock)} |"
        )
    fft = sorted({layer for row in rows for run in row.runs for layer in run.fft_convolutions})
    if fft:
        lines += [
            "",
            f"{unit} count model FLOP (the direct convolutions' multiply-adds, the paper's count): "
            f"{', '.join(fft)} ran in the frequency domain, which does less arithmetic, "
            "so the rate and its % of peak are effective figures, "
            "more than the arithmetic the CPU executed (`kit docs peaks`).",
        ]
    if any(r.percent_of_peak_denominator is None for r in rows):
        lines += [
            "",
            "— : no % of peak: "
            "the site states no peak for the run and it measured none (gan3d train --measure-peak), "
            "or its results file predates per-precision peaks (re-run it with the current gan3d).",
        ]
    sources = sorted({run.epoch_seconds_from for row in rows for run in row.runs})
    return lines + ["", f"Wall clock from: {'; '.join(sources)}.", "", DEFINITIONS, ""]


def _runs_markdown(series: dict[Series, list[Row]]) -> list[str]:
    """Throughput, convergence and physics: the figures, and one line per run with its last losses
    and its physics score (names as the PNGs of kit.scale.curves.run_names)."""
    from kit.scale.curves import run_names

    runs = [run for rows in series.values() for row in rows for run in row.runs]
    names = run_names(runs)
    lines = [
        "## Throughput, convergence and physics",
        "",
        "![showers/s vs nodes](showers_per_second.png)",
        "",
        "Showers/s: the job's training throughput after its first (tracing) step; "
        "ideal = the smallest node count's median x nodes / its nodes.",
        "",
    ]
    if any(run.losses for run in runs):
        lines += [
            "![loss vs epoch across node counts](loss_overlay.png)",
            "",
            "Losses: gan3d train's mean over each epoch's steps and the ranks (validation: "
            "over its validation steps); the global batch grows with the nodes, "
            "so lines that part show scaling changed convergence.",
            "",
        ]
    failed = [names[i] for i, run in enumerate(runs) if run.physics_status == "failed"]
    if failed:
        lines += [
            f"Physics validation failed for {len(failed)} run(s): {', '.join(failed)} (why: "
            "the Physics score column; the validation log: kit scale collect). They have no score, "
            "unlike a run never validated (\"-\").",
            "",
        ]
    if any(run.physics for run in runs):
        lines += [
            "![physics score vs nodes](physics.png)",
            "",
            "Physics score (gan3d validate on the run's final checkpoint, `kit docs physics`): "
            "1 = as close to the data as held-out data showers, 0 = as far as empty showers; "
            "raw = the unscaled score (lower is better), "
            "data / empty = the raw scores of held-out data and of empty showers. "
            "Each run's score plot and energy response (generated vs data) are copied under physics/RUN/; "
            "the validator's per-energy-bin comparisons stay beside its results, in RUN.physics/.",
            "",
        ]
    if not any(run.losses or run.physics or run.validation for run in runs):
        return lines  # results without losses or physics (older files, the paper's): no runs table
    lines += [
        "| Run | Series | Nodes | Global batch | Epochs | Last train D / G loss | Last validation D / G loss "
        "| Physics score | Raw (data / empty) | Loss curves |",
        "|---|---|---:|---:|---:|---|---|---:|---|---|",
    ]
    for i, run in enumerate(runs):
        last = {
            kind: " / ".join(
                f"{c.values[-1]:.4g}" if (c := run.loss(kind, n)) else "-"
                for n in ("d_loss", "g_loss")
            )
            for kind in ("train", "validation")
        }
        epochs = max((c.epochs[-1] for c in run.losses), default=None)
        plot = f"[losses/{names[i]}.png](losses/{names[i]}.png)" if run.losses else "-"
        lines.append(
            f"| {names[i]} | `{run.series.name}` | {run.nodes} | {run.global_batch} | {epochs or '-'} "
            f"| {last['train']} | {last['validation']} | {_physics_score(run, names[i])} "
            f"| {_physics_raw(run)} "
            f"| {plot} |"
        )
    return lines + [""]


def _physics_score(run: RunResult, name: str) -> str:
    if run.physics is None:
        if run.validation is None:
            return "-"  # not validated
        return f"{run.validation.status}: {run.validation.reason}".replace("|", "\\|")
    score = (
        f"no scale: {run.physics.score_null_reason or 'not given'}"
        if run.physics.score is None
        else f"{run.physics.score:.3f}"
    )
    plots = _physics_pngs(run)
    return score + "".join(
        f" [{p.stem.removeprefix('physics_')}](physics/{name}/{p.name})" for p in plots
    )


# per bin and overall; energy response
PHYSICS_SUMMARY = (
    "physics_score.png",
    "physics_cellsum_vs_energy.png",
)
MAX_PNG_BYTES = 16 * 2**20


def _physics_pngs(run: RunResult) -> list[Path]:
    """The summary plots gan3d validate drew for a run (generated vs data), from RUN.physics/ beside
    its results; its per-energy-bin comparisons (about 100 kB each) stay there. None if the
    directory is not there (results copied without it); links are not followed."""
    directory = physics_dir(run.path)
    return [
        directory / name
        for name in PHYSICS_SUMMARY
        if (directory / name).is_file() and not (directory / name).is_symlink()
    ]


def _physics_plots(series: dict[Series, list[Row]]) -> dict[str, bytes]:
    """The validated runs' physics summary PNGs, copied into the report under physics/RUN/."""
    from kit.scale.curves import run_names

    runs = [run for rows in series.values() for row in rows for run in row.runs]
    names = run_names(runs)
    return {
        f"physics/{names[i]}/{png.name}": read_bytes(png, "physics plot", MAX_PNG_BYTES)
        for i, run in enumerate(runs)
        if run.physics
        for png in _physics_pngs(run)
    }


def _physics_raw(run: RunResult) -> str:
    p = run.physics
    if p is None or p.score_raw is None:
        return "-"
    return f"{p.score_raw:.3g} ({_opt3(p.score_reference_data)} / {_opt3(p.score_reference_empty)})"


def _opt3(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def _overhead_markdown(overheads: list[Overhead]) -> list[str]:
    if not overheads:
        return []
    lines = [
        "## Container vs bare",
        "",
        "| Series (bare) | Container | Nodes | Container (s) | Bare (s) | Overhead | Runs (c/b) "
        "| Peak RSS/rank, container / bare (GB) | Lowest MemAvailable, container / bare (GB) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for o in overheads:
        low, high = o.percent_range
        lines.append(
            f"| `{o.layout.name}` | "
            f"{o.container.container}"
            f"{'@' + o.container.image_digest.split(':')[-1][:12] if o.container.image_digest else ''} "
            f"| {o.nodes} | "
            f"{o.inside.seconds_per_epoch:.2f} [{o.inside.seconds_min:.2f}–{o.inside.seconds_max:.2f}] "
            f"| {o.bare.seconds_per_epoch:.2f} [{o.bare.seconds_min:.2f}–{o.bare.seconds_max:.2f}] "
            f"| {o.percent:+.1f}% [{low:+.1f}–{high:+.1f}] | {o.inside.repeats}/{o.bare.repeats} | "
            f"{_gb_pair(o.peak_rss_bytes())} | {_gb_pair(o.memory_available_bytes())} |"
        )
    return lines + [
        "",
        "Overhead = (container - bare) / bare of the median wall epochs; [range] "
        "pairs the extremes of the repeats. Peak RSS: the largest rank's; MemAvailable: "
        "the lowest any node had at an epoch's end (both medians over the repeats).",
        "",
    ]


def _gb_pair(pair: tuple[float | None, float | None]) -> str:
    return " / ".join("-" if v is None else f"{v / 1e9:.2f}" for v in pair)


def _reference_markdown(ref: PaperTable, series: dict[Series, list[Row]]) -> list[str]:
    """The paper's table as printed, with the notes on its misprints, and which series it compares
    with.
    """
    lines = [f"## Reference: {ref.label}", "", f"{ref.caption}; {ref.setup}.", ""]
    if ref.seconds_per_epoch:
        lines += [
            "| Nodes | Training time (s) per epoch | Linear time (s) per epoch | Scaling efficiency |",
            "|---:|---:|---:|---:|",
        ]
        lines += [
            f"| {n} | {t:g} | {lin:g} | {'-' if e is None else f'{e:g}%'} |"
            for n, t, lin, e in zip(
                ref.nodes, ref.seconds_per_epoch, ref.linear_seconds, ref.efficiency_percent
            )
        ]
    else:
        lines += [
            "| Nodes | Measured performance (PFLOP/s) | % of theoretical peak (FP64, max clock) |",
            "|---:|---:|---:|",
        ]
        lines += [
            f"| {n} | {p:g} | {c:g}% |"
            for n, p, c in zip(ref.nodes, ref.pflop_per_second, ref.percent_of_peak)
        ]
    lines += [""] + [f"> Note: {note}" for note in ref.notes] + ([""] if ref.notes else [])
    unlike = [key.name for key in series if not comparable_with_paper(key)]
    if unlike and ref.seconds_per_epoch:
        lines += [
            f"Times not compared with the paper's (epoch of {PAPER_EPOCH_EVENTS:,} showers, "
            f"{PAPER_PRESET} model): {', '.join(f'`{n}`' for n in unlike)} (another preset or epoch size); "
            "only efficiencies are drawn beside the paper's.",
            "",
        ]
    return lines


def _overhead_reference_markdown(ref: OverheadTable) -> list[str]:
    lines = [
        f"## Reference: {ref.label}",
        "",
        f"{ref.caption}; {ref.setup}.",
        "",
        f"| Benchmark | {ref.quantity} with Charliecloud | without | Overhead |",
        "|---|---:|---:|---:|",
    ]
    lines += [
        f"| {b} | {a:g} | {w:g} | {o:+.2f}% |"
        for b, a, w, o in zip(
            ref.benchmarks, ref.with_container, ref.without_container, ref.overhead_percent()
        )
    ]
    what = (
        "extra time per image (without / with - 1)"
        if ref.higher_is_better
        else "less free memory with the container (1 - with / without)"
    )
    return (
        lines
        + [
            "",
            f"Overhead here: {what}, as the measured overhead above is extra time per epoch.",
            "",
        ]
        + [f"> Note: {note}" for note in ref.notes]
        + [""]
    )


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}%"


def _peak(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}%"


def _opt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _num(value: float) -> str:
    return f"{value:,.0f}" if value >= 1000 else f"{value:.4g}"


def _physics_columns(run: RunResult) -> dict:
    p = run.physics
    return {
        "physics_status": run.physics_status,
        "physics_problem": run.validation and run.validation.reason,
        "physics_score": p and p.score,
        "physics_score_raw": p and p.score_raw,
        "physics_reference_data": p and p.score_reference_data,
        "physics_reference_empty": p and p.score_reference_empty,
    }


def _csv(series: dict[Series, list[Row]]) -> str:
    """One line per run, full precision, with its series, its row's medians, linear time and
    efficiency.
    """
    curves = ("losses", "step_losses", "physics", "validation")  # in report.md and _physics_columns
    settings = ("mpi_fabric", "horovod_settings")  # as K=V text
    lines = [
        {
            "series": key.name,
            **{k: v for k, v in asdict(run).items() if k not in curves + settings},
            **{k: settings_text(getattr(run, k)) for k in settings},
            "fft_convolutions": " ".join(run.fft_convolutions),
            **_physics_columns(run),
            "data_stall_percent": run.data_stall_percent,
            "repeats": row.repeats,
            "median_epoch_seconds": row.seconds_per_epoch,
            "linear_seconds": row.linear_seconds,
            "efficiency_percent": row.efficiency_percent,
        }
        for key, rows in series.items()
        for row in rows
        for run in row.runs
    ]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(lines[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(lines)
    return buf.getvalue()
