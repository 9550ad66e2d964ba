"""`kit scale report`: a sweep's results JSONs become the paper's scaling tables (md, csv) and plots (png).

Definitions follow the paper (section 5): the base of a series is its smallest node count n0, linear time
per epoch is T(n0) * n0 / n, and scaling efficiency is linear time / measured time.
"""
from __future__ import annotations

import csv
import io
import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from statistics import mean
from typing import Any, Callable, Iterable, Optional, Sequence, Tuple

from gan3d.results import SCHEMA
from kit.atomic import atomic_write_bytes
from kit.errors import KitError
from kit.excerpt import control_character, shown
from kit.mpi.elf import VENDOR_MARKERS
from kit.readfile import read_json
from kit.scale.paper import PaperTable, paper_table

# site, ranks/node, threads/rank, batch/rank, MPI vendor (Optional: a runtime alias, and the core runs on 3.9)
Config = Tuple[Optional[str], int, int, int, str]
_RERUN = "fix: re-run the job with the current gan3d, or leave this file out"
_COUNT = (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1, "a whole number >= 1")
_RATE = (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0,
         "a number >= 0")
_SECONDS = (lambda v: _RATE[0](v) and v > 0, "a number of seconds > 0")
_TEXT = (lambda v: isinstance(v, str), "a string")
_NAME = (lambda v: isinstance(v, str) and control_character(v) is None, "one line of text")  # headings, labels


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
    epoch_seconds: float
    epoch_seconds_from: str  # which measurement epoch_seconds is, for the CSV
    showers_per_second: float
    flop_per_second: float
    percent_of_peak: float | None  # None: not known, or a results file from before per-precision peaks
    percent_of_peak_denominator: str | None  # e.g. "fp32 theoretical peak", "fp32 measured peak"
    percent_of_peak_fp64_max_clock: float | None  # the seed paper's convention (its Table 7)
    mpi_library_version: str | None

    @property
    def mpi(self) -> str:
        """The MPI vendor the job ran on: container MPI vs host MPI is the paper's Table 3 vs 4."""
        text = (self.mpi_library_version or "").encode()
        return next((vendor for vendor, marker in VENDOR_MARKERS if marker in text), "unknown-mpi")

    @property
    def config(self) -> Config:
        """The series a run belongs to: runs of one series differ only in their node count."""
        return (self.site, self.ranks_per_node, self.threads_per_rank, self.batch_per_rank, self.mpi)


@dataclass(frozen=True)
class Row:
    """One line of a scaling table in the paper's layout, plus throughput and FLOP rate."""

    nodes: int
    seconds_per_epoch: float
    linear_seconds: float
    efficiency_percent: float | None  # None for the base row (the paper's "-")
    showers_per_second: float
    pflop_per_second: float
    percent_of_peak: float | None
    percent_of_peak_denominator: str | None
    percent_of_peak_fp64_max_clock: float | None
    run: RunResult


def load_results(paths: Iterable[str | os.PathLike]) -> list[RunResult]:
    """Read results JSONs; any file the report cannot use is a KitError naming it, the key and the fix."""
    return [_load_one(Path(p)) for p in paths]


def _load_one(path: Path) -> RunResult:
    try:
        record = read_json(path, "gan3d results file", "fix: re-run the job, or leave this file out")
    except FileNotFoundError:
        raise KitError(f"{path}: no such file; fix: pass the results JSON of a finished job") from None
    if not isinstance(record, dict) or record.get("schema") != SCHEMA:
        found = f"schema {shown(record.get('schema'))}" if isinstance(record, dict) else type(record).__name__
        raise KitError(f"{path}: not a gan3d results file ({found}, expected schema {SCHEMA!r}); "
                       "fix: pass the JSON written by `python -m gan3d train --results FILE`")
    if record.get("status") == "failed":
        raise KitError(f"{path}: the run failed ({shown(record.get('error'))}), it has no figures to report; "
                       "fix: leave this file out, or re-run the job")
    seconds, source = _epoch_seconds(record, path)
    counts = {k: _value(record, path, k, _COUNT) for k in
              ("nodes", "ranks", "ranks_per_node", "threads_per_rank", "batch_per_rank", "global_batch")}
    return RunResult(
        path=path, site=_value(record, path, "site", _NAME, nullable=True), **counts,
        epoch_seconds=seconds, epoch_seconds_from=source,
        showers_per_second=_value(record, path, "showers_per_second", _RATE),
        flop_per_second=_value(record, path, "flop_per_second", _RATE),
        # Files from before per-precision peaks lack these three: loaded, their % of peak shown as "—".
        percent_of_peak=_optional(record, path, "percent_of_peak", _RATE),
        percent_of_peak_denominator=_optional(record, path, "percent_of_peak_denominator", _NAME),
        percent_of_peak_fp64_max_clock=_optional(record, path, "percent_of_peak_fp64_max_clock", _RATE),
        mpi_library_version=_value(record, path, "mpi_library_version", _TEXT, nullable=True))


def _value(record: dict, path: Path, key: str, check: tuple[Callable[[Any], bool], str],
           nullable: bool = False) -> Any:
    """record[key] if it passes `check` (or is null where null is allowed); else a KitError naming the key."""
    if key not in record:
        raise KitError(f"{path}: key {key!r} is missing; {_RERUN}")
    value = record[key]
    if value is None and nullable:
        return None
    if not check[0](value):
        raise KitError(f"{path}: key {key!r} is {shown(value)}, expected {check[1]}; {_RERUN}")
    return value


def _optional(record: dict, path: Path, key: str, check: tuple[Callable[[Any], bool], str]) -> Any:
    """record[key] checked, or None when an older gan3d did not write it."""
    return _value(record, path, key, check, nullable=True) if key in record else None


def _epoch_seconds(record: dict, path: Path) -> tuple[float, str]:
    """The whole-epoch estimate when the run made one; else measured epochs after the first (which
    holds the tf.function tracing), unless the first is all there is."""
    if record.get("full_epoch_seconds_estimate") is not None:
        return _value(record, path, "full_epoch_seconds_estimate", _SECONDS), "full_epoch_seconds_estimate"
    if "epoch_times" not in record:
        raise KitError(f"{path}: key 'epoch_times' is missing and 'full_epoch_seconds_estimate' is not set, "
                       f"so there is no time per epoch; {_RERUN}")
    times = record["epoch_times"]
    if not isinstance(times, list) or not times or not all(_SECONDS[0](t) for t in times):
        raise KitError(f"{path}: key 'epoch_times' is {shown(times)}, expected a list of seconds > 0; {_RERUN}")
    if len(times) > 1:
        return mean(times[1:]), f"mean of epoch_times[1:] ({len(times) - 1} epochs)"
    return times[0], "epoch_times[0] (includes tracing)"


def scaling_table(runs: Sequence[RunResult]) -> list[Row]:
    """One series' rows, sorted by nodes. Linear time is T(n0) * n0 / n with n0 the smallest node count;
    efficiency is linear / measured, None for the base row."""
    if not runs:
        raise KitError("no runs to tabulate; fix: pass at least one results JSON")
    configs = sorted({series_name(r.config) for r in runs})
    if len(configs) > 1:
        raise KitError(f"scaling_table takes one series, got {', '.join(configs)}; fix: group runs by "
                       "RunResult.config (write_report does)")
    ordered = sorted(runs, key=lambda r: r.nodes)
    for a, b in zip(ordered, ordered[1:]):
        if a.nodes == b.nodes:
            raise KitError(f"series {configs[0]} has two runs on {a.nodes} nodes: {a.path} and {b.path}; "
                           "fix: leave one of them out, or report them in separate calls")
    base = ordered[0]
    linear = [base.epoch_seconds * base.nodes / r.nodes for r in ordered]
    return [Row(r.nodes, r.epoch_seconds, lin, None if r is base else 100 * lin / r.epoch_seconds,
                r.showers_per_second, r.flop_per_second / 1e15, r.percent_of_peak, r.percent_of_peak_denominator,
                r.percent_of_peak_fp64_max_clock, r)
            for r, lin in zip(ordered, linear)]


def series_name(config: Config) -> str:
    """A short id for a series, e.g. `supermuc-ng/4x12/b8/intel` (site/ranks per node x threads/batch
    per rank/MPI)."""
    site, ranks, threads, batch, mpi = config
    return f"{site or 'no-site'}/{ranks}x{threads}/b{batch}/{mpi}"


def write_report(runs: Sequence[RunResult], out_dir: str | os.PathLike, reference: str | None = None,
                 title: str | None = None) -> list[Path]:
    """report.md, report.csv and three PNGs in out_dir; everything is rendered before the first write,
    so a bad input leaves out_dir untouched, and each file appears whole (atomic rename)."""
    if not runs:
        raise KitError("no results to report; fix: pass the results JSONs of a sweep")
    ref = paper_table(reference) if reference else None
    groups: dict[Config, list[RunResult]] = {}
    for run in runs:
        groups.setdefault(run.config, []).append(run)
    series = {cfg: scaling_table(groups[cfg]) for cfg in sorted(groups, key=lambda c: (str(c[0]), *c[1:]))}
    outputs = {"report.md": _markdown(series, ref, title).encode(), "report.csv": _csv(series).encode(),
               **_plots(series, ref)}
    out = Path(out_dir)
    for name, data in outputs.items():
        atomic_write_bytes(out / name, data)
    return [out / name for name in outputs]


def _markdown(series: dict[Config, list[Row]], ref: PaperTable | None, title: str | None) -> str:
    runs = sum(len(rows) for rows in series.values())
    lines = [f"# {title or 'Scaling report'}", "",
             f"{runs} runs in {len(series)} series. Time per epoch is the run's whole-epoch estimate, else the "
             "mean of its epochs after the first. Linear time = T(n0) * n0 / n with n0 the series' smallest node "
             "count; scaling efficiency = linear / measured (the paper's definitions). Each % of peak names its "
             "denominator: \"% of peak\" is of the peak in the run's precision, theoretical (site config: cores x "
             "AVX clock x FLOP/cycle) where the site states it, else measured (a dense matmul in that precision by "
             "all ranks at once); \"% of FP64 max-clock peak\" is the seed paper's convention (its Table 7: cores x "
             "max clock x FP64 FLOP/cycle).", ""]
    for cfg, rows in series.items():
        site, ranks, threads, batch, _ = cfg
        mpi = " / ".join(dict.fromkeys(r.run.mpi_library_version or "not recorded" for r in rows))
        lines += [f"## {site or 'no site'}: {ranks} ranks/node × {threads} threads/rank, batch {batch}/rank, "
                  f"MPI: {mpi}", "", f"Series `{series_name(cfg)}` in report.csv.", "",
                  "| Nodes | Training time (s) per epoch | Linear time (s) per epoch | Scaling efficiency "
                  "| Showers/s | PFLOP/s | % of peak | of | % of FP64 max-clock peak |",
                  "|---:|---:|---:|---:|---:|---:|---:|---|---:|"]
        lines += [f"| {r.nodes} | {r.seconds_per_epoch:.2f} | {r.linear_seconds:.2f} | {_pct(r.efficiency_percent)} "
                  f"| {_num(r.showers_per_second)} | {_num(r.pflop_per_second)} | {_peak(r.percent_of_peak)} "
                  f"| {r.percent_of_peak_denominator or '—'} | {_peak(r.percent_of_peak_fp64_max_clock)} |"
                  for r in rows]
        if any(r.percent_of_peak_denominator is None for r in rows):
            lines += ["", "— : no % of peak: the site states no peak for the run and it measured none "
                      "(gan3d train --measure-peak), or its results file predates per-precision peaks "
                      "(re-run it with the current gan3d)."]
        lines.append("")
    return "\n".join(lines + (_reference_markdown(ref) if ref else []))


def _reference_markdown(ref: PaperTable) -> list[str]:
    """The paper's table as printed, with the notes on its misprints."""
    lines = [f"## Reference: {ref.label}", "", f"{ref.caption}; {ref.setup}.", ""]
    if ref.seconds_per_epoch:
        lines += ["| Nodes | Training time (s) per epoch | Linear time (s) per epoch | Scaling efficiency |",
                  "|---:|---:|---:|---:|"]
        lines += [f"| {n} | {t:g} | {lin:g} | {'-' if e is None else f'{e:g}%'} |" for n, t, lin, e in
                  zip(ref.nodes, ref.seconds_per_epoch, ref.linear_seconds, ref.efficiency_percent)]
    else:
        lines += ["| Nodes | Measured performance (PFLOP/s) | % of theoretical peak (FP64, max clock) |",
                  "|---:|---:|---:|"]
        lines += [f"| {n} | {p:g} | {c:g}% |" for n, p, c in zip(ref.nodes, ref.pflop_per_second,
                                                                    ref.percent_of_peak)]
    return lines + [""] + [f"> Note: {note}" for note in ref.notes] + ([""] if ref.notes else [])


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}%"


def _peak(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}%"


def _num(value: float) -> str:
    return f"{value:,.0f}" if value >= 1000 else f"{value:.4g}"


def _csv(series: dict[Config, list[Row]]) -> str:
    """One line per run, full precision, with the series id and the row's linear time and efficiency."""
    lines = [{"series": series_name(cfg), **asdict(row.run), "linear_seconds": row.linear_seconds,
              "efficiency_percent": row.efficiency_percent} for cfg, rows in series.items() for row in rows]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(lines[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(lines)
    return buf.getvalue()


def _plots(series: dict[Config, list[Row]], ref: PaperTable | None) -> dict[str, bytes]:
    """The paper's Figures 1-2 (time per epoch, measured vs linear), efficiency, and FLOP rate."""
    from matplotlib.figure import Figure

    time_fig, eff_fig, flop_fig = Figure(figsize=(7, 4.5)), Figure(figsize=(7, 4.5)), Figure(figsize=(16, 4.5))
    t_ax, e_ax = time_fig.subplots(), eff_fig.subplots()
    p_ax, c_ax, f_ax = flop_fig.subplots(1, 3)
    denominators = set()
    for i, (cfg, rows) in enumerate(series.items()):
        style, name, nodes = {"color": f"C{i % 10}"}, series_name(cfg), [r.nodes for r in rows]
        t_ax.plot(nodes, [r.seconds_per_epoch for r in rows], "o-", label=f"{name} measured", **style)
        t_ax.plot(nodes, [r.linear_seconds for r in rows], ":", label=f"{name} linear", **style)
        if len(rows) > 1:
            e_ax.plot(nodes[1:], [r.efficiency_percent for r in rows[1:]], "o-", label=name, **style)
        p_ax.plot(nodes, [r.pflop_per_second for r in rows], "o-", label=name, **style)
        for denominator in dict.fromkeys(r.percent_of_peak_denominator for r in rows if r.percent_of_peak is not None):
            denominators.add(denominator)  # one line per denominator, named in the legend
            c_ax.plot(*zip(*[(r.nodes, r.percent_of_peak) for r in rows if r.percent_of_peak is not None
                             and r.percent_of_peak_denominator == denominator]), "o-",
                      label=f"{name}, of {denominator}", **style)
        paper = [(r.nodes, r.percent_of_peak_fp64_max_clock) for r in rows if r.percent_of_peak_fp64_max_clock is not None]
        if paper:
            f_ax.plot(*zip(*paper), "o-", label=name, **style)
    if ref and ref.seconds_per_epoch:
        t_ax.plot(ref.nodes, ref.seconds_per_epoch, "k--", label=ref.label)
        e_ax.plot(ref.nodes[1:], ref.efficiency_percent[1:], "k--", label=ref.label)
    elif ref:
        p_ax.plot(ref.nodes, ref.pflop_per_second, "k--", label=ref.label)
        f_ax.plot(ref.nodes, ref.percent_of_peak, "k--", label=ref.label)
    _finish(t_ax, "time per epoch (s)", log_y=True)
    _finish(e_ax, "scaling efficiency (%)")
    _finish(p_ax, "achieved PFLOP/s", log_y=True)
    _finish(c_ax, {0: "% of peak (no run has a denominator)", 1: f"% of {next(iter(denominators), '')}"}.get(
        len(denominators), "% of peak: denominators differ, see legend"))
    _finish(f_ax, "% of FP64 peak at max clock (paper's Table 7)")
    return {"time_per_epoch.png": _png(time_fig), "efficiency.png": _png(eff_fig), "flops.png": _png(flop_fig)}


def _finish(ax, ylabel: str, log_y: bool = False) -> None:
    from matplotlib.ticker import ScalarFormatter

    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(ScalarFormatter())
    if log_y:
        ax.set_yscale("log")
    ax.set_xlabel("nodes")
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small")


def _png(fig) -> bytes:
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return buf.getvalue()
