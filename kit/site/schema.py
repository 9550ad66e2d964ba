"""A small typed schema checked against the composed YAML tree, so every error carries a line.

jsonschema would lose the YAML marks; walking `yaml.compose` nodes keeps the file, line and
key path of each value and lets unknown keys get a did-you-mean.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

from kit.errors import KitError


class SiteError(KitError):
    """A site config that cannot be read or does not satisfy the schema."""


@dataclass(frozen=True)
class Field:
    """One key: its type, whether it must be present, and the values it may take."""

    kind: str | "Section"  # "str" "int" "float" "bool" "list[str]" "map[str,str]" or a Section
    required: bool = True
    nullable: bool = False
    default: Any = None
    choices: tuple = ()
    minimum: float | None = None
    positive: bool = False
    check: Callable[[Any], str | None] | None = None  # returns a message when the value is bad
    doc: str = ""


@dataclass(frozen=True)
class Section:
    """A mapping with a fixed set of keys."""

    fields: dict[str, Field]
    check: Callable[[dict], list[tuple[str, str]]] | None = None  # cross-field: [(key, message)]


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

    def value(self, node: yaml.Node) -> Any:
        return self.loader.construct_object(node, deep=True)

    def section(self, sec: Section, node: yaml.Node, path: str) -> dict | None:
        if not isinstance(node, yaml.MappingNode):
            self.fail(path, node, f"expected a mapping with keys {', '.join(sec.fields)}")
            return None
        out: dict[str, Any] = {}
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            key = self.value(key_node)
            kpath = f"{path}.{key}" if path else str(key)
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
                self.fail(kpath, key_node,
                          f"unknown key{hint} (allowed: {', '.join(sec.fields)})")
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
        value = self.value(node)
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


def _fresh(default: Any) -> Any:
    return type(default)(default) if isinstance(default, (list, dict)) else default


def _is_null(node: yaml.Node) -> bool:
    return isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:null"


def _child(node: yaml.Node, key: str) -> yaml.Node | None:
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            if getattr(k, "value", None) == key:
                return k
    return None


def _describe(spec: Field) -> str:
    if isinstance(spec.kind, Section):
        return "a mapping"
    text = {"str": "a string", "int": "an integer", "float": "a number", "bool": "true or false",
            "list[str]": "a list of strings", "map[str,str]": "a mapping of names to strings"}[spec.kind]
    if spec.choices:
        text = f"one of {', '.join(map(str, spec.choices))}"
    if spec.nullable:
        text += " or null"
    return text


def _type_error(spec: Field, value: Any) -> str | None:
    kind = spec.kind
    ok = {
        "str": isinstance(value, str),
        "int": isinstance(value, int) and not isinstance(value, bool),
        "float": isinstance(value, (int, float)) and not isinstance(value, bool),
        "bool": isinstance(value, bool),
        "list[str]": isinstance(value, list) and all(isinstance(v, str) for v in value),
        "map[str,str]": isinstance(value, dict) and all(
            isinstance(k, str) and isinstance(v, (str, int, float)) and not isinstance(v, bool)
            for k, v in value.items()),
    }[kind]
    if not ok:
        return f"expected {_describe(spec)}, got {type(value).__name__} {value!r}"
    if spec.choices and value not in spec.choices:
        close = difflib.get_close_matches(str(value), [str(c) for c in spec.choices], n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        return f"{value!r} is not allowed{hint} (allowed: {', '.join(map(str, spec.choices))})"
    if spec.positive and value <= 0:
        return f"must be greater than 0, got {value!r}"
    if spec.minimum is not None and value < spec.minimum:
        return f"must be at least {spec.minimum}, got {value!r}"
    return None


def check_document(text: str, file: str | Path, schema: Section) -> dict:
    """Parse ``text`` and validate it; raise SiteError listing every problem with its line."""
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{file}:{mark.line + 1}" if mark else str(file)
        problem = getattr(exc, "problem", None) or str(exc)
        raise SiteError(f"{where}: not valid YAML: {problem}") from None
    finally:
        loader.dispose()
    if root is None:
        raise SiteError(f"{file}: the file is empty; expected a site config mapping")
    walker = _Walker(loader)
    data = walker.section(schema, root, "")
    if walker.problems:
        lines = "\n  ".join(p.render(str(file)) for p in walker.problems)
        raise SiteError(f"{file}: invalid site config ({len(walker.problems)} problem(s)):\n  {lines}")
    assert data is not None
    return data
