"""The study file: what to search (parameters of `gan3d train`), what stays fixed, what to optimise,
how long, and how to search. People write it; every refusal is one line naming file:line, the
field and the fix, before any training is queued.

Parameter and fixed names are checked against gan3d train's own argument parser, so a typo gets
the valid names and a value gan3d would refuse (an unknown optimizer, a fractional batch size) is
refused here. Besides gan3d's options a study may vary the layout (``ranks-per-node``; gan3d's
``threads`` is the threads per rank) and the three loss weights one by one (``loss-weight-bce``,
``loss-weight-ep``, ``loss-weight-ecal``, joined into gan3d's ``--loss-weights``).
"""

from __future__ import annotations

import argparse
import difflib
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kit.errors import KitError
from kit.excerpt import clipped, control_character, shown
from kit.study import missing_study_extra
from kit.study.space import KINDS, Param, Space, Value, same_value
from kit.yamlbound import Document, load_file

STUDY_FORMAT = 1
TAG = "kit_study"
MAX_STUDY_BYTES = 2**20  # a study file is a page of YAML
MAX_PARAMETERS = 64
MAX_CHOICES = 1000
MAX_EVALUATIONS = 100_000
MAX_WALL_S = 366 * 86400
MAX_MAGNITUDE = (
    1e15  # any number of a study file (seeds are below 2**32, rates and losses far below this)
)
MAX_HEADER_FILES = (
    2000  # data files whose headers kit study plan reads (about 1 ms each); more: gan3d counts
)
MAX_SPLIT_EVENTS = (
    10**7
)  # generated showers the loader splits as gan3d would (bounded work: ~20,000 files)
LAYOUT = "ranks-per-node"  # the kit's layout option: not gan3d's, it shapes the job around it
LOSS_PARTS = ("loss-weight-bce", "loss-weight-ep", "loss-weight-ecal")  # joined into --loss-weights
DEFAULT_LOSS_WEIGHTS = ("8", "0.2", "0.1")  # gan3d train's default --loss-weights
RUNNER_OWNED = (
    "results",
    "checkpoint-dir",
    "resume",
    "keep-checkpoints",
)  # the study runner sets these
# The layout: ranks per node x threads per rank, which the runner passes itself (gan3d's --threads,
# and --oversubscribe where they exceed a node's cores: kit.study.evaluate.layout_args); never in
# train_args.
LAYOUT_WORDS = (LAYOUT, "threads")
DECIDED = (
    "oversubscribe"  # follows from the layout and the site: the runner's, refused in a study file
)
METRIC_RE = re.compile(r"physics_score|showers_per_second|validation\.[a-z][a-z0-9_]{0,40}")
DURATION_RE = re.compile(r"(?:(\d{1,4})d)?(?:(\d{1,5})h)?(?:(\d{1,6})m)?(?:(\d{1,8})s)?")
STRATEGIES = ("grid", "random", "mbo")
DIRECTIONS = ("minimize", "maximize")
FIX = "fix the study file (docs/study.md)"


@dataclass(frozen=True)
class Objective:
    """What a finished evaluation is scored by: a key of its results (``validation.<loss>`` is the
    last epoch's validation loss) and whether smaller or larger is better."""

    metric: str
    direction: str

    def loss(self, value: float) -> float:
        """The value as a quantity to minimise (searchers minimise)."""
        return value if self.direction == "minimize" else -value


@dataclass(frozen=True)
class Budget:
    evaluations: int | None = None
    wall_time_s: int | None = None


@dataclass(frozen=True)
class Strategy:
    """How to search: ``grid`` (``points`` per numeric axis), ``random``, or ``mbo`` (random-forest
    surrogate, qLCB): ``initial`` random points first (None: max(4, 2 x parameters)), then each
    proposal the best of ``candidates`` random points plus ``local`` perturbations of the best
    observations, scored by mean - lambda x sd with lambda ~ Exponential(mean ``lambda_mean``)."""

    kind: str
    points: int = 3
    initial: int | None = None
    candidates: int = 1000
    local: int = 200
    trees: int = 100
    lambda_mean: float = 1.0


@dataclass(frozen=True)
class StudySpec:
    path: str
    space: Space
    fixed: Mapping[str, Value]
    objective: Objective
    budget: Budget
    strategy: Strategy
    seed: int = 0
    flags: frozenset = field(default_factory=frozenset)  # gan3d's on/off options (store_true)

    def train_args(self, config: Mapping[str, Value]) -> list[str]:
        """gan3d train's arguments for one config (fixed values first, then the config's) except the
        layout: ranks per node and threads per rank are ``layout``'s, passed by the runner with the
        --oversubscribe they may need. The loss weights joined; a false flag left out."""
        values = {**self.fixed, **self.space.canonical(config)}
        parts = [values.pop(p, None) for p in LOSS_PARTS]
        if any(v is not None for v in parts):
            base = str(values.get("loss-weights", ",".join(DEFAULT_LOSS_WEIGHTS))).split(",")
            values["loss-weights"] = ",".join(
                _text(v) if v is not None else b for v, b in zip(parts, base)
            )
        for name in LAYOUT_WORDS:
            values.pop(name, None)
        args: list[str] = []
        for name, value in values.items():
            if name in self.flags:
                args += [f"--{name}"] if value is True else []
            else:
                args += [f"--{name}", _text(value)]
        return args

    def layout(self, config: Mapping[str, Value]) -> tuple[int | None, int | None]:
        """(ranks per node, threads per rank) a config asks for; None where neither it nor fixed
        says.
        """
        values = {**self.fixed, **self.space.canonical(config)}
        return values.get(LAYOUT), values.get("threads")


def _bounded(value: int | float) -> bool:
    """Finite and within MAX_MAGNITUDE: YAML reads a 400-digit number as an int, which no float
    holds.
    """
    if isinstance(value, int):
        return value.bit_length() <= 64 and abs(value) <= MAX_MAGNITUDE
    return math.isfinite(value) and abs(value) <= MAX_MAGNITUDE


def _text(value: Value) -> str:
    return (
        repr(value)
        if isinstance(value, float)
        else str(value).lower()
        if isinstance(value, bool)
        else str(value)
    )


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
                f"data {files(self.data)} with validation-data {files(self.held_out)} "
                "(from their headers) have"
            )
        return f"data {files(self.data)} (from the header) with test-fraction {fraction:g} have"


def gan3d_options() -> dict[str, argparse.Action]:
    """gan3d train's options by name (without the dashes), from its own parser."""
    try:
        from gan3d.train import build_parser  # numpy (the study extra brings it); no TensorFlow
    except ModuleNotFoundError as exc:
        raise missing_study_extra(exc, "reading a study file") from None
    return {
        s[2:]: a for a in build_parser()._actions for s in a.option_strings if s.startswith("--")
    }


def load_study(path: str | Path, data_files: bool = False, train_rules: bool = True) -> StudySpec:
    """The study file at ``path``, checked; KitError naming file:line and the field on any problem.
    ``data_files`` (kit study plan): fixed data files must also hold enough showers (their headers).
    ``train_rules`` False: values are not put to gan3d train's number checks again (a planned
    study's copy, checked at its plan: an older kit's study stays readable when gan3d's limits
    narrow)."""
    try:
        doc = load_file(path, "study file", f"fix: {FIX}", limit=MAX_STUDY_BYTES)
    except FileNotFoundError:
        raise KitError(
            f"{path}: no such study file",
            fix="write one (an example: kit/_data/studies/tiny-mbo.yaml, docs/study.md)",
        ) from None
    _refuse_duplicate_keys(doc)
    return _Checker(doc, gan3d_options(), train_rules).study(data_files)


def _refuse_duplicate_keys(doc: Document) -> None:
    """YAML lets a repeated key silently replace the first: in a study file that hides a typo'd
    edit.
    """
    todo = [doc.root] if doc.root is not None else []
    while todo:  # the composer bounded the depth and the node count
        node = todo.pop()
        if isinstance(node, yaml.MappingNode):
            seen = set()
            for key, value in node.value:
                name = getattr(key, "value", None)
                if name in seen:
                    raise KitError(
                        f"{doc.file}:{key.start_mark.line + 1}: {name}: the key appears twice in one "
                        "mapping (YAML would keep only the last)",
                        fix=f"{FIX}",
                    )
                seen.add(name)
                todo.append(value)
        elif isinstance(node, yaml.SequenceNode):
            todo.extend(node.value)


class _Checker:
    def __init__(
        self, doc: Document, options: dict[str, argparse.Action], train_rules: bool = True
    ) -> None:
        self.doc, self.options, self.train_rules = doc, options, train_rules

    def fail(self, path: tuple, problem: str, fix: str = FIX) -> KitError:
        """The one-line refusal at ``path``: a key may hold a line break (a quoted YAML key), so the
        field's name is shown escaped and cut, like any value."""
        name = (
            ".".join(str(p) if not isinstance(p, int) else f"[{p}]" for p in path).replace(
                ".[", "["
            )
            or "(top)"
        )
        return KitError(
            f"{clipped(self.doc.where(*path), 300)}: {clipped(name)}: {problem}", fix=f"{fix}"
        )

    def mapping(self, value: Any, path: tuple, keys: tuple[str, ...] | None = None) -> dict:
        if not isinstance(value, dict):
            raise self.fail(path, f"is {shown(value)}, expected a mapping")
        for k in value:
            if not isinstance(k, str):
                raise self.fail(path, f"key {shown(k)} is not a name")
            if keys is not None and k not in keys:
                close = difflib.get_close_matches(k, keys, n=1)
                hint = f"did you mean {close[0]!r}? " if close else ""
                raise self.fail(
                    (*path, k), f"unknown key {shown(k)}", f"{hint}keys here: {', '.join(keys)}"
                )
        return value

    def number(
        self,
        value: Any,
        path: tuple,
        whole: bool = False,
        low: float | None = None,
        high: float | None = None,
    ) -> float:
        ok = isinstance(value, int) if whole else isinstance(value, (int, float))
        if (
            isinstance(value, bool)
            or not ok
            or isinstance(value, float)
            and not math.isfinite(value)
        ):
            raise self.fail(
                path, f"is {shown(value)}, expected a {'whole' if whole else 'finite'} number"
            )
        low = -MAX_MAGNITUDE if low is None else low
        high = MAX_MAGNITUDE if high is None else high
        if not _bounded(value) or value < low or value > high:
            ends = ", ".join(str(v) if isinstance(v, int) else f"{v:g}" for v in (low, high))
            raise self.fail(path, f"is {shown(value)}, expected a number in [{ends}]")
        return value

    def study(self, data_files: bool = False) -> StudySpec:
        top = self.mapping(
            self.doc.value,
            (),
            ("kit_study", "parameters", "fixed", "objective", "budget", "strategy", "seed"),
        )
        if top.get(TAG) != STUDY_FORMAT:
            raise self.fail(
                (TAG,),
                f"is {shown(top.get(TAG, 'missing'))}, expected {STUDY_FORMAT} "
                "(the study file format)",
                f"put '{TAG}: {STUDY_FORMAT}' at the top",
            )
        for key in ("parameters", "objective", "strategy"):
            if key not in top:
                raise self.fail((), f"key {key} is missing", f"add {key}: (docs/study.md)")
        space = self.space(top["parameters"])
        fixed = self.fixed(top.get("fixed") or {}, space)
        strategy = self.strategy(top["strategy"])
        seed = int(self.number(top.get("seed", 0), ("seed",), whole=True, low=0, high=2**32 - 1))
        flags = frozenset(n for n, a in self.options.items() if a.nargs == 0)
        self.showers(space, fixed, data_files)
        return StudySpec(
            self.doc.file,
            space,
            fixed,
            self.objective(top["objective"]),
            self.budget(top.get("budget"), strategy),
            strategy,
            seed,
            flags,
        )

    def known(self, name: Any, path: tuple) -> argparse.Action | None:
        """gan3d's action for an option name (None for the layout and loss-weight parts), or a
        refusal.
        """
        if not isinstance(name, str) or name in RUNNER_OWNED:
            raise self.fail(
                path,
                f"{shown(name)} is set by the study runner (one per evaluation)",
                "leave it out",
            )
        if name == DECIDED:
            raise self.fail(
                path,
                "the runner gives gan3d --oversubscribe where ranks-per-node x threads exceed "
                "the site's cores",
                "leave it out",
            )
        if name in (LAYOUT, *LOSS_PARTS):
            return None
        action = self.options.get(name)
        if action is None or name == "help":
            valid = sorted(n for n in self.options if n not in (*RUNNER_OWNED, DECIDED, "help")) + [
                LAYOUT,
                *LOSS_PARTS,
            ]
            close = difflib.get_close_matches(name, valid, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise self.fail(
                path,
                f"{shown(name)} is not an option of gan3d train",
                f"{hint}valid names: {', '.join(valid)}",
            )
        return action

    def check_value(
        self, name: str, action: argparse.Action | None, value: Any, path: tuple
    ) -> Value:
        """One value of option ``name`` as gan3d would take it, or a refusal."""
        if isinstance(value, bool):
            if action is None or action.nargs != 0:
                raise self.fail(
                    path, f"{shown(value)} is a yes/no value, but --{name} takes a value"
                )
            return value
        if action is not None and action.nargs == 0:
            raise self.fail(
                path, f"--{name} is an on/off flag: give true or false, not {shown(value)}"
            )
        if (
            not isinstance(value, (str, int, float))
            or not isinstance(value, str)
            and not _bounded(value)
        ):
            raise self.fail(
                path,
                f"is {shown(value)}, expected a string or a number (at most {MAX_MAGNITUDE:g} "
                "in size)",
            )
        if isinstance(value, str) and (control_character(value) or len(value) > 4096):
            raise self.fail(
                path, f"{shown(value)} holds a line break or control character, or is too long"
            )
        kind = float if action is None else action.type or str
        if kind is not str and isinstance(value, str):
            raise self.fail(
                path, f"is the string {shown(value)}, expected a number (--{name} takes one)"
            )
        try:
            converted = kind(str(value)) if kind is not str else str(value)
        except (TypeError, ValueError):
            raise self.fail(
                path, f"{shown(value)} is not a {kind.__name__} as --{name} takes"
            ) from None
        if action is None and name == LAYOUT and not float(converted).is_integer():
            raise self.fail(path, f"{shown(value)} is not a whole number of ranks")
        if action is not None and action.choices and converted not in action.choices:
            raise self.fail(
                path, f"{shown(value)} is not one of gan3d's {', '.join(map(str, action.choices))}"
            )
        if name == LAYOUT and converted < 1:
            raise self.fail(path, f"{shown(value)} is below 1")
        if name == "loss-weights":
            parts = str(value).split(",")
            if len(parts) != 3 or any(
                not re.fullmatch(r"\d+(\.\d*)?([eE][-+]?\d+)?|\.\d+", p.strip()) for p in parts
            ):
                raise self.fail(
                    path, f"{shown(value)} is not three comma-separated numbers (BCE, Ep, cell sum)"
                )
        if self.train_rules:
            self.check_train_rules(name, action, converted, path)
        return value

    def check_train_rules(
        self, name: str, action: argparse.Action | None, value: Value, path: tuple
    ) -> None:
        """Refuse a value gan3d train's own checks refuse (gan3d.train.refusal: its limits, not a
        copy): a range end, choice or fixed value it refuses would fail, at run time, every
        evaluation given it."""
        from gan3d.train import refusal

        if name in LOSS_PARTS:  # one part of --loss-weights, the others at gan3d's default
            part = LOSS_PARTS.index(name)
            dest, given = (
                "loss_weights",
                ",".join(
                    _text(value) if j == part else w for j, w in enumerate(DEFAULT_LOSS_WEIGHTS)
                ),
            )
        elif action is not None:
            dest, given = action.dest, value
        else:
            return
        problem = refusal(dest, given)
        if problem is not None:
            raise self.fail(
                path,
                f"{shown(value)} is refused by gan3d train ({KitError(problem).what})",
                "keep every range end, choice and fixed value within what gan3d train takes",
            )

    def space(self, node: Any) -> Space:
        params = self.mapping(node, ("parameters",))
        if not params or len(params) > MAX_PARAMETERS:
            raise self.fail(
                ("parameters",), f"has {len(params)} parameters, expected 1 to {MAX_PARAMETERS}"
            )
        out: list[Param] = []
        for name, spec in params.items():
            out.append(self.param(name, spec, out))
        if "loss-weights" in params and any(p in params for p in LOSS_PARTS):
            raise self.fail(
                ("parameters", "loss-weights"),
                "loss-weights and loss-weight-* are both varied",
                "vary either the whole --loss-weights or its parts",
            )
        try:
            return Space(out)
        except (
            KitError
        ) as exc:  # the space's own rules: named in the file, like every other refusal
            raise self.fail(("parameters",), str(exc)) from None

    def param(self, name: str, node: Any, earlier: list[Param]) -> Param:
        path = ("parameters", name)
        action = self.known(name, path)
        spec = self.mapping(node, path, ("type", "low", "high", "log", "values", "when"))
        kind = spec.get("type")
        if kind not in KINDS:
            raise self.fail(
                (*path, "type"), f"is {shown(kind)}, expected one of {', '.join(KINDS)}"
            )
        if kind == "choice":
            values = spec.get("values")
            if (
                not isinstance(values, list)
                or not 1 <= len(values) <= MAX_CHOICES
                or {"low", "high", "log"} & set(spec)
            ):
                raise self.fail(
                    (*path, "values"),
                    f"a choice needs values: [..] (1 to {MAX_CHOICES}) and no low/high/log",
                )
            values = [
                self.check_value(name, action, v, (*path, "values", i))
                for i, v in enumerate(values)
            ]
            param = Param(name, "choice", values=tuple(values))
            problem = param.problem()
            if problem:
                raise self.fail((*path, "values"), problem, "list each value once")
        else:
            if "values" in spec:
                raise self.fail(
                    (*path, "values"), f"a {kind} parameter takes low and high, not values"
                )
            if action is not None and action.nargs == 0 or (action is not None and action.choices):
                raise self.fail(
                    (*path, "type"), f"--{name} takes one of a few values", "use type: choice"
                )
            if kind == "int" and action is not None and action.type is float:
                pass  # a whole number is a valid float
            elif action is not None and action.type is not (int if kind == "int" else float):
                want = {int: "int", float: "float"}.get(action.type, "choice")
                raise self.fail(
                    (*path, "type"),
                    f"--{name} takes a {getattr(action.type, '__name__', 'string')}",
                    f"use type: {want}",
                )
            bounds = [
                self.number(spec.get(k), (*path, k), whole=kind == "int") for k in ("low", "high")
            ]
            for k, v in zip(("low", "high"), bounds):
                self.check_value(name, action, v, (*path, k))
            log = spec.get("log", False)
            if not isinstance(log, bool):
                raise self.fail((*path, "log"), f"is {shown(log)}, expected true or false")
            param = Param(name, kind, bounds[0], bounds[1], log)
            problem = param.problem()
            if problem:
                raise self.fail(path, problem)
        when = self.when(spec.get("when"), (*path, "when"), earlier)
        return Param(param.name, param.kind, param.low, param.high, param.log, param.values, when)

    def when(self, node: Any, path: tuple, earlier: list[Param]) -> dict[str, tuple[Value, ...]]:
        if node is None:
            return {}
        conditions = self.mapping(node, path)
        by_name = {p.name: p for p in earlier}
        out = {}
        for other, values in conditions.items():
            ref = by_name.get(other)
            if ref is None or ref.kind != "choice":
                raise self.fail(
                    (*path, other),
                    f"{shown(other)} is not a choice parameter listed above this one",
                    "a condition names an earlier choice parameter and some of its values",
                )
            values = values if isinstance(values, list) else [values]
            if not values:
                raise self.fail(
                    (*path, other),
                    "lists no value",
                    f"give the values of {other} under which "
                    "this parameter is active, or drop the condition",
                )
            for v in values:
                if not any(same_value(v, c) for c in ref.values):
                    raise self.fail(
                        (*path, other),
                        f"{shown(v)} is not one of {other}'s values {shown(list(ref.values))}",
                    )
            out[other] = tuple(values)
        return out

    def fixed(self, node: Any, space: Space) -> dict[str, Value]:
        fixed = self.mapping(node, ("fixed",))
        out = {}
        for name, value in fixed.items():
            action = self.known(name, ("fixed", name))
            if name in space.by_name:
                raise self.fail(
                    ("fixed", name), f"{name} is also a parameter", "keep it in one of the two"
                )
            out[name] = self.check_value(name, action, value, ("fixed", name))
        if ("data" in out) == ("synthetic" in out):
            raise self.fail(
                ("fixed",),
                "gan3d train needs exactly one of data and synthetic",
                "add e.g. 'synthetic: 256' (generated showers) or 'data: /path/to/showers' to fixed:",
            )
        return out

    def showers(self, space: Space, fixed: Mapping[str, Value], data_files: bool) -> None:
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
            source = self.data_counts(fixed)
            if source is None:
                return
        else:
            return
        default = {
            "batch-size": self.options["batch-size"].default,
            LAYOUT: 1,
            "test-fraction": self.options["test-fraction"].default,
            **({"synthetic": None} if source is None else {"seed": self.options["seed"].default}),
        }
        worst: list[Param] = []
        for name in default:
            p = space.by_name.get(name)
            if p is not None and p.kind != "choice":  # a range: its ends are the worst cases
                p = Param(
                    name,
                    "choice",
                    values=(int(p.low), int(p.high)) if p.kind == "int" else (p.low, p.high),
                    when=p.when,
                )
            worst += [p] if p is not None else []
        needed = {c for p in worst for c in p.when}
        reduced = [p for p in space.params if p.name in needed and p.name not in default] + worst
        try:
            configs = Space(reduced).grid(2) if reduced else [{}]
        except KitError:  # too many combinations to try: gan3d checks each evaluation
            return
        for config in configs:
            value = {**default, **{k: v for k, v in fixed.items() if k in default}, **config}
            ranks, batch, fraction = (
                int(value[LAYOUT]),
                int(value["batch-size"]),
                float(value["test-fraction"]),
            )
            if source is None:
                if not 0 < fraction < 1 or int(value["synthetic"]) > MAX_SPLIT_EVENTS:
                    # gan3d refuses such a fraction itself; a split
                    # this large is left to gan3d to count
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
            varied = [
                n
                for n in ("batch-size", LAYOUT, "test-fraction", "synthetic", "seed")
                if n in config
            ]
            which, count = (
                ("held out", held_out) if held_out < step else ("left to train on", training)
            )
            if source is None:
                path = (
                    ("parameters", varied[0])
                    if varied
                    else (
                        "fixed",
                        next((n for n in ("batch-size", "synthetic") if n in fixed), "synthetic"),
                    )
                )
                more = "raise synthetic (or test-fraction, for the held-out showers)"
            else:
                path = ("parameters", varied[0]) if varied else ("fixed", "data")
                more = (
                    "give more validation-data showers"
                    if which == "held out" and source.held_out
                    else "give more data showers"
                    + (
                        ""
                        if source.held_out
                        else " (or raise test-fraction, for the held-out showers)"
                    )
                )
            raise self.fail(
                path,
                f"with batch-size {batch} and {ranks} rank(s) per node a step needs {step} "
                f"showers (ranks x batch size), but {what} {count} {which}",
                f"lower batch-size or ranks-per-node, or {more}",
            )

    def data_counts(self, fixed: Mapping[str, Value]) -> DataCounts | None:
        """The events the fixed data (and validation-data) files declare in their headers; None
        where there are more files than MAX_HEADER_FILES (gan3d counts them when an evaluation
        starts)."""
        from gan3d.data import DataError, expand_data_arg
        from gan3d.showerfile import declared_events

        counts = []
        for key in ("data", "validation-data"):
            if key not in fixed:
                counts.append(None)
                continue
            try:
                paths = expand_data_arg(str(fixed[key]))
                if len(paths) > MAX_HEADER_FILES:
                    return None
                counts.append(tuple((path, declared_events(path)) for path in paths))
            except DataError as exc:  # gan3d train would stop every evaluation at its start
                said = KitError(str(exc))  # its what and its fix, as gan3d wrote them
                raise self.fail(("fixed", key), said.what, said.fix or FIX) from None
        return DataCounts(counts[0], counts[1])

    def objective(self, node: Any) -> Objective:
        spec = self.mapping(node, ("objective",), ("metric", "direction"))
        metric = spec.get("metric")
        if not isinstance(metric, str) or not METRIC_RE.fullmatch(metric):
            raise self.fail(
                ("objective", "metric"),
                f"is {shown(metric)}, expected physics_score, "
                "showers_per_second or validation.<loss key> (e.g. validation.g_loss)",
            )
        default = "minimize" if metric.startswith("validation.") else "maximize"
        direction = spec.get("direction", default)
        if direction not in DIRECTIONS:
            raise self.fail(
                ("objective", "direction"), f"is {shown(direction)}, expected minimize or maximize"
            )
        return Objective(metric, direction)

    def budget(self, node: Any, strategy: Strategy) -> Budget:
        if node is None:
            if strategy.kind == "grid":
                return Budget()
            raise self.fail(
                (), "key budget is missing", "add budget: {evaluations: N} and/or {wall_time: 2h}"
            )
        spec = self.mapping(node, ("budget",), ("evaluations", "wall_time"))
        if not spec:
            raise self.fail(("budget",), "is empty", "give evaluations: N and/or wall_time: 2h")
        evaluations = spec.get("evaluations")
        if evaluations is not None:
            evaluations = int(
                self.number(
                    evaluations, ("budget", "evaluations"), whole=True, low=1, high=MAX_EVALUATIONS
                )
            )
        wall = spec.get("wall_time")
        seconds = None
        if wall is not None:
            seconds = self.duration(wall, ("budget", "wall_time"))
        return Budget(evaluations, seconds)

    def duration(self, value: Any, path: tuple) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            seconds = value
        else:
            match = DURATION_RE.fullmatch(value) if isinstance(value, str) and value else None
            if not match or not any(match.groups()):
                raise self.fail(
                    path, f"is {shown(value)}, expected a duration like 90m, 2h, 1h30m or seconds"
                )
            d, h, m, s = (int(g or 0) for g in match.groups())
            seconds = ((d * 24 + h) * 60 + m) * 60 + s
        if not 1 <= seconds <= MAX_WALL_S:
            raise self.fail(path, f"is {shown(value)}, expected between 1 second and 366 days")
        return seconds

    def strategy(self, node: Any) -> Strategy:
        path = ("strategy",)
        spec = (
            {"type": node}
            if isinstance(node, str)
            else self.mapping(
                node, path, ("type", "points", "initial", "candidates", "local", "trees", "lambda")
            )
        )
        kind = spec.get("type")
        if kind not in STRATEGIES:
            raise self.fail(
                (*path, "type") if isinstance(node, dict) else path,
                f"is {shown(kind)}, expected one of {', '.join(STRATEGIES)}",
            )
        allowed = {
            "grid": {"type", "points"},
            "random": {"type"},
            "mbo": {"type", "initial", "candidates", "local", "trees", "lambda"},
        }[kind]
        for key in spec:
            if key not in allowed:
                raise self.fail(
                    (*path, key),
                    f"{key} is not a setting of the {kind} strategy",
                    f"settings of {kind}: {', '.join(sorted(allowed - {'type'})) or 'none'}",
                )
        num = self.number
        return Strategy(
            kind,
            points=int(num(spec.get("points", 3), (*path, "points"), whole=True, low=2, high=1000)),
            initial=None
            if spec.get("initial") is None
            else int(num(spec["initial"], (*path, "initial"), whole=True, low=1, high=10_000)),
            candidates=int(
                num(
                    spec.get("candidates", 1000),
                    (*path, "candidates"),
                    whole=True,
                    low=1,
                    high=100_000,
                )
            ),
            local=int(
                num(spec.get("local", 200), (*path, "local"), whole=True, low=0, high=100_000)
            ),
            trees=int(num(spec.get("trees", 100), (*path, "trees"), whole=True, low=2, high=2000)),
            lambda_mean=float(num(spec.get("lambda", 1.0), (*path, "lambda"), low=0, high=100)),
        )
