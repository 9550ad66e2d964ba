"""The node-count axis every figure of the report and the forecast draws: the counts measured as
ticks on a base-2 log scale (kit.scale.plots and kit.scale.curves alike)."""

from __future__ import annotations


def node_axis(ax, ylabel: str, title: str, *, ticks: list[int], log_y: bool = False) -> None:
    from matplotlib.ticker import FixedLocator, NullLocator, ScalarFormatter

    ax.set_xscale("log", base=2)
    # node counts are whole numbers: the ones measured
    ax.xaxis.set_major_locator(FixedLocator(ticks))
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
