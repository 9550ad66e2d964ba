"""The report's figures: the paper's Figures 1-2 (time per epoch, measured vs linear), efficiency, FLOP
rate, and container vs bare. Error bars are the repeats' min-max around their median."""
from __future__ import annotations

import io
from typing import TYPE_CHECKING

from kit.scale.overhead import Overhead
from kit.scale.paper import OverheadTable, PaperTable, Reference
from kit.scale.runs import Series

if TYPE_CHECKING:
    from kit.scale.report import Row


def plots(series: dict[Series, list["Row"]], overheads: list[Overhead], ref: Reference | None) -> dict[str, bytes]:
    """PNG bytes by file name; container_overhead.png only when some layout ran both ways."""
    from matplotlib.figure import Figure

    from kit.scale.report import comparable_with_paper, flop_unit

    time_fig, eff_fig, flop_fig = Figure(figsize=(7, 4.5)), Figure(figsize=(7, 4.5)), Figure(figsize=(12, 4.5))
    t_ax, e_ax = time_fig.subplots(), eff_fig.subplots()
    p_ax, c_ax = flop_fig.subplots(1, 2)
    unit, scale = flop_unit(max(r.flop_per_second for rows in series.values() for r in rows))
    nodes_seen: set[int] = set()
    for i, (key, rows) in enumerate(series.items()):
        style, name, nodes = {"color": f"C{i % 10}"}, key.name, [r.nodes for r in rows]
        nodes_seen.update(nodes)
        median = [r.seconds_per_epoch for r in rows]
        spread = [[m - r.seconds_min for m, r in zip(median, rows)], [r.seconds_max - m for m, r in zip(median, rows)]]
        t_ax.errorbar(nodes, median, yerr=spread, fmt="o-", capsize=3, label=f"{name} measured", **style)
        t_ax.plot(nodes, [r.linear_seconds for r in rows], ":", label=f"{name} linear", **style)
        if len(rows) > 1:
            eff = [r.efficiency_percent for r in rows[1:]]
            ranges = [r.efficiency_range for r in rows[1:]]
            e_ax.errorbar(nodes[1:], eff, yerr=[[e - lo for e, (lo, _) in zip(eff, ranges)],
                                                [hi - e for e, (_, hi) in zip(eff, ranges)]],
                          fmt="o-", capsize=3, label=name, **style)
        p_ax.plot(nodes, [r.flop_per_second / scale for r in rows], "o-", label=name, **style)
        peak = [(r.nodes, r.percent_of_peak) for r in rows if r.percent_of_peak is not None]
        if peak:
            c_ax.plot(*zip(*peak), "o-", label=name, **style)
    if isinstance(ref, PaperTable) and ref.seconds_per_epoch:
        if all(comparable_with_paper(key) for key in series):
            t_ax.plot(ref.nodes, ref.seconds_per_epoch, "k--", label=ref.label)
        else:
            _say(t_ax, f"{ref.label}: not drawn, another preset or epoch size (report.md)", y=0.04)
        e_ax.plot(ref.nodes[1:], ref.efficiency_percent[1:], "k--", label=ref.label)
        nodes_seen.update(ref.nodes)
    elif isinstance(ref, PaperTable):
        p_ax.plot(ref.nodes, [p * 1e15 / scale for p in ref.pflop_per_second], "k--", label=ref.label)
        c_ax.plot(ref.nodes, ref.percent_of_peak, "k--", label=f"{ref.label}, of FP64 peak")
        nodes_seen.update(ref.nodes)
    if not e_ax.lines:
        _say(e_ax, "needs two node counts in a series", y=0.5)
    ticks = sorted(nodes_seen)
    _finish(t_ax, "time per epoch (s, wall clock)", "Time per epoch: measured (median, min-max) vs linear", ticks,
            log_y=True)
    _finish(e_ax, "scaling efficiency (%)", "Scaling efficiency: linear / measured time", ticks)
    _finish(p_ax, f"achieved {unit}", "Achieved FLOP rate", ticks, log_y=True)
    _finish(c_ax, "% of theoretical peak", "% of the site's fp32 theoretical peak", ticks)
    out = {"time_per_epoch.png": _png(time_fig), "efficiency.png": _png(eff_fig), "flops.png": _png(flop_fig)}
    if overheads:
        out["container_overhead.png"] = _overhead_plot(overheads, ref if isinstance(ref, OverheadTable) else None)
    return out


def _overhead_plot(overheads: list[Overhead], ref: OverheadTable | None) -> bytes:
    """One bar per layout and node count: the median overhead, the repeats' range as its error bar."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(max(6.0, 1.2 * len(overheads) + 2), 4.5))
    ax = fig.subplots()
    labels = [f"{o.layout.ranks_per_node}x{o.layout.threads_per_rank}/b{o.layout.batch_per_rank}\n"
              f"{o.layout.preset or '?'}, {o.nodes} node{'s' if o.nodes > 1 else ''}" for o in overheads]
    values = [o.percent for o in overheads]
    errors = [[v - o.percent_range[0] for v, o in zip(values, overheads)],
              [o.percent_range[1] - v for v, o in zip(values, overheads)]]
    ax.bar(range(len(values)), values, yerr=errors, capsize=4, color="C0", label="measured (median, range)")
    ax.set_xticks(range(len(values)), labels, fontsize="small")
    ax.axhline(0, color="black", linewidth=0.8)
    if ref is not None:
        for (bench, percent), style in zip(zip(ref.benchmarks, ref.overhead_percent()), ("--", ":")):
            ax.axhline(percent, color="k", linestyle=style, label=f"{ref.label.split(' (')[0]}: {bench}")
    ax.set_ylabel("container overhead (% of bare time per epoch)")
    ax.set_title("Container vs bare: (container - bare) / bare wall epoch")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize="small")
    return _png(fig)


def _say(ax, text: str, y: float) -> None:
    ax.text(0.5, y, text, transform=ax.transAxes, ha="center", va="center", fontsize="small", color="0.3")


def _finish(ax, ylabel: str, title: str, ticks: list[int], log_y: bool = False) -> None:
    from matplotlib.ticker import FixedLocator, NullLocator, ScalarFormatter

    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(ticks))  # node counts are whole numbers: the ones measured
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(ScalarFormatter())
    if len(ticks) == 1:
        ax.set_xlim(ticks[0] / 1.5, ticks[0] * 1.5)
    if log_y:
        ax.set_yscale("log")
    ax.set_xlabel("nodes")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize="medium")
    ax.grid(True, which="both", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small")


def _png(fig) -> bytes:
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return buf.getvalue()
