"""Property tests over the files `kit scale` and `kit study` write and read back: results JSON, the
sweep's jobs file, tune files and tune's measured records, study specs and study ledgers.

Each file is generated or mutated from one the kit wrote (wrong top-level types, wrongly typed
fields, numbers at and past any bound: 1e308, 400-digit integers, NaN and infinities written as
JSON, deep nesting) and fed through the library functions behind `kit scale collect|report|tune` and
`kit study plan|run|status|report`. The property everywhere: the reader accepts the input and what it
returns is consistent (every number bounded), or it raises KitError in one line; never another
exception, and nothing is written outside the directory under test.

KIT_HYPOTHESIS_PROFILE=long (tests/conftest.py) runs each property with many more examples."""

from __future__ import annotations

import json
import math
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable
from unittest import mock

import pytest
import yaml
from hypothesis import event, example, given
from hypothesis import strategies as st

from kit.errors import KitError
from kit.scale import runs, sweep_jobs, tune
from kit.scale.plan import make_plan, write_plan
from kit.slurm.jobs import JOB_ID_RE
from kit.slurm.ledger import read_jobs
from kit.slurm.result import run_result
from kit.slurm.script import RunFiles
from kit.study import evaluate, ledger
from kit.study.ledger import MAX_OBJECTIVE
from tests.scale.builders import write_run
from tests.study.fakes import spec_file

RUN = "n4-r4-t12"
JOB = "12"
BIG = int("1" * 400)

# -- generated values ---------------------------------------------------------------------------------

HOSTILE_NUMBERS = st.sampled_from(
    [
        BIG,
        -BIG,
        2**64,
        2**96 + 1,
        10**13,
        10**15 + 1,
        1e308,
        -1e308,
        1e24 * 1.01,
        5e-324,
        0,
        -1,
        0.0,
        -0.0,
        float("nan"),
        float("inf"),
        float("-inf"),
        True,
        False,
    ]
)
HOSTILE_TEXT = st.sampled_from(
    [
        "",
        "x\ny",
        "\x00",
        "a" * 5000,
        "12,13",
        "-1",
        "1e308",
        "NaN",
        "../../etc/passwd",
        "\u2028",
        "$(touch pwned)",
    ]
)
LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    HOSTILE_NUMBERS,
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    HOSTILE_TEXT,
)
JSON_VALUES = st.recursive(
    LEAVES,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=10,
)
DEEP = st.integers(1, 200_000).map(lambda n: "[" * n + "]" * n)


def one_line(exc: KitError) -> str:
    text = str(exc)
    assert text and "\n" not in text and "\r" not in text, repr(text)
    return text


@contextmanager
def nothing_written_outside(root: Path, inside: Path) -> Iterator[None]:
    """Every entry under ``root`` but those under ``inside`` is as it was; the working directory
    too.
    """

    def snapshot(top: Path) -> dict[str, tuple]:
        seen = {}
        for dirpath, dirnames, filenames in os.walk(top):
            for name in dirnames + filenames:
                p = Path(dirpath, name)
                if p == inside or inside in p.parents:
                    continue
                st_ = p.lstat()
                seen[str(p)] = (st_.st_mode, st_.st_size, st_.st_mtime_ns)
        return seen

    before, cwd = snapshot(root), sorted(os.listdir("."))
    yield
    assert snapshot(root) == before and sorted(os.listdir(".")) == cwd


@contextmanager
def scratch(tmp_path_factory, name: str) -> Iterator[Path]:
    """A new directory for one example, removed after it: thousands of examples (the long profile)
    neither fill the disk nor make each snapshot walk every earlier example's files."""
    top = tmp_path_factory.mktemp(name)
    try:
        yield top
    finally:
        shutil.rmtree(top, ignore_errors=True)


def dumps(value: Any) -> str:
    """JSON as any writer (or editor) could leave it: NaN and Infinity spelled as Python writes
    them.
    """
    return json.dumps(value, allow_nan=True)


def mutated(base: dict, keys: list[str]) -> st.SearchStrategy[str]:
    """JSON text: ``base`` with a key set to a generated value, removed, or the whole document replaced
    (another top-level type, deep nesting, truncation)."""

    def edit(changes: list[tuple[str, Any]]) -> str:
        doc = dict(base)
        for key, value in changes:
            if value is _DROP:
                doc.pop(key, None)
            else:
                doc[key] = value
        return dumps(doc)

    change = st.tuples(
        st.sampled_from(keys),
        st.one_of(JSON_VALUES, st.lists(LEAVES, min_size=1, max_size=3), st.just(_DROP)),
    )
    return st.one_of(
        st.lists(change, min_size=1, max_size=3).map(edit),
        JSON_VALUES.map(dumps),
        DEEP,
        st.integers(0, 200).map(lambda n: dumps(base)[:n]),
    )


_DROP = object()

# -- results JSON ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    """A one-run sweep whose plan validates its run and whose job ledger names job 12."""
    d = tmp_path_factory.mktemp("sweep") / "sweep"
    write_plan(
        make_plan(
            "supermuc-ng",
            [4],
            [4],
            threads=None,
            walltime="02:00:00",
            train_args=("--synthetic-dir", "s"),
            validate=True,
        ),
        d,
    )
    (d / "jobs.yaml").write_text(
        yaml.safe_dump({RUN: [{"job": JOB, "submitted": "2026-01-01T00:00:00"}]})
    )
    (d / "results").mkdir()
    return d


@pytest.fixture(scope="module")
def good_results(tmp_path_factory) -> dict:
    path = write_run(
        tmp_path_factory.mktemp("r") / "r.json",
        4,
        100.0,
        job={"slurm_job_id": JOB},
        physics={"score": 0.5, "score_raw": 1.0},
    )
    return json.loads(path.read_text())


def _completed(jobs: list[str]) -> dict[str, str]:
    """squeue as the fake sees it: every id the kit asks about must be one (never a list or an
    option).
    """
    assert all(isinstance(j, str) and JOB_ID_RE.fullmatch(j) for j in jobs), jobs
    return {j: "COMPLETED" for j in jobs}


def _checked(call: Callable[[], Any]) -> Any:
    """call()'s value, or None where it raised one line of KitError."""
    try:
        return call()
    except KitError as exc:
        one_line(exc)
        return None


RESULTS_KEYS = [
    "status",
    "job",
    "physics",
    "nodes",
    "ranks",
    "showers_per_second",
    "flop_per_second",
    "peak_rss_bytes_per_rank",
    "epoch_wall_times",
    "losses",
    "step_losses",
    "schema",
    "error",
    "percent_of_peak_fp32_measured",
    "steps_per_epoch",
    "site",
    "train_events",
    "mpi_fabric",
]


@given(data=st.data())
@example(data={})  # the file as gan3d wrote it
@example(data={"peak_rss_bytes_per_rank": [None, "a"]})  # tune's figures: a crash in max() or int()
@example(data={"peak_rss_bytes_per_rank": [float("inf")]})
@example(data={"showers_per_second": 1e308})  # recommended by tune as the fastest layout
@example(data={"showers_per_second": BIG})
@example(
    data='{"schema": "gan3d-run/2", "status": "ok", "nodes": ' + "1" * 5000 + "}"
)  # past int("...")'s limit
def test_any_results_file_is_read_or_refused_in_one_line_by_every_reader(sweep, good_results, data):
    text = (
        dumps({**good_results, **data})
        if isinstance(data, dict)
        else data
        if isinstance(data, str)
        else data.draw(mutated(good_results, RESULTS_KEYS), "results")
    )
    path = sweep / "results" / f"{RUN}.json"
    path.write_text(text)
    with (
        nothing_written_outside(sweep.parent, path),
        mock.patch.object(sweep_jobs, "job_states", _completed),
    ):
        [loaded] = _checked(lambda: runs.load_results([path])) or [None]
        event("report reads it" if loaded else "report refuses it")
        if loaded is not None:  # every figure the report computes with is bounded
            for value in (
                loaded.nodes,
                loaded.ranks,
                loaded.batch_per_rank,
                loaded.epoch_seconds,
                loaded.showers_per_second,
                loaded.flop_per_second,
            ):
                assert math.isfinite(value) and 0 <= value <= runs.MAX_RATE
        _checked(lambda: run_result(RunFiles(sweep.absolute(), RUN), JOB))
        statuses = _checked(lambda: sweep_jobs.collect(sweep))
        assert statuses is not None, "collect names a damaged result with its run"
        for s in statuses:
            assert "\n" not in s.problem and "\n" not in s.physics_problem, s
        sweep_jobs.collect_document(sweep, statuses)
        _checked(lambda: sweep_jobs.results(sweep, []))
        _checked(lambda: sweep_jobs.unscored(sweep))
        measured = tune.read_measured(tune.Layout(4, 12), path)
        assert "\n" not in measured.problem
        if measured.showers_per_second is not None:
            assert 0 < measured.showers_per_second <= runs.MAX_RATE
            assert 0 < measured.peak_rss_bytes_per_rank <= 2**62
            assert (
                measured.percent_of_peak is None or 0 <= measured.percent_of_peak <= runs.MAX_RATE
            )
        for objective in ("showers_per_second", "physics_score", "validation.d_loss"):
            try:
                value = evaluate.read_objective(path, objective)
            except evaluate.EvaluationFailed as exc:
                one_line(exc)
            else:
                assert math.isfinite(value) and abs(value) <= MAX_OBJECTIVE


# -- the sweep's jobs file ------------------------------------------------------------------------------

JOB_IDS = st.one_of(st.from_regex(r"[0-9]{1,12}(_[0-9]{1,4})?", fullmatch=True), LEAVES)
ENTRIES = st.one_of(st.fixed_dictionaries({"job": JOB_IDS, "submitted": LEAVES}), JSON_VALUES)
JOBS_DOCS = st.one_of(
    st.dictionaries(
        st.one_of(st.just(RUN), st.text(max_size=8), st.integers()),
        st.lists(ENTRIES, max_size=3) | JSON_VALUES,
        max_size=3,
    ),
    JSON_VALUES,
)
JOBS_TEXT = st.one_of(
    JOBS_DOCS.map(lambda doc: yaml.safe_dump(doc, allow_unicode=True)),
    st.integers(1, 300).map(
        lambda n: f"{RUN}: " + "[" * n + "]" * n + "\n"
    ),  # deeper: an example below
    st.just(
        "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
        + "".join(
            f"{c}: &{c} [" + ", ".join([f"*{p}"] * 10) + "]\n"
            for p, c in zip("abcdefgh", "bcdefghi")
        )
    ),
    st.just(f"{RUN}: !!python/object/apply:os.system [true]\n"),
    st.binary(max_size=60).map(lambda b: b.decode("latin-1")),
)


@given(text=JOBS_TEXT)
@example(text=yaml.safe_dump({RUN: [{"job": 10**400, "submitted": "x"}]}))
@example(text=f"{RUN}:\n- job: .nan\n- job: .inf\n")
@example(text=f"{RUN}:\n- job: {'9' * 5000}\n")
@example(text=f"{RUN}: " + "[" * 200_000 + "]" * 200_000 + "\n")
def test_any_jobs_file_is_read_or_refused_in_one_line_and_only_job_ids_reach_slurm(sweep, text):
    path = sweep / "jobs.yaml"
    kept = path.read_bytes()
    try:
        path.write_bytes(text.encode("utf-8", "surrogateescape"))
        with (
            nothing_written_outside(sweep.parent, path),
            mock.patch.object(sweep_jobs, "job_states", _completed),
        ):
            jobs = _checked(lambda: read_jobs(sweep))
            event("read" if jobs is not None else "refused")
            if jobs is not None:
                assert all(JOB_ID_RE.fullmatch(str(e["job"])) for h in jobs.values() for e in h)
            _checked(lambda: sweep_jobs.collect(sweep))
            _checked(lambda: sweep_jobs.cancel(sweep, dry_run=True))
            _checked(lambda: sweep_jobs.results(sweep))
            _checked(lambda: sweep_jobs.unscored(sweep))
    finally:
        path.write_bytes(kept)


# -- tune files -----------------------------------------------------------------------------------------

GOOD_TUNE = {
    "kit_tune": tune.TUNE_FORMAT,
    "site": "/x/laptop.yaml",
    "site_name": "laptop",
    "nodes": 1,
    "cpu": "x",
    "best": {
        "ranks_per_node": 2,
        "threads_per_rank": 1,
        "precision": "fp32",
        "showers_per_second": 3.0,
    },
    "layouts": [
        {
            "ranks_per_node": 2,
            "threads_per_rank": 1,
            "precision": "fp32",
            "showers_per_second": 3.0,
            "peak_rss_bytes_per_rank": 2**30,
            "percent_of_peak": 20.0,
            "percent_of_peak_denominator": "measured fp32 peak",
            "results": "r.json",
            "problem": None,
        }
    ],
}
TUNE_KEYS = ["kit_tune", "site_name", "best", "layouts", "nodes"]
BEST = st.fixed_dictionaries({"ranks_per_node": LEAVES, "threads_per_rank": LEAVES})


@given(
    doc=st.one_of(
        st.lists(
            st.tuples(st.sampled_from(TUNE_KEYS), st.one_of(JSON_VALUES, BEST)), max_size=3
        ).map(lambda changes: {**GOOD_TUNE, **dict(changes)}),
        JSON_VALUES,
    )
)
@example(doc=GOOD_TUNE)
def test_any_tune_file_is_read_or_refused_in_one_line(tmp_path_factory, doc):
    with scratch(tmp_path_factory, "tune") as top:
        _tune_file_read_or_refused(top / "tune", doc)


def _tune_file_read_or_refused(d: Path, doc: Any) -> None:
    from kit.site import load_site

    d.mkdir()
    path = d / tune.TUNE_NAME
    path.write_text(yaml.safe_dump(doc, allow_unicode=True))
    with nothing_written_outside(d.parent, d):
        layout = _checked(lambda: tune.load_best(path, load_site("laptop")))
        event("read" if layout else "refused")
        if layout is not None:
            assert all(isinstance(v, int) and 1 <= v <= 10**6 for v in layout)
        _checked(lambda: tune.check_outputs(d))
    assert doc is not GOOD_TUNE or layout == (2, 1)


# -- study specs and ledgers ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def planned_study(tmp_path_factory) -> Path:
    """A study of two evaluations on this machine, as `kit study plan` writes it."""
    from kit.study.studydir import plan_study

    top = tmp_path_factory.mktemp("study")
    d = top / "planned"
    plan_study(spec_file(top, evaluations=2), "laptop", d)
    return d


class _Reached(Exception):
    """The run read everything and came to start an evaluation: where this test stops it."""


class _StubBackend:
    def start(self, run):
        raise _Reached

    poll = cancel = start


GOOD_RECORDS = [
    {"event": "started", "t": 1.7e9},
    {"event": "proposed", "eval": "e0001", "config": {"lr": 0.001}, "prediction": None, "t": 1.7e9},
    {"event": "submitted", "eval": "e0001", "how": "local", "pid": 4242, "t": 1.7e9},
    {"event": "finished", "eval": "e0001", "objective": 2.5, "result": "/r.json", "t": 1.7e9},
    {
        "event": "proposed",
        "eval": "e0002",
        "config": {"lr": 0.002},
        "prediction": {"mean": 1.0, "sd": 0.5},
        "t": 1.7e9,
    },
    {"event": "failed", "eval": "e0002", "error": "step 0 exited 1\nlog tail", "t": 1.7e9},
]
HEADER_KEYS = [
    "format",
    "site",
    "site_name",
    "parallel",
    "pilot",
    "walltime",
    "pair",
    "python",
    "objective",
    "direction",
    "strategy",
    "created",
    "event",
]
RECORD_KEYS = [
    "event",
    "eval",
    "config",
    "prediction",
    "how",
    "pid",
    "job",
    "attached",
    "objective",
    "result",
    "error",
    "t",
]


# values a ledger holds somewhere: edited into another key, they are wrong only in their place
PLAUSIBLE = st.one_of(
    st.floats(-1e3, 1e3),
    st.integers(1, 2000),
    st.sampled_from(
        [
            "e0001",
            "e0002",
            "e0003",
            "local",
            "slurm",
            "pilot",
            "12345",
            "minimize",
            "maximize",
            "01:00:00",
            None,
            True,
        ]
    ),
)


@st.composite
def ledgers(draw) -> list[str]:
    """The ledger's lines: the good ones with a few keys changed or dropped, lines replaced by any JSON
    value, deep nesting or bytes, a header naming another site file."""
    lines: list[Any] = [None] + [dict(r) for r in GOOD_RECORDS]
    for _ in range(draw(st.integers(0, 3))):
        i = draw(st.integers(0, len(lines) - 1))
        how = draw(st.sampled_from(["key", "key", "key", "line", "insert", "delete"]))
        keys = HEADER_KEYS if i == 0 else RECORD_KEYS
        if how == "key" and not isinstance(lines[i], str):
            key, value = (
                draw(st.sampled_from(keys)),
                draw(st.one_of(PLAUSIBLE, JSON_VALUES, st.just(_DROP))),
            )
            target = dict(lines[i] or {})
            if value is _DROP:
                target.pop(key, None)
            else:
                target[key] = value
            lines[i] = target
        elif how == "line":
            lines[i] = draw(st.one_of(JSON_VALUES.map(dumps), DEEP))
        elif how == "insert":
            lines.insert(
                i + 1,
                draw(
                    st.one_of(
                        JSON_VALUES.map(dumps),
                        DEEP,
                        st.fixed_dictionaries(
                            {
                                "event": st.sampled_from(ledger.KINDS),
                                "eval": st.sampled_from(["e0001", "e0003", "x"]),
                            },
                            optional={k: JSON_VALUES for k in RECORD_KEYS[2:]},
                        ),
                    )
                ),
            )
        elif len(lines) > 1:
            del lines[i]
    return lines


SITES = ["laptop", "supermuc-ng", "/nonexistent/site.yaml"]


SPEC_KEYS = ["kit_study", "parameters", "fixed", "objective", "budget", "strategy", "seed"]
SPEC_CHANGES = st.one_of(
    st.just([]), st.lists(st.tuples(st.sampled_from(SPEC_KEYS), JSON_VALUES), max_size=2)
)


@given(lines=ledgers(), site=st.sampled_from(SITES), spec_changes=SPEC_CHANGES)
@example(lines=[None] + GOOD_RECORDS, site="laptop", spec_changes=[])
@example(
    lines=[None] + GOOD_RECORDS,
    site="laptop",
    spec_changes=[("parameters", {"lr": {"type": "float", "low": 0.5, "high": 0.9}})],
)  # configs outside it
def test_any_ledger_is_read_or_refused_in_one_line_by_status_report_and_run(
    planned_study, tmp_path_factory, lines, site, spec_changes
):
    with scratch(tmp_path_factory, "s") as top:
        _ledger_read_or_refused(planned_study, top / "study", lines, site, spec_changes)


def _ledger_read_or_refused(
    planned_study: Path, d: Path, lines: list, site: str, spec_changes: list
) -> None:
    from kit.commands.study import status_document
    from kit.site import load_site
    from kit.study import report, run
    from kit.study.studydir import open_study

    shutil.copytree(planned_study, d)
    header = json.loads((d / ledger.NAME).read_text().splitlines()[0])
    if site != "laptop":
        header["site"] = str(load_site(site).path) if site in SITES[:2] else site
    text = [
        json.dumps({**header, **(lines[0] or {})}) if not isinstance(lines[0], str) else lines[0]
    ]
    text += [line if isinstance(line, str) else json.dumps(line) for line in lines[1:]]
    (d / ledger.NAME).write_text("\n".join(text) + "\n")
    if spec_changes:  # study.yaml edited since kit study plan copied it
        spec = yaml.safe_load((d / "study.yaml").read_text())
        spec.update(spec_changes)
        (d / "study.yaml").write_text(yaml.safe_dump(spec, allow_unicode=True))
    with nothing_written_outside(d.parent, d):
        led = _checked(lambda: ledger.read(d))
        if led is not None:
            for ev in led.evaluations.values():
                assert ev.objective is None or abs(ev.objective) <= MAX_OBJECTIVE
                assert all(
                    isinstance(v, (str, bool)) or abs(v) <= ledger.MAX_VALUE
                    for v in ev.config.values()
                )
            assert 1 <= int(led.header.get("parallel") or 1) <= ledger.MAX_PARALLEL
        opened = _checked(lambda: open_study(d))
        event(
            "study opened" if opened else "ledger read, study refused" if led else "ledger refused"
        )
        doc = _checked(lambda: status_document(d))
        assert (opened is None) == (doc is None)
        if opened is not None:
            table = report.rows(opened[3], opened[1].direction)
            report.best_configs(table, opened[1].direction)
            run.progress(opened[3], opened[1])
            written = _checked(
                lambda: report.write_report(d)
            )  # the ledger as read: into DIR/report only
            assert written is not None and all(p.parent == d / report.REPORT_DIR for p in written)
        from kit.study import pilot

        stub = lambda *a, **k: _StubBackend()  # what backend_for checks runs; no evaluation starts
        with (
            mock.patch.object(run, "LocalBackend", stub),
            mock.patch.object(run, "SlurmBackend", stub),
            mock.patch.object(pilot, "PilotBackend", stub),
        ):
            try:
                _checked(lambda: run.run_study(d, poll_seconds=0))
            except _Reached:
                assert opened is not None, "the run started an evaluation of a study status refused"


NUMBERS = st.one_of(st.floats(-2.0, 2.0), st.integers(-3, 64), HOSTILE_NUMBERS)
# values near the ones a study holds, so that some edited studies still plan
SPEC_VALUES = {
    "kit_study": st.sampled_from([1, 2, "1", None]),
    "seed": st.one_of(st.integers(-5, 2**33), HOSTILE_NUMBERS),
    "budget": st.fixed_dictionaries(
        {}, optional={"evaluations": NUMBERS, "wall_time": HOSTILE_TEXT | st.just("1h")}
    ),
    "strategy": st.sampled_from(
        ["grid", "random", "mbo", "bayes", {"type": "mbo", "trees": 10}, {"type": "random"}]
    ),
    "parameters": st.dictionaries(
        st.sampled_from(["lr", "batch-size", "epochs", "optimizer", "x\ny"]),
        st.fixed_dictionaries(
            {"type": st.sampled_from(["float", "int", "choice", "log"])},
            optional={
                "low": NUMBERS,
                "high": NUMBERS,
                "log": LEAVES,
                "values": st.lists(NUMBERS | HOSTILE_TEXT, max_size=3),
            },
        ),
        min_size=1,
        max_size=2,
    ),
    "fixed": st.dictionaries(
        st.sampled_from(["synthetic", "preset", "batch-size", "epochs", "lr", "results"]),
        NUMBERS | HOSTILE_TEXT | st.just("tiny"),
        max_size=3,
    ).map(lambda fixed: {"synthetic": 64, "preset": "tiny", "batch-size": 4, "epochs": 1, **fixed}),
    "objective": st.fixed_dictionaries(
        {
            "metric": st.sampled_from(
                ["showers_per_second", "physics_score", "validation.d_loss", "loss", ""]
            )
        },
        optional={"direction": st.sampled_from(["minimize", "maximize", "up", 1])},
    ),
}


@given(
    changes=st.lists(
        st.sampled_from(SPEC_KEYS).flatmap(
            lambda key: st.tuples(st.just(key), SPEC_VALUES[key] | JSON_VALUES)
        ),
        min_size=1,
        max_size=2,
    )
)
@example(changes=[("seed", BIG)])
@example(changes=[("budget", {"evaluations": 1e308})])
@example(changes=[("parameters", {"lr": {"type": "float", "low": float("nan"), "high": 1.0}})])
def test_any_study_spec_is_planned_or_refused_in_one_line_and_writes_only_its_study(
    tmp_path_factory, changes
):
    with scratch(tmp_path_factory, "spec") as top:
        _spec_planned_or_refused(top, changes)


def _spec_planned_or_refused(top: Path, changes: list) -> None:
    from kit.study.studydir import open_study, plan_study

    spec = yaml.safe_load(spec_file(top).read_text())
    spec.update(changes)
    path = top / "edited.yaml"
    path.write_text(yaml.safe_dump(spec, allow_unicode=True))
    d = top / "study"
    with nothing_written_outside(top, d):
        header = _checked(lambda: plan_study(path, "laptop", d))
        event("planned" if header else "refused")
        assert (header is None) == (not d.exists())
        if header is not None:
            assert _checked(lambda: open_study(d)) is not None


HUGE = (
    65 * 2**20
)  # past every reader's bound (the ledger's 64 MiB is the largest): sparse, so cheap to make


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", ["results", "jobs", "tune", "ledger", "spec"])
def test_a_huge_file_is_refused_in_one_line_after_reading_at_most_its_bound(
    sweep, planned_study, tmp_path, name
):
    """A file grown (or replaced by a sparse one) past any size the kit writes is refused after at most
    its reader's bound, in one line naming the file."""
    from kit.site import load_site
    from kit.study.studydir import load_spec

    study = tmp_path / "study"
    shutil.copytree(planned_study, study)
    path, read = {
        "results": (tmp_path / "r.json", lambda p: runs.load_results([p])),
        "jobs": (tmp_path / "jobs.yaml", lambda p: read_jobs(p.parent)),
        "tune": (tmp_path / tune.TUNE_NAME, lambda p: tune.load_best(p, load_site("laptop"))),
        "ledger": (study / ledger.NAME, lambda p: ledger.read(p.parent)),
        "spec": (study / "study.yaml", load_spec),
    }[name]
    with open(path, "wb") as fh:
        fh.truncate(HUGE)
    with pytest.raises(KitError, match="larger than") as caught:
        read(path)
    assert one_line(caught.value).startswith(f"{path}: ")
