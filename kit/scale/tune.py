"""`kit scale tune`: find the best ranks-per-node x
threads-per-rank layout of a node by measuring it.

The seed paper's key finding (4 ranks x 12 threads ran 3.5x faster than 1 x 48 on SuperMUC-NG) was
found by hand; here each layout the node allows runs a short training of its own, and the one with
the most showers/s is written to DIR/tune.yaml, which `kit scale plan --layout best` reads. On a
site with Slurm the trainings are a plan of one node submitted with `kit scale submit`'s machinery;
on a `local` site (the laptop) they run one after another under the site's MPI launcher.
"""

from __future__ import annotations

import dataclasses
import io
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import yaml

from kit.atomic import atomic_write_bytes, atomic_write_text, own_dir
from kit.errors import KitError
from kit.excerpt import one_line, shown
from kit.readfile import read_json, read_tail
from kit.scale import sweep_jobs
from kit.scale.local import local_launcher
from kit.scale.local import run_bounded as _run_bounded  # by this name: tests stand in for it
from kit.scale.plan import Plan, write_plan
from kit.scale.runs import BYTE_COUNTS, MAX_RATE
from kit.schema import Bad, Field, Names, Section, check_doc, check_value
from kit.site import Site, load_site
from kit.site.model import FILE_FIX as SITE_FILE_FIX
from kit.slurm.script import RunFiles
from kit.slurm.spec import RunSpec, check_run, matching, one_machine
from kit.yamlbound import load_tagged

TUNE_FORMAT = 1
TUNE_NAME = "tune.yaml"
PLOT_NAME = "tune.png"
PRECISIONS = ("fp32", "bf16")  # what gan3d train computes in; fp32 is its default
ITEX = ("off", "on")  # gan3d train --itex: Intel Extension for TensorFlow (its own stack's Python)
# The tuner sets these for every layout's run (a short, bounded, measured training); a user's value
# would make the layouts' runs incomparable or unbounded.
TUNE_FLAGS = (
    "--epochs",
    "--steps-per-epoch",
    "--validation-steps",
    "--measure-peak",
    "--precision",
    "--checkpoint-dir",
    "--resume",
    "--threads",
    "--ranks",
    "--results",
    "--site",
    "--itex",
)
LOG_TAIL_BYTES = 4096


@dataclass(frozen=True)
class Layout:
    """One candidate: ranks per node x threads per rank, in one precision, with ITEX or without."""

    ranks_per_node: int
    threads_per_rank: int
    precision: str = "fp32"
    itex: str = "off"

    @property
    def run_id(self) -> str:
        on = "-itex" if self.itex == "on" else ""
        return f"r{self.ranks_per_node}-t{self.threads_per_rank}-{self.precision}{on}"

    @property
    def name(self) -> str:
        on = " itex" if self.itex == "on" else ""
        return f"{self.ranks_per_node}x{self.threads_per_rank} {self.precision}{on}"


@dataclass(frozen=True)
class Measured:
    """What one layout's short training gave; `problem` says why a layout has no figures."""

    layout: Layout
    results: Path
    showers_per_second: float | None = None
    peak_rss_bytes_per_rank: int | None = None
    percent_of_peak: float | None = None
    percent_of_peak_denominator: str | None = None
    cpu: str | None = None
    problem: str = ""
    forms: dict[str, str] | None = None  # each convolution's form, as the run's results say
    forms_source: str | None = None  # where the run's forms came from: probe, cache, a fixed table


def candidate_layouts(
    site: Site,
    given: list[tuple[int, int]] | None = None,
    *,
    precisions: tuple[str, ...] = ("fp32",),
    itex: tuple[str, ...] = ("off",),
) -> list[Layout]:
    """`given` (ranks, threads) pairs, or every split of the node's cores into ranks x threads with
    all cores busy (48 cores: 1x48, 2x24, 3x16, 4x12, ... 48x1), in each precision, ITEX off and/or
    on. A layout the node cannot hold is an error naming it."""
    cores = site.node.cores
    pairs = given or [(r, cores // r) for r in range(1, cores + 1) if cores % r == 0]
    for r, t in pairs:
        if r < 1 or t < 1 or r * t > site.node.hardware_threads:
            raise KitError(
                f"layout {r}x{t}: a {site.name} node has {cores} cores x {site.node.threads_per_core} "
                f"hardware threads = {site.node.hardware_threads}",
                fix=f"give layouts RxT with R x T <= {site.node.hardware_threads}",
            )
    bad = [p for p in precisions if p not in PRECISIONS]
    if bad:
        raise KitError(
            f"--precision {','.join(bad)}: gan3d train does not compute in it",
            fix=f"give {' or '.join(PRECISIONS)}",
        )
    bad = [i for i in itex if i not in ITEX]
    if bad or not itex:
        raise KitError(f"--itex {','.join(itex)}: give off, on or off,on", fix="e.g. --itex off,on")
    return [
        Layout(r, t, p, i)
        for p in dict.fromkeys(precisions)
        for r, t in dict.fromkeys(pairs)
        for i in dict.fromkeys(itex)
    ]


def parse_layouts(text: str) -> list[tuple[int, int]]:
    """ "1x2,2x1" -> [(1, 2), (2, 1)]."""
    out = []
    for word in (w.strip() for w in text.split(",") if w.strip()):
        r, sep, t = word.partition("x")
        if not (sep and r.isdigit() and t.isdigit() and r.isascii() and t.isascii()):
            raise KitError(
                f"--layouts {shown(text)}: {shown(word)} is not RANKSxTHREADS", fix="e.g. 1x48,4x12"
            )
        out.append((int(r), int(t)))
    if not out:
        raise KitError("--layouts is empty", fix="e.g. 1x2,2x1")
    return out


def _site_file(site: Site) -> str:
    """The site config's file, which the sweep's jobs and tune.yaml name."""
    if site.path is None:
        raise KitError(f"site {site.name} has no file", fix="give --site a site name or a file")
    return str(Path(site.path).resolve())


def tune_args(layout: Layout, steps: int, peak_seconds: float) -> tuple[str, ...]:
    """The training arguments every layout gets: one short epoch, peaks measured in its
    precision.
    """
    args: tuple[str, ...] = (
        "--epochs",
        "1",
        "--steps-per-epoch",
        str(steps),
        "--validation-steps",
        "1",
        "--measure-peak",
        f"{peak_seconds:g}",
    )
    args += ("--itex", "on") if layout.itex == "on" else ()
    return args + (("--precision", layout.precision) if layout.precision != "fp32" else ())


def check_train_args(train_args: tuple[str, ...]) -> None:
    owned = matching(train_args, TUNE_FLAGS)
    if owned:
        raise KitError(
            f"training arguments {' '.join(owned)}: "
            f"kit scale tune sets {', '.join(TUNE_FLAGS)} itself for every layout",
            fix="drop them (use --steps, --peak-seconds, --precision)",
        )


def run_local(
    site: Site,
    layouts: list[Layout],
    out_dir: Path,
    *,
    train_args: tuple[str, ...],
    steps: int,
    peak_seconds: float,
    timeout: float,
    python: str = sys.executable,
    itex_python: str | None = None,
    on_start: Callable[[Layout], None] | None = None,
) -> list[Measured]:
    """Each layout in turn under the site's MPI launcher on this machine (one node, nothing
    queued). ITEX-on layouts run with ``itex_python`` (the ITEX stack's; default ``python``), asked
    first whether ITEX loads there: where it does not, they are refused with its reason, not run."""
    launcher = local_launcher(site)
    done = [
        f.result
        for f in (RunFiles(out_dir.absolute(), layout.run_id) for layout in layouts)
        if f.result.exists()
    ]
    if done:
        raise KitError(
            f"{done[0]}: an earlier tune's result is there",
            fix="tune into a new --dir (nothing was run)",
        )
    measured = []
    refused = itex_refusal(itex_python or python) if any(x.itex == "on" for x in layouts) else ""
    for layout in layouts:
        files = RunFiles(out_dir.absolute(), layout.run_id)
        if layout.itex == "on" and refused:
            measured.append(Measured(layout, files.result, problem=refused))
            continue
        if on_start:
            on_start(layout)
        log = own_dir(files.run_dir / "logs", "the tune's logs/") / f"{layout.run_id}.out"
        own_dir(files.result.parent, "the tune's results/")  # gan3d train writes the result there
        cmd = [
            *launcher,
            "-n",
            str(layout.ranks_per_node),
            (itex_python or python) if layout.itex == "on" else python,
            "-m",
            "gan3d",
            "train",
            *train_args,
            *tune_args(layout, steps, peak_seconds),
            "--threads",
            str(layout.threads_per_rank),
            "--ranks",
            str(layout.ranks_per_node),
            "--site",
            str(site.path),
            "--results",
            str(files.result),
        ]
        if layout.ranks_per_node * layout.threads_per_rank > site.node.cores:
            cmd.append("--oversubscribe")
        code = _run_bounded(cmd, log, timeout)
        problem = (
            ""
            if code == 0
            else (f"exit {code}" if code is not None else f"killed after {timeout:g} s")
            + f"; log {log}: {_tail(log)}"
        )
        measured.append(read_measured(layout, files.result, problem))
    return measured


def sibling_itex_python(python: str = sys.executable) -> str | None:
    """The ITEX stack's Python beside the running venv (scripts/setup.sh makes .venv, --itex
    .venv-itex beside it), if there is one: the default for this machine's ITEX-on layouts."""
    venv = Path(python).absolute().parent.parent  # not resolved: .venv may be a link elsewhere
    path = venv.with_name(".venv-itex") / "bin" / "python"
    return str(path) if path.is_file() and venv.name != ".venv-itex" else None


def itex_refusal(python: str) -> str:
    """ "" where ITEX loads in ``python``, else the refusal the ITEX-on layouts get: ITEX's reason."""
    from gan3d.itex import probe

    state = probe(python)
    return "" if state.loaded else f"refused: ITEX does not load in {python}: {state.reason}"


def _tail(log: Path) -> str:
    try:
        text = read_tail(log, LOG_TAIL_BYTES).decode(errors="replace")
    except (OSError, KitError):
        return "(no log)"
    lines = [line for line in text.splitlines() if line.strip()]
    return " | ".join(lines[-3:]) or "(empty)"


def run_slurm(
    site: Site,
    layouts: list[Layout],
    out_dir: Path,
    *,
    train_args: tuple[str, ...],
    steps: int,
    peak_seconds: float,
    timeout: float,
    walltime: str,
    nodes: int = 1,
    pair: str | None = None,
    python: str = "python3",
    itex_python: str | None = None,
    poll_seconds: float = 5.0,
    on_poll: Callable[[list[sweep_jobs.RunStatus]], None] | None = None,
) -> list[Measured]:
    """One plan per precision and ITEX setting (a plan's runs share their training arguments) in
    OUT/PRECISION (OUT/PRECISION-itex), submitted and waited for with kit scale submit's and
    collect's code; ITEX-on plans run ``itex_python`` (the site's ITEX stack)."""
    measured = []
    for precision, itex in dict.fromkeys((x.precision, x.itex) for x in layouts):
        group = [x for x in layouts if (x.precision, x.itex) == (precision, itex)]
        args = tuple(train_args) + tune_args(group[0], steps, peak_seconds)
        runs = [
            RunSpec(
                run_id=layout.run_id,
                nodes=nodes,
                ranks_per_node=layout.ranks_per_node,
                threads_per_rank=layout.threads_per_rank,
                walltime=walltime,
                train_args=args,
            )
            for layout in group
        ]
        for spec in runs:
            check_run(site, spec)
        sweep = out_dir / (precision + ("-itex" if itex == "on" else ""))
        py = (itex_python or python) if itex == "on" else python
        write_plan(
            Plan(
                site=_site_file(site),
                walltime=walltime,
                runs=runs,
                pair=pair,
                python=py,
                train_args=args,
            ),
            sweep,
        )
        submitted = sweep_jobs.submit(sweep)
        refused = [s for s in submitted if s.note.startswith("not submitted")]
        if refused:
            raise KitError(
                f"{refused[0].run_id} {refused[0].note}",
                fix="clear what the note names, then tune again in a new --dir",
                where=str(sweep),
            )
        status = {
            s.run_id: s
            for s in sweep_jobs.wait(
                sweep, poll_seconds=poll_seconds, timeout=timeout, on_poll=on_poll
            )
        }
        for layout in group:
            s = status[layout.run_id]
            problem = (
                "" if s.result else (s.problem or f"job {s.job} ended {s.state} without a result")
            )
            measured.append(
                read_measured(layout, RunFiles(sweep.absolute(), layout.run_id).result, problem)
            )
    return measured


def _cpu(value: str) -> Bad | None:
    return (
        None
        if len(value) <= 200
        else Bad("expected one line of at most 200 characters naming the CPU")
    )


def _some_rank(counts: list) -> Bad | None:
    return None if any(counts) else Bad("no rank gave its peak memory")


def _word(pattern: str, what: str) -> Callable[[str], Bad | None]:
    rule = re.compile(pattern)
    return lambda text: None if rule.fullmatch(text) else Bad(f"{shown(text)} is not {what}")


_FORM_WORD = _word(r"[a-z0-9_]{1,32}", "a layer or form name")
# gan3d.layerforms' record: how each convolution ran, and where the choice came from
LAYER_FORMS = Section(
    {
        "forms": Field(
            Names(Field("str", check=_FORM_WORD), name=_FORM_WORD),
            check=lambda forms: None if 0 < len(forms) <= 64 else Bad("expected 1 to 64 layers"),
        ),
        "source": Field("str", check=_word(r"[a-z0-9 ()-]{1,64}", "a source of forms")),
    },
    open=True,
)


def _measured_section(percent_key: str) -> Section:
    """The figures of a results file a tune reads (the rest of the file is the report's)."""
    return Section(
        {
            "showers_per_second": Field("float", positive=True, maximum=MAX_RATE),
            "peak_rss_bytes_per_rank": dataclasses.replace(BYTE_COUNTS, check=_some_rank),
            percent_key: Field("float", nullable=True, required=False, minimum=0, maximum=MAX_RATE),
            "cpu": Field("str", nullable=True, required=False, check=_cpu),
            # absent in results of kits before it: unknown
            "layer_forms": Field(LAYER_FORMS, nullable=True, required=False),
        },
        open=True,
    )


def read_measured(layout: Layout, path: Path, problem: str = "") -> Measured:
    """The figures of one layout's results JSON (problem: the run's, or what is wrong with the
    file).
    """
    if problem:
        return Measured(layout, path, problem=problem)
    fix = "run kit scale tune again in a new --dir"
    try:
        record = read_json(path, "gan3d results file", fix)
    except FileNotFoundError:
        return Measured(layout, path, problem=f"{path}: no results file")
    except KitError as exc:
        return Measured(layout, path, problem=str(exc))
    if not isinstance(record, dict) or record.get("status") != "ok":
        return Measured(
            layout,
            path,
            problem=f"{path}: the run did not finish "
            f"({shown(record.get('error') if isinstance(record, dict) else record)})",
        )
    # Each figure bounded as it is read: the file may have been edited, and 1e308 showers/s or an
    # infinite byte count would be the recommendation (or crash the plot).
    percent_key = f"percent_of_peak_{layout.precision}_measured"
    try:
        figures = check_value(
            record, path, _measured_section(percent_key), what="gan3d results file"
        )
    except KitError as exc:
        return Measured(layout, path, problem=KitError(exc.what, fix=fix, where=exc.where).line())
    rate, rss, percent, cpu, forms = (
        figures[k]
        for k in (
            "showers_per_second",
            "peak_rss_bytes_per_rank",
            percent_key,
            "cpu",
            "layer_forms",
        )
    )
    return Measured(
        layout=layout,
        results=path,
        showers_per_second=float(rate),
        peak_rss_bytes_per_rank=max(x for x in rss if x),
        percent_of_peak=None if percent is None else float(percent),
        percent_of_peak_denominator=None
        if percent is None
        else f"measured {layout.precision} peak",
        cpu=cpu,
        forms=dict(forms["forms"]) if forms else None,
        forms_source=forms["source"] if forms else None,
    )


def forms_line(m: Measured) -> str:
    """ "fft d_conv1,d_conv2; packed g_conv2 (probe)": a layout's forms in one line."""
    if not m.forms:
        return "not recorded"
    by_form: dict[str, list[str]] = {}
    for layer, form in m.forms.items():
        by_form.setdefault(form, []).append(layer)
    return "; ".join(f"{f} {','.join(sorted(names))}" for f, names in sorted(by_form.items())) + (
        f" ({m.forms_source})"
    )


def best(measured: list[Measured]) -> Measured:
    """The layout with the most showers/s; an error naming every layout's problem if none ran."""
    ran = [m for m in measured if m.showers_per_second is not None]
    if not ran:
        raise KitError(
            "no layout produced figures: "
            + ", ".join(f"{m.layout.name} ({one_line(m.problem, 600)})" for m in measured),
            fix="clear the first layout's problem, then tune again in a new --dir",
        )
    return max(ran, key=lambda m: m.showers_per_second or 0.0)  # ran: all have a figure


def check_outputs(out_dir: Path) -> None:
    """Refuse, before any training, a DIR whose tune.yaml or tune.png the kit did not write: they
    are replaced at the end, and the kit never overwrites what it did not make."""
    tune_file, png = out_dir / TUNE_NAME, out_dir / PLOT_NAME
    fix = "give kit scale tune a new --dir"
    if tune_file.exists() or tune_file.is_symlink():
        try:
            ours = (
                tune_file.is_file()
                and not tune_file.is_symlink()
                and bool(_load_tune(tune_file, fix))
            )
        except KitError:
            ours = False
        if not ours:
            raise KitError("not a tune file kit scale tune wrote", fix=fix, where=str(tune_file))
    elif png.exists() or png.is_symlink():
        raise KitError(f"there without a {TUNE_NAME}, so not the kit's", fix=fix, where=str(png))


def write_tune(
    site: Site, nodes: int, measured: list[Measured], *, out_dir: Path
) -> tuple[Path, Path]:
    """DIR/tune.yaml (the recommendation and every layout's figures) and DIR/tune.png,
    atomically.
    """
    top = best(measured)
    doc = {
        "kit_tune": TUNE_FORMAT,
        "site": _site_file(site),
        "site_name": site.name,
        "nodes": nodes,
        "cpu": top.cpu,
        "best": {
            "ranks_per_node": top.layout.ranks_per_node,
            "threads_per_rank": top.layout.threads_per_rank,
            "precision": top.layout.precision,
            "itex": top.layout.itex,
            "showers_per_second": top.showers_per_second,
            "forms": dict(top.forms) if top.forms else None,  # a copy: no YAML alias
            "forms_source": top.forms_source,
        },
        "layouts": [
            {
                "ranks_per_node": m.layout.ranks_per_node,
                "threads_per_rank": m.layout.threads_per_rank,
                "precision": m.layout.precision,
                "itex": m.layout.itex,
                "showers_per_second": m.showers_per_second,
                "peak_rss_bytes_per_rank": m.peak_rss_bytes_per_rank,
                "percent_of_peak": m.percent_of_peak,
                "percent_of_peak_denominator": m.percent_of_peak_denominator,
                "forms": m.forms,
                "forms_source": m.forms_source,
                "results": str(m.results),
                "problem": m.problem or None,
            }
            for m in measured
        ],
    }
    # rendered before anything is written
    png = plot(measured, top, f"{site.name}, {nodes} node(s)")
    out_dir.mkdir(parents=True, exist_ok=True)
    # again: the trainings took minutes, and a link or a file may be there now
    check_outputs(out_dir)
    atomic_write_bytes(out_dir / PLOT_NAME, png)
    atomic_write_text(out_dir / TUNE_NAME, yaml.safe_dump(doc, sort_keys=False, width=110))
    return out_dir / TUNE_NAME, out_dir / PLOT_NAME


def plot(measured: list[Measured], top: Measured, title: str) -> bytes:
    """Showers/s per layout (the best one marked), each bar labelled with its % of measured peak,
    and peak memory per rank beside."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(max(8.0, 1.4 * len(measured) + 4), 4.5))
    rate_ax, mem_ax = fig.subplots(1, 2)
    names = [m.layout.name for m in measured]
    rates = [m.showers_per_second or 0.0 for m in measured]
    bars = rate_ax.bar(names, rates, color=["C2" if m is top else "C0" for m in measured])
    for bar, m in zip(bars, measured):
        label = (
            "failed"
            if m.showers_per_second is None
            else (
                f"{m.percent_of_peak:.0f}% of\n{m.percent_of_peak_denominator}"
                if m.percent_of_peak is not None
                else "peak not measured"
            )
        )
        rate_ax.annotate(
            label,
            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
            ha="center",
            va="bottom",
            fontsize="x-small",
        )
    rate_ax.set_ylabel("showers/s (job, first step excluded)")
    rate_ax.set_title(f"{title}: best {top.layout.name} (green)", fontsize="small")
    mem_ax.bar(names, [(m.peak_rss_bytes_per_rank or 0) / 2**30 for m in measured], color="C1")
    mem_ax.set_ylabel("peak memory per rank (GiB)")
    for ax in (rate_ax, mem_ax):
        ax.set_xlabel("ranks per node x threads per rank")
        ax.tick_params(axis="x", labelrotation=45, labelsize="small")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return buf.getvalue()


def through_slurm(site: Site, nodes: int, said_how: bool) -> bool:
    """Whether the tune runs as Slurm jobs (a site with Slurm) or here; refused in one line where
    the request does not fit the site: Slurm needs --image or --no-container, a local site one
    node."""
    if site.scheduler.type == "slurm":
        if not said_how:
            raise KitError(
                f"site {site.name} runs jobs through Slurm: say how",
                fix="give --image IMAGE (ch-run with the host MPI) "
                "or --no-container (the site's own Python)",
            )
        return True
    one_machine(site, [nodes])
    return False


# What `--layout best` reads of a tune file; the layouts' figures are for people and the plot.
TUNE_SCHEMA = Section(
    {
        "site_name": Field("str"),
        "best": Field(
            Section(
                {
                    "ranks_per_node": Field("int", positive=True, maximum=10**6),
                    "threads_per_rank": Field("int", positive=True, maximum=10**6),
                },
                open=True,
            )
        ),
    },
    open=True,
)


def _load_tune(path: Path, fix: str):
    return load_tagged(
        path,
        "layout tune file",
        "kit_tune",
        version=TUNE_FORMAT,
        fix=fix,
        missing="no tune file here",
        missing_fix=fix,
        wrote="a file kit scale tune wrote",
    )


def best_layout(
    site: Site, sweep_dir: Path, *, tune_file: Path | None, layout_given: bool, asked: bool
) -> tuple[Path, tuple[int, int]]:
    """`kit scale plan --layout best [--tune FILE]`: the tune file read (default DIR/tune.yaml) and
    its best ranks per node x threads per rank. ``layout_given``: --ranks-per-node/--threads were
    given too (refused: the tune decides them); ``asked``: --layout best was (a --tune file alone is
    refused)."""
    if not asked:
        raise KitError("--tune FILE is read with --layout best", fix="add --layout best")
    if layout_given:
        raise KitError(
            "--layout best takes ranks per node and threads from the tune file",
            fix="drop --ranks-per-node/--threads, or drop --layout best",
        )
    path = tune_file or sweep_dir / TUNE_NAME
    return path, load_best(path, site)


def load_best(path: Path, site: Site) -> tuple[int, int]:
    """(ranks per node, threads per rank) recommended by a tune.yaml for this site; anything else
    (another site's tune, a damaged file) is one line naming the file and key."""
    fix = (
        f"run kit scale tune --site {site.name} --dir DIR, "
        f"then kit scale plan --layout best --tune DIR/{TUNE_NAME}"
    )
    doc = _load_tune(path, fix)
    if doc.value.get("site_name") != site.name:
        raise KitError(
            f"key site_name is {shown(doc.value.get('site_name'))}, "
            f"but the plan is for site {site.name}: a layout tuned on another machine",
            fix=fix,
            where=doc.where("site_name"),
        )
    best = check_doc(doc, TUNE_SCHEMA, "layout tune file", fix=fix)["best"]
    return best["ranks_per_node"], best["threads_per_rank"]


def site_of(name: str) -> Site:
    """The site config by name or path; a tune needs the file (its runs read it)."""
    site = load_site(name)
    if site.path is None:
        raise KitError(f"site {site.name}: a tune needs a site config file", fix=SITE_FILE_FIX)
    return site
