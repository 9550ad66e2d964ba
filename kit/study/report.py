"""`kit study report DIR`: what the study found, as Markdown + CSV + PNG in DIR/report/.

Everything comes from the ledger: the best
configurations with their objective (median and min-max where one config was evaluated more than
once), the objective of every evaluation in the order they finished with the running best, a
parallel-coordinates plot of the space coloured by objective, and for `mbo` the surrogate's
predicted vs observed objective (the prediction the driver recorded when the searcher proposed
the config: what it expected, knowing only the evaluations finished by then).
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import os
import stat
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit.atomic import write_together
from kit.errors import KitError
from kit.readfile import kind_name, read_bytes
from kit.study import ledger
from kit.study.studydir import Terms, open_study

REPORT_DIR = "report"
TOP = 5
# report.md's
SIGNATURE = "Every evaluation, with its configuration, is in report.csv (in the order they ended)."


@dataclass(frozen=True)
class Row:
    """One evaluation as the report shows it."""

    order: int  # 1-based, in the order evaluations ended
    eval_id: str
    state: str
    objective: float | None
    running_best: float | None
    config: dict[str, Any]
    error: str | None


def rows(led: ledger.Ledger, direction: str) -> list[Row]:
    """Finished and failed evaluations in the order they ended (the ledger's), with the running
    best.
    """
    better = min if direction == "minimize" else max
    best: float | None = None
    out: list[Row] = []
    for ev in sorted(led.done(), key=lambda e: _ended_at(led, e.eval_id)):
        if ev.objective is not None:
            best = ev.objective if best is None else better(best, ev.objective)
        out.append(
            Row(
                order=len(out) + 1,
                eval_id=ev.eval_id,
                state=ev.state,
                objective=ev.objective,
                running_best=best,
                config=ev.config,
                error=_reason(ev.error),
            )
        )
    return out


def _reason(error: str | None) -> str | None:
    """One line of a failure: what failed and the log's last line (the error, usually)."""
    lines = [line.strip() for line in (error or "").splitlines() if line.strip()]
    if not lines:
        return None
    return (lines[0] if len(lines) == 1 else f"{lines[0]} ... {lines[-1]}")[:400]


def _ended_at(led: ledger.Ledger, eval_id: str) -> int:
    return led.end_order.get(eval_id, 10**9)


def best_configs(table: list[Row], direction: str, top: int = TOP) -> list[dict[str, Any]]:
    """Configs ranked by their median objective; repeats of a config give its spread."""
    groups: dict[str, list[tuple[str, float]]] = {}  # config -> (eval, objective) of its repeats
    for row in table:
        if row.objective is not None:
            groups.setdefault(json.dumps(row.config, sort_keys=True), []).append(
                (row.eval_id, row.objective)
            )
    ranked = []
    for key, members in groups.items():
        values = [value for _, value in members]
        ranked.append(
            {
                "config": json.loads(key),
                "median": statistics.median(values),
                "min": min(values),
                "max": max(values),
                "n": len(values),
                "evals": [eval_id for eval_id, _ in members],
            }
        )
    ranked.sort(key=lambda g: g["median"], reverse=direction == "maximize")
    return ranked[:top]


def write_report(study_dir: Path, out: Path | None = None) -> list[Path]:
    spec, t, _, led = open_study(study_dir)
    out = out or study_dir / REPORT_DIR
    table = rows(led, t.direction)
    best = best_configs(table, t.direction)
    names = sorted({k for r in table for k in r.config})
    logs = frozenset(p.name for p in spec.space.params if p.log)
    pngs = {
        "objective.png": plot_objective(table, t),
        "space.png": plot_space(table, names, t, logs=logs),
    }
    if t.strategy == "mbo":
        pairs = surrogate_pairs(led)
        if pairs:
            pngs["surrogate.png"] = plot_surrogate(pairs, t)
    # A study path may hold bytes that are not UTF-8 (they reach the text as surrogates): escaped
    texts = {
        "report.md": to_markdown(study_dir, t, table, best=best, pngs=list(pngs)),
        "report.csv": to_csv(table, names),
    }
    outputs = {
        name: text.encode("utf-8", "backslashreplace") for name, text in texts.items()
    } | pngs
    _check_out(out, list(outputs))
    write_together({out / name: data for name, data in outputs.items()})
    return [out / "report.md", out / "report.csv", *(out / name for name in pngs)]


def _check_out(out: Path, names: list[str]) -> None:
    """DIR/report is the kit's: made here (never through a link at its name), and files at the
    report's names are replaced only where report.md is a regular file this command wrote (its last
    line). A link, a directory, a FIFO or a user's file there is refused in one line and left
    alone."""
    fix = "move it aside, then kit study report again"
    with contextlib.suppress(FileExistsError):
        os.mkdir(out)
    mode = os.lstat(out).st_mode
    if not stat.S_ISDIR(mode):
        raise KitError(
            f"is {kind_name(mode)}, not the report directory kit study makes",
            fix=fix,
            where=str(out),
        )
    there = [name for name in names if os.path.lexists(out / name)]
    if not there:
        return
    try:
        ours = SIGNATURE in read_bytes(
            out / "report.md", "study report", follow_symlinks=False
        ).decode(errors="replace")
    except (OSError, KitError):  # absent, a link, a FIFO, unreadable, huge: not the kit's report
        ours = False
    kinds = {name: os.lstat(out / name).st_mode for name in there}
    odd = next((name for name, m in kinds.items() if not stat.S_ISREG(m)), None)
    if odd is not None or not ours:
        name = odd or there[0]
        raise KitError(
            f"is {kind_name(kinds[name])} that kit study report did not write, "
            "so it is not replaced",
            fix=fix,
            where=str(out / name),
        )


def to_csv(table: list[Row], names: list[str]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["order", "eval", "state", "objective", "running_best", *names, "error"])
    for r in table:
        w.writerow(
            [
                r.order,
                r.eval_id,
                r.state,
                "" if r.objective is None else repr(r.objective),
                "" if r.running_best is None else repr(r.running_best),
                *[_cell(r.config.get(n)) for n in names],
                r.error or "",
            ]
        )
    return buf.getvalue()


def _cell(value: Any) -> str:
    return "" if value is None else repr(value) if isinstance(value, float) else str(value)


def to_markdown(
    study_dir: Path, t: Terms, table: list[Row], *, best: list[dict], pngs: list[str]
) -> str:
    failed = [r for r in table if r.state == "failed"]
    budget = [f"{t.evaluations} evaluations"] if t.evaluations else []
    budget += [f"{t.wall_seconds:g} s of wall time"] if t.wall_seconds else []
    lines = [
        f"# Study {study_dir.absolute().name}",
        "",
        f"Objective: **{t.objective}** ({t.direction}); strategy {t.strategy}; "
        f"budget {' and '.join(budget) or 'none'}; {len(table)} evaluation(s) ended, {len(failed)} failed.",
        "",
        "## Best configurations",
        "",
    ]
    if best:
        lines += [
            f"| rank | {t.objective} (median) | min | max | n | evaluations | config |",
            "|---|---|---|---|---|---|---|",
        ]
        for i, g in enumerate(best, 1):
            config = ", ".join(
                f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                for k, v in sorted(g["config"].items())
            )
            lines.append(
                f"| {i} | {g['median']:.6g} | {g['min']:.6g} | {g['max']:.6g} | {g['n']} | "
                f"{' '.join(g['evals'])} | {config} |"
            )
    else:
        lines.append("No evaluation gave an objective value yet.")
    if failed:
        lines += ["", "## Failed evaluations", ""]
        lines += [f"- {r.eval_id}: {(r.error or '').replace('|', '/')}" for r in failed]
    lines += ["", "## Plots", ""] + [f"![{p}]({p})" for p in pngs] + ["", SIGNATURE, ""]
    return "\n".join(lines)


def _figure(width: float = 7.0, height: float = 4.2):
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height))


def _png(fig) -> bytes:
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return buf.getvalue()


def plot_objective(table: list[Row], t: Terms) -> bytes:
    """Each evaluation's objective in the order they ended, the running best as a step line,
    failures as x.
    """
    fig = _figure()
    ax = fig.subplots()
    ok = [r for r in table if r.objective is not None]
    ax.plot([r.order for r in ok], [r.objective for r in ok], "o", color="C0", label="evaluation")
    ax.step(
        [r.order for r in ok],
        [r.running_best for r in ok],
        where="post",
        color="C2",
        label="running best",
    )
    bad = [r for r in table if r.objective is None]
    values = [r.objective for r in table if r.objective is not None]
    if bad and values:
        floor = min(values)
        ax.plot(
            [r.order for r in bad], [floor] * len(bad), "x", color="C3", label="failed (no value)"
        )
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_xlabel("evaluation (in the order they ended)")
    ax.set_ylabel(f"{t.objective} ({t.direction})")
    ax.set_title(f"{t.objective}: {len(ok)} evaluation(s), {len(bad)} failed", fontsize="small")
    ax.legend(fontsize="small")
    return _png(fig)


def axis_values(
    table: list[Row], name: str, log: bool = False
) -> tuple[list[float | None], list[str]]:
    """A parameter's values on [0, 1] for the plot: numbers scaled to the range tried, on a log
    scale if the parameter is searched on one (labels: the lowest and highest), categories by their
    sorted order (labels: the categories)."""
    values = [r.config.get(name) for r in table]
    present = [v for v in values if v is not None]
    if present and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
        lo, hi = min(present), max(present)
        log = log and lo > 0
        f = (lambda v: math.log(v)) if log else float
        span = (f(hi) - f(lo)) or 1.0
        ends = [f"{lo:.3g}", f"{hi:.3g}" + (" (log)" if log else "")]
        return [None if v is None else (f(v) - f(lo)) / span for v in values], ends
    labels = sorted({str(v) for v in present})
    step = max(1, len(labels) - 1)
    return [None if v is None else labels.index(str(v)) / step for v in values], labels


def plot_space(
    table: list[Row], names: list[str], t: Terms, *, logs: frozenset = frozenset()
) -> bytes:
    """Parallel coordinates: one line per evaluation across the parameters, coloured by
    objective.
    """
    from matplotlib import cm, colormaps, colors

    fig = _figure(max(6.0, 1.6 * len(names) + 2), 4.5)
    ax = fig.subplots()
    values = [r.objective for r in table if r.objective is not None]
    norm = colors.Normalize(min(values, default=0), max(values, default=1))
    cmap = colormaps["viridis" if t.direction == "maximize" else "viridis_r"]
    columns = {n: axis_values(table, n, n in logs) for n in names}
    for i, r in enumerate(table):
        ys = [columns[n][0][i] for n in names]
        xs = [j for j, y in enumerate(ys) if y is not None]
        color = cmap(norm(r.objective)) if r.objective is not None else "lightgrey"
        ax.plot(
            xs,
            [ys[j] for j in xs],
            marker="o",
            color=color,
            alpha=0.8,
            linestyle="-" if r.objective is not None else ":",
        )
    for j, n in enumerate(names):
        ax.axvline(j, color="black", linewidth=0.5)
        labels = columns[n][1]
        if labels:
            for k, label in enumerate(labels):
                ax.annotate(
                    label,
                    (j, k / max(1, len(labels) - 1)),
                    fontsize="x-small",
                    xytext=(3, 0),
                    textcoords="offset points",
                )
    ax.set_xticks(range(len(names)), names, rotation=20, fontsize="small")
    ax.set_ylabel("value, scaled to the range tried")
    fig.colorbar(
        cm.ScalarMappable(norm=norm, cmap=cmap), ax=ax, label=f"{t.objective} (grey dotted: failed)"
    )
    return _png(fig)


def surrogate_pairs(led: ledger.Ledger) -> list[tuple[str, float, float]]:
    """(eval, predicted, observed) of each finished evaluation the mbo searcher proposed with a
    prediction (its surrogate's mean when it proposed it, recorded in the ledger)."""
    return [
        (e.eval_id, float(e.prediction["mean"]), e.objective)
        for e in led.evaluations.values()
        if e.state == "finished"
        and e.objective is not None  # a finished evaluation always has one
        and e.prediction
        and isinstance(e.prediction.get("mean"), (int, float))
    ]


def plot_surrogate(pairs: list[tuple[str, float, float]], t: Terms) -> bytes:
    fig = _figure(5.0, 4.6)
    ax = fig.subplots()
    predicted, observed = [p for _, p, _ in pairs], [o for _, _, o in pairs]
    ax.plot(predicted, observed, "o", color="C0")
    lo, hi = min(predicted + observed), max(predicted + observed)
    ax.plot([lo, hi], [lo, hi], "--", color="grey", label="predicted = observed")
    ax.set_xlabel(f"predicted {t.objective} (surrogate mean when proposed)")
    ax.set_ylabel(f"observed {t.objective}")
    ax.set_title(f"surrogate, {len(pairs)} evaluation(s)", fontsize="small")
    ax.legend(fontsize="small")
    return _png(fig)
