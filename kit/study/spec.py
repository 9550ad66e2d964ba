"""The study file: what to search (parameters of `gan3d train`), what stays fixed, what to optimise,
how long, and how to search. People write it; every refusal is one line naming file:line, the
field and the fix, before any training is queued.

Its structure is checked by the kit's one schema mechanism (`kit.schema`: every structural problem
of the file in the one line), then its meaning: parameter and fixed names are checked against gan3d
train's own argument parser, so a typo gets the valid names and a value gan3d would refuse (an
unknown optimizer, a fractional batch size) is refused here. Besides gan3d's options a study may
vary the layout (``ranks-per-node``; gan3d's ``threads`` is the threads per rank) and the three
loss weights one by one (``loss-weight-bce``, ``loss-weight-ep``, ``loss-weight-ecal``, joined into
gan3d's ``--loss-weights``).
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import functools
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kit.errors import FIX as ERROR_FIX
from kit.errors import KitError
from kit.excerpt import clipped, control_character, shown
from kit.readfile import read_text
from kit.schema import Bad, Field, Items, Names, Section, check_node, yaml_node
from kit.study import missing_study_extra
from kit.study.showers import LAYOUT, check_steps
from kit.study.space import KINDS, Param, Space, Value, same_value
from kit.yamlbound import Document, compose

STUDY_FORMAT = 1
TAG = "kit_study"
MAX_STUDY_BYTES = 2**20  # a study file is a page of YAML
MAX_PARAMETERS = 64
MAX_CHOICES = 1000
MAX_EVALUATIONS = 100_000
MAX_WALL_S = 366 * 86400
# Any number of a study file (seeds are below 2**32, rates and losses far below).
MAX_MAGNITUDE = 1e15
LOSS_PARTS = ("loss-weight-bce", "loss-weight-ep", "loss-weight-ecal")  # joined into --loss-weights
DEFAULT_LOSS_WEIGHTS = ("8", "0.2", "0.1")  # gan3d train's default --loss-weights
# set by the runner for each evaluation (ranks: from ranks-per-node, checked by gan3d train)
RUNNER_OWNED = ("results", "checkpoint-dir", "resume", "keep-checkpoints", "ranks")
# The layout: ranks per node x threads per rank, which the runner passes itself (gan3d's --threads,
# and --oversubscribe where they exceed a node's cores: kit.study.evaluate.layout_args); never in
# train_args.
LAYOUT_WORDS = (LAYOUT, "threads")
DECIDED = "oversubscribe"  # follows from the layout and the site: the runner's, refused here
METRIC_RE = re.compile(r"physics_score|showers_per_second|validation\.[a-z][a-z0-9_]{0,40}")
DURATION_RE = re.compile(r"(?:(\d{1,4})d)?(?:(\d{1,5})h)?(?:(\d{1,6})m)?(?:(\d{1,8})s)?")
# The strategies and the settings each takes besides its type (the file's "lambda" is lambda_mean).
SETTINGS = {
    "grid": ("points",),
    "random": (),
    "mbo": ("initial", "candidates", "local", "trees", "lambda"),
}
STRATEGIES = tuple(SETTINGS)
DIRECTIONS = ("minimize", "maximize")
_WEIGHT = r"\s*(?:\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+)\s*"  # one of --loss-weights' three
FIX = "fix the study file (`kit docs study` describes it)"


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


# --- the structure, checked by kit.schema ---


def _bounded(value: int | float) -> bool:
    """Finite and within MAX_MAGNITUDE: YAML reads a 400-digit number as an int, which no float
    holds."""
    if isinstance(value, int):
        return value.bit_length() <= 64 and abs(value) <= MAX_MAGNITUDE
    return math.isfinite(value) and abs(value) <= MAX_MAGNITUDE


def _plain(value: Any) -> Bad | None:
    """A value one option of gan3d's command line can take: true/false, a bounded number, or one
    line of text."""
    if isinstance(value, str):
        if control_character(value) or len(value) > 4096:
            return Bad(f"{shown(value)} holds a line break or control character, or is too long")
        return None
    if isinstance(value, bool) or isinstance(value, (int, float)) and _bounded(value):
        return None
    return Bad(f"{shown(value)} is not a string or a number (at most {MAX_MAGNITUDE:g} in size)")


def _whole(value: float) -> Bad | None:
    return None if isinstance(value, int) else Bad(f"{shown(value)} is not a whole number")


def _format(value: int) -> Bad | None:
    what = f"{value} is not {STUDY_FORMAT}, the study file format"
    return None if value == STUDY_FORMAT else Bad(what, f"put '{TAG}: {STUDY_FORMAT}' at the top")


def _metric(value: str) -> Bad | None:
    what = f"{shown(value)} is not physics_score, showers_per_second or validation.<loss key>"
    return None if METRIC_RE.fullmatch(value) else Bad(f"{what} (e.g. validation.g_loss)")


def seconds(value: Any) -> int | None:
    """A wall time in seconds: a whole number of them, or days, hours, minutes and seconds as in
    1h30m; None for anything else, or outside 1 second..366 days."""
    if isinstance(value, int) and not isinstance(value, bool):
        total = value
    elif isinstance(value, str) and (match := DURATION_RE.fullmatch(value)) and any(match.groups()):
        d, h, m, s = (int(g or 0) for g in match.groups())
        total = ((d * 24 + h) * 60 + m) * 60 + s
    else:
        return None
    return total if 1 <= total <= MAX_WALL_S else None


def _duration(value: Any) -> Bad | None:
    what = f"{shown(value)} is not a duration of 1 second to 366 days: 90m, 2h, 1h30m or seconds"
    return None if seconds(value) is not None else Bad(what)


def _range_or_choice(param: dict[str, Any]) -> list[tuple[str, Bad]]:
    """A choice lists values; a float or int range has low and high (whole for an int)."""
    kind = param["type"]
    if kind == "choice":
        wrong = [k for k in ("low", "high", "log") if param[k] is not None]
        missing = ["values"] if param["values"] is None else []
        return [(k, Bad("a choice takes values: [..], not low, high or log")) for k in wrong] + [
            (k, Bad(f"a choice needs values: [..] (1 to {MAX_CHOICES})")) for k in missing
        ]
    out = []
    if param["values"] is not None:
        out.append(("values", Bad(f"type {kind} takes low and high, not values")))
    for key in ("low", "high"):
        if param[key] is None:
            out.append((key, Bad(f"type {kind} needs {key}")))
        elif kind == "int" and not float(param[key]).is_integer():
            out.append((key, Bad(f"{shown(param[key])} is not a whole number (type: int)")))
    return out


def _strategy_settings(strategy: dict[str, Any]) -> list[tuple[str, Bad]]:
    kind = strategy["type"]
    allowed = SETTINGS[kind]
    fix = f"settings of {kind}: {', '.join(allowed) or 'none'}"
    return [
        (key, Bad(f"not a setting of the {kind} strategy", fix))
        for key, value in strategy.items()
        if key != "type" and value is not None and key not in allowed
    ]


def _needs_budget(top: dict[str, Any]) -> list[tuple[str, Bad]]:
    """A grid's size is its budget; another strategy needs one to stop."""
    kind, empty = top["strategy"].get("type"), dict.fromkeys(BUDGET.fields)
    if kind in (None, "grid") or (top["budget"] or empty) != empty:  # None: a bad type, named
        return []
    fix = "give budget: {evaluations: N} and/or {wall_time: 2h}"
    return [("budget", Bad(f"the {kind} strategy needs a budget", fix))]


def _setting(low: int, high: int, kind: str = "int") -> Field:
    """A strategy setting: None where the file leaves it out (Strategy's default applies)."""
    return Field(kind, required=False, nullable=True, minimum=low, maximum=high)


NUMBER = Field("float", required=False, minimum=-MAX_MAGNITUDE, maximum=MAX_MAGNITUDE)


PARAMETER = Section(
    {
        "type": Field("str", choices=KINDS),
        "low": NUMBER,
        "high": NUMBER,
        "log": Field("bool", required=False),
        "values": Field(Items(Field("any", check=_plain), 1, MAX_CHOICES), required=False),
        "when": Field(Names(Field("any")), required=False, nullable=True),
    },
    check=_range_or_choice,
)
OBJECTIVE = Section(
    {
        "metric": Field("str", check=_metric),
        "direction": Field("str", required=False, choices=DIRECTIONS),  # default: by the metric
    }
)
BUDGET = Section(
    {
        "evaluations": Field(
            "int", required=False, nullable=True, minimum=1, maximum=MAX_EVALUATIONS
        ),
        "wall_time": Field("any", required=False, nullable=True, check=_duration),
    }
)
STRATEGY = Section(
    {
        "type": Field("str", choices=STRATEGIES),
        "points": _setting(2, 1000),
        "initial": _setting(1, 10_000),
        "candidates": _setting(1, 100_000),
        "local": _setting(0, 100_000),
        "trees": _setting(2, 2000),
        "lambda": _setting(0, 100, "float"),
    },
    check=_strategy_settings,
)


def schema(options: Mapping[str, argparse.Action]) -> Section:
    """The study file's structure; parameter and fixed names are gan3d train's ``options``."""

    name = functools.partial(_option_name, options)

    def count(params: dict[str, Any]) -> Bad | None:
        n = len(params)
        return (
            None if 1 <= n <= MAX_PARAMETERS else Bad(f"{n} given, expected 1 to {MAX_PARAMETERS}")
        )

    return Section(
        {
            TAG: Field("int", check=_format),
            "parameters": Field(Names(Field(PARAMETER), name=name), check=count),
            "fixed": Field(
                Names(Field("any", check=_plain), name=name), required=False, nullable=True
            ),
            "objective": Field(OBJECTIVE),
            "budget": Field(BUDGET, required=False, nullable=True),
            "strategy": Field(STRATEGY),
            "seed": Field(
                "float", required=False, default=0, minimum=0, maximum=2**32 - 1, check=_whole
            ),
        },
        check=_needs_budget,
    )


def _option_name(options: Mapping[str, argparse.Action], name: str) -> Bad | None:
    """A name a study may give: gan3d train's options but the runner's, the layout, the loss
    weights' parts."""
    if name in RUNNER_OWNED:
        return Bad(f"{shown(name)} is set by the study runner (one per evaluation)", "leave it out")
    if name == DECIDED:
        return Bad(
            "the runner gives gan3d --oversubscribe where ranks-per-node x threads exceed "
            "the site's cores",
            "leave it out",
        )
    if name in (LAYOUT, *LOSS_PARTS) or name in options and name != "help":
        return None
    valid = sorted(n for n in options if n not in (*RUNNER_OWNED, DECIDED, "help"))
    valid += [LAYOUT, *LOSS_PARTS]
    close = difflib.get_close_matches(name, valid, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return Bad(
        f"{shown(name)} is not an option of gan3d train", f"{hint}valid names: {', '.join(valid)}"
    )


@dataclass(frozen=True)
class StudySpec:
    path: str
    space: Space
    fixed: Mapping[str, Value]
    objective: Objective
    budget: Budget
    strategy: Strategy
    seed: int = 0
    flags: frozenset[str] = field(default_factory=frozenset)  # gan3d's on/off options (store_true)

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
        says."""
        values = {**self.fixed, **self.space.canonical(config)}
        ranks, threads = (values.get(name) for name in LAYOUT_WORDS)
        return (None if ranks is None else int(ranks), None if threads is None else int(threads))


def _text(value: Value) -> str:
    """A value as gan3d's command line takes it (floats exactly, flags' values as YAML writes)."""
    if isinstance(value, bool):
        return str(value).lower()
    return repr(value) if isinstance(value, float) else str(value)


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
        text = read_text(path, "study file", limit=MAX_STUDY_BYTES)
    except FileNotFoundError:
        raise KitError(
            f"{path}: no such study file",
            fix="write one (`kit docs study` describes it; an example: kit/_data/studies/tiny-mbo.yaml)",
        ) from None
    loader, root = compose(text, path, fix=FIX)
    if root is None:
        raise KitError("the file is empty; expected a study file", fix=FIX, where=str(path))
    _short_strategy(root)
    options = gan3d_options()
    data = check_node(
        yaml_node(loader, root), str(path), schema(options), what="study file", fix=FIX
    )
    doc = Document(str(path), root, None)  # the lines the checks after the walk name
    return _Meaning(doc, options, train_rules).study(data, data_files)


def _short_strategy(root: yaml.Node) -> None:
    """``strategy: random`` is short for ``strategy: {type: random}``."""
    for i, (key, value) in enumerate(root.value if isinstance(root, yaml.MappingNode) else []):
        if getattr(key, "value", None) == "strategy" and value.tag == "tag:yaml.org,2002:str":
            marks = value.start_mark, value.end_mark
            name = yaml.ScalarNode("tag:yaml.org,2002:str", "type", *marks)
            root.value[i] = (
                key,
                yaml.MappingNode("tag:yaml.org,2002:map", [(name, value)], *marks),
            )


class _Meaning:
    """What the structure cannot say: values as gan3d train takes them (its parser and its own
    refusals), conditions on earlier choices, and showers enough for one step of every config."""

    def __init__(
        self, doc: Document, options: dict[str, argparse.Action], train_rules: bool
    ) -> None:
        self.doc, self.options, self.train_rules = doc, options, train_rules

    def fail(self, path: tuple[str | int, ...], problem: str, fix: str = FIX) -> KitError:
        """The one-line refusal at ``path``: a key may hold a line break (a quoted YAML key), so the
        field's name is shown escaped and cut, like any value."""
        name = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")
        return KitError(
            f"{clipped(name)}: {problem}", fix=fix, where=clipped(self.doc.where(*path), 300)
        )

    def study(self, data: dict[str, Any], data_files: bool) -> StudySpec:
        space = self.space(data["parameters"])
        fixed = self.fixed(data["fixed"] or {}, space)
        check_steps(space, fixed, self.options, data_files=data_files, fail=self.fail)
        objective = data["objective"]
        metric = objective["metric"]
        default = "minimize" if metric.startswith("validation.") else "maximize"
        budget = data["budget"] or {}
        strategy = data["strategy"]
        settings = {
            ("lambda_mean" if k == "lambda" else k): v
            for k, v in strategy.items()
            if k != "type" and v is not None
        }
        return StudySpec(
            path=self.doc.file,
            space=space,
            fixed=fixed,
            objective=Objective(metric, objective["direction"] or default),
            budget=Budget(budget.get("evaluations"), seconds(budget.get("wall_time"))),
            strategy=Strategy(strategy["type"], **settings),
            seed=int(data["seed"]),
            flags=frozenset(n for n, a in self.options.items() if a.nargs == 0),
        )

    def action(self, name: str) -> argparse.Action | None:
        """gan3d's action for an option (None for the layout and the loss weights' parts)."""
        return None if name in (LAYOUT, *LOSS_PARTS) else self.options[name]

    def space(self, params: dict[str, dict[str, Any]]) -> Space:
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
        except KitError as exc:  # the space's own rules: named in the file, like every refusal
            raise self.fail(("parameters",), exc.what, exc.fix or FIX) from None

    def param(self, name: str, spec: dict[str, Any], earlier: list[Param]) -> Param:
        path: tuple[str | int, ...] = ("parameters", name)
        action, kind = self.action(name), spec["type"]
        if kind == "choice":
            values = spec["values"]
            for i, v in enumerate(values):
                self.value(name, action, v, path=(*path, "values", i))
            param = Param(name, kind, values=tuple(values))
        else:
            if action is not None and (action.nargs == 0 or action.choices):
                raise self.fail(
                    (*path, "type"), f"--{name} takes one of a few values", "use type: choice"
                )
            takes = action.type if action is not None else None
            if action is not None and not (takes is float or takes is int and kind == "int"):
                want = "int" if takes is int else "float" if takes is float else "choice"
                raise self.fail(
                    (*path, "type"),
                    f"--{name} takes a {getattr(takes, '__name__', 'string')}",
                    f"use type: {want}",
                )
            low, high = (int(spec[k]) if kind == "int" else spec[k] for k in ("low", "high"))
            self.value(name, action, low, path=(*path, "low"))
            self.value(name, action, high, path=(*path, "high"))
            param = Param(name=name, kind=kind, low=low, high=high, log=bool(spec["log"]))
        problem = param.problem()
        if problem and kind == "choice":
            raise self.fail((*path, "values"), problem, "list each value once")
        if problem:
            raise self.fail(path, problem)
        when = self.when(spec["when"] or {}, (*path, "when"), earlier)
        return dataclasses.replace(param, when=when)

    def when(
        self, conditions: dict[str, Any], path: tuple[str | int, ...], earlier: list[Param]
    ) -> dict[str, tuple[Value, ...]]:
        by_name = {p.name: p for p in earlier}
        out = {}
        for other, given in conditions.items():
            ref = by_name.get(other)
            if ref is None or ref.kind != "choice":
                raise self.fail(
                    (*path, other),
                    f"{shown(other)} is not a choice parameter listed above this one",
                    "a condition names an earlier choice parameter and some of its values",
                )
            values = given if isinstance(given, list) else [given]
            if not values:
                raise self.fail(
                    (*path, other),
                    "lists no value",
                    f"give the values of {other} under which this parameter is active, "
                    "or drop the condition",
                )
            for v in values:
                if not any(same_value(v, c) for c in ref.values):
                    raise self.fail(
                        (*path, other),
                        f"{shown(v)} is not one of {other}'s values {shown(list(ref.values))}",
                    )
            out[other] = tuple(values)
        return out

    def fixed(self, fixed: dict[str, Any], space: Space) -> dict[str, Value]:
        for name, value in fixed.items():
            if name in space.by_name:
                raise self.fail(
                    ("fixed", name), f"{name} is also a parameter", "keep it in one of the two"
                )
            self.value(name, self.action(name), value, path=("fixed", name))
        if ("data" in fixed) == ("synthetic" in fixed):
            raise self.fail(
                ("fixed",),
                "gan3d train needs exactly one of data and synthetic",
                "add e.g. 'synthetic: 256' (generated showers) or 'data: "
                "/path/to/showers' to fixed:",
            )
        return fixed

    def value(
        self,
        name: str,
        action: argparse.Action | None,
        value: Value,
        *,
        path: tuple[str | int, ...],
    ) -> None:
        """Refuse a value (a plain one: the schema checked) that gan3d would not take for --name."""
        flag = action is not None and action.nargs == 0
        if isinstance(value, bool) != flag:
            raise self.fail(
                path,
                f"--{name} is an on/off flag: give true or false, not {shown(value)}"
                if flag
                else f"{shown(value)} is a yes/no value, but --{name} takes a value",
            )
        if flag:
            return
        kind = float if action is None else action.type or str
        convert: Callable[[str], Any] = kind if callable(kind) else str
        if convert is not str and isinstance(value, str):
            raise self.fail(
                path, f"is the string {shown(value)}, expected a number (--{name} takes one)"
            )
        try:
            converted = convert(str(value))
        except (TypeError, ValueError):
            what = getattr(convert, "__name__", "value")
            raise self.fail(path, f"{shown(value)} is not a {what} as --{name} takes") from None
        if name == LAYOUT and not (float(converted).is_integer() and converted >= 1):
            raise self.fail(path, f"{shown(value)} is not a whole number of ranks, 1 or more")
        if action is not None and action.choices and converted not in action.choices:
            raise self.fail(
                path, f"{shown(value)} is not one of gan3d's {', '.join(map(str, action.choices))}"
            )
        if name == "loss-weights" and not re.fullmatch(
            rf"{_WEIGHT},{_WEIGHT},{_WEIGHT}", str(value)
        ):
            raise self.fail(
                path, f"{shown(value)} is not three comma-separated numbers (BCE, Ep, cell sum)"
            )
        if self.train_rules:
            self.train_rule(name, action, converted, path=path)

    def train_rule(
        self,
        name: str,
        action: argparse.Action | None,
        value: Value,
        *,
        path: tuple[str | int, ...],
    ) -> None:
        """Refuse a value gan3d train's own checks refuse (gan3d.train.refusal: its limits, not a
        copy): a range end, choice or fixed value it refuses would fail, at run time, every
        evaluation given it."""
        from gan3d.train import refusal

        if name in LOSS_PARTS:  # one part of --loss-weights, the others at gan3d's default
            weights = list(DEFAULT_LOSS_WEIGHTS)
            weights[LOSS_PARTS.index(name)] = _text(value)
            problem = refusal("loss_weights", ",".join(weights))
        elif action is not None:
            problem = refusal(action.dest, value)
        else:
            return
        if problem is not None:
            raise self.fail(
                path,
                f"{shown(value)} is refused by gan3d train ({problem.partition(ERROR_FIX)[0]})",
                "keep every range end, choice and fixed value within what gan3d train takes",
            )
