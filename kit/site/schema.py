"""A small typed schema checked against the composed YAML tree, so every error carries a line.

jsonschema would lose the YAML marks; walking `yaml.compose` nodes keeps the file, line and
key path of each value and lets unknown keys get a did-you-mean.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

from kit.errors import KitError
from kit.excerpt import control_character, shown
from kit.yamlbound import compose, reason

INT_MAX = 10**9  # no machine counts past a billion of anything this schema counts
MAX_LISTED = 5  # problems spelled out in the one-line error; the rest are counted


class SiteError(KitError):
    """A site config that cannot be read or does not satisfy the schema."""


@dataclass(frozen=True)
class Field:
    """One key: its type, whether it must be present, and the values it may take."""

    kind: str | Section  # "str" "int" "float" "bool" "list[str]" "map[str,str]" or a Section
    required: bool = True
    nullable: bool = False
    default: Any = None
    choices: tuple[Any, ...] = ()
    minimum: float | None = None
    positive: bool = False
    check: Callable[[Any], str | None] | None = None  # returns a message when the value is bad
    doc: str = ""


@dataclass(frozen=True)
class Section:
    """A mapping with a fixed set of keys."""

    fields: dict[str, Field]
    check: Callable[[dict[str, Any]], list[tuple[str, str]]] | None = (
        None  # cross-field: [(key, message)]
    )


@dataclass
class Problem:
    path: str
    line: int
    message: str

    def render(self, file: str) -> str:
        return f"{file}:{self.line}: {self.path}: {self.message}"


@dataclass
class _Walker:
    loader: yaml.SafeLoader
    problems: list[Problem] = field(default_factory=list)

    def fail(self, path: str, node: yaml.Node, message: str) -> None:
        self.problems.append(Problem(path or "(top level)", node.start_mark.line + 1, message))

    def value(self, node: yaml.Node, path: str) -> Any:
        """The node's value, or _BAD with the problem recorded (a 5000-digit integer, a bad
        date).
        """
        try:
            return self.loader.construct_object(node, deep=True)
        except (yaml.YAMLError, ValueError, OverflowError) as exc:
            self.fail(path, node, f"a value YAML cannot build ({reason(exc)})")
            return _BAD

    def section(self, sec: Section, node: yaml.Node, path: str) -> dict[str, Any] | None:
        if not isinstance(node, yaml.MappingNode):
            self.fail(path, node, f"expected a mapping with keys {', '.join(sec.fields)}")
            return None
        out: dict[str, Any] = {}
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            key = self.value(key_node, path)
            if key is _BAD:
                continue
            kpath = f"{path}.{_key(key)}" if path else _key(key)
            if not isinstance(key, str):
                self.fail(kpath, key_node, "keys must be strings")
                continue
            if key in seen:
                self.fail(kpath, key_node, f"duplicate key (first given on line {seen[key]})")
                continue
            seen[key] = key_node.start_mark.line + 1
            spec = sec.fields.get(key)
            if spec is None:
                close = difflib.get_close_matches(key, list(sec.fields), n=1, cutoff=0.6)
                hint = f"; did you mean '{close[0]}'?" if close else ""
                self.fail(kpath, key_node, f"unknown key{hint} (allowed: {', '.join(sec.fields)})")
                continue
            got = self.field(spec, value_node, kpath)
            if got is not _BAD:
                out[key] = got
        for key, spec in sec.fields.items():
            if key in out or key in seen:
                continue
            if spec.required:
                kpath = f"{path}.{key}" if path else key
                self.fail(kpath, node, f"missing required key ({_describe(spec)})")
            else:
                out[key] = _fresh(spec.default)
        if sec.check and len(out) == len(sec.fields):
            for key, message in sec.check(out):
                target = _child(node, key) or node
                self.fail(f"{path}.{key}" if path else key, target, message)
        return out

    def field(self, spec: Field, node: yaml.Node, path: str) -> Any:
        if isinstance(spec.kind, Section):
            if _is_null(node) and spec.nullable:
                return None
            got = self.section(spec.kind, node, path)
            return _BAD if got is None else got
        value = self.value(node, path)
        if value is _BAD:
            return _BAD
        if value is None:
            if spec.nullable:
                return None
            self.fail(path, node, f"must not be empty: expected {_describe(spec)}")
            return _BAD
        message = _type_error(spec, value)
        if message is None and spec.check:
            message = spec.check(value)
        if message:
            self.fail(path, node, message)
            return _BAD
        return float(value) if spec.kind == "float" else value


_BAD = object()


def _key(key: Any) -> str:
    """A key as a path element: itself when it is a short printable string."""
    if isinstance(key, str) and len(key) <= 40 and key.isprintable():
        return key
    return shown(key, 40)


def _fresh(default: Any) -> Any:
    return type(default)(default) if isinstance(default, (list, dict)) else default


def _is_null(node: yaml.Node) -> bool:
    return isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:null"


def _child(node: yaml.Node, key: str) -> yaml.Node | None:
    if isinstance(node, yaml.MappingNode):
        for k, _v in node.value:
            if getattr(k, "value", None) == key:
                return k
    return None


def _describe(spec: Field) -> str:
    if isinstance(spec.kind, Section):
        return "a mapping"
    text = {
        "str": "a string",
        "int": "an integer",
        "float": "a number",
        "bool": "true or false",
        "list[str]": "a list of strings",
        "map[str,str]": "a mapping of names to strings",
    }[spec.kind]
    if spec.choices:
        text = f"one of {', '.join(map(str, spec.choices))}"
    if spec.nullable:
        text += " or null"
    return text


def _type_error(spec: Field, value: Any) -> str | None:
    kind = spec.kind
    assert isinstance(kind, str), kind  # a Section's value is checked key by key (Checker.section)
    ok = {
        "str": isinstance(value, str),
        "int": isinstance(value, int) and not isinstance(value, bool),
        "float": isinstance(value, (int, float)) and not isinstance(value, bool),
        "bool": isinstance(value, bool),
        "list[str]": isinstance(value, list) and all(isinstance(v, str) for v in value),
        "map[str,str]": isinstance(value, dict)
        and all(
            isinstance(k, str) and isinstance(v, (str, int, float)) and not isinstance(v, bool)
            for k, v in value.items()
        ),
    }[kind]
    if not ok:
        return f"expected {_describe(spec)}, got {type(value).__name__} {shown(value)}"
    for text in _strings(value):
        if bad := control_character(text):
            return f"{shown(text)} contains a control character ({bad}); fix: one line of printable text"
    if kind == "int" and value > INT_MAX:
        return f"{shown(value)} is more than {INT_MAX}; fix: give the real count"
    if kind == "float" and not math.isfinite(value):
        return f"{value} is not a finite number"
    if spec.choices and value not in spec.choices:
        close = difflib.get_close_matches(str(value), [str(c) for c in spec.choices], n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        return f"{shown(value)} is not allowed{hint} (allowed: {', '.join(map(str, spec.choices))})"
    if spec.positive and value <= 0:
        return f"must be greater than 0, got {shown(value)}"
    if spec.minimum is not None and value < spec.minimum:
        return f"must be at least {spec.minimum}, got {shown(value)}"
    return None


def _strings(value: Any) -> list[str]:
    """The strings in a typed value: a string, a list of them, a mapping's names and values."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return value
    if isinstance(value, dict):
        return [x for pair in value.items() for x in pair if isinstance(x, str)]
    return []


def check_document(text: str, file: str | Path, schema: Section) -> dict[str, Any]:
    """Parse ``text`` (bounded: depth, aliases, tags) and validate it; one SiteError line lists the
    problems with their lines."""
    loader, root = compose(text, file, SiteError, "fix: correct the YAML at that line")
    if root is None:
        raise SiteError(f"{file}: the file is empty; expected a site config mapping")
    walker = _Walker(loader)
    data = walker.section(schema, root, "")
    if walker.problems:
        listed = "; ".join(p.render(str(file)) for p in walker.problems[:MAX_LISTED])
        more = len(walker.problems) - MAX_LISTED
        raise SiteError(
            f"{file}: invalid site config ({len(walker.problems)} problem(s)): {listed}"
            + (f"; and {more} more" if more > 0 else "")
        )
    assert data is not None
    return data
