"""One typed schema for every YAML and JSON file the kit reads, so each error names file, line
(YAML) or key path (JSON), the field and the fix.

jsonschema would lose the YAML marks; walking `yaml.compose` nodes keeps the file, line and key
path of each value and lets unknown keys get a did-you-mean. A JSON value (or any built Python
value) is walked the same way, with the key path alone naming where. A section can be derived
from the frozen dataclass a reader returns (`section_of`), so a field is declared once: its type
and default by the dataclass, its doc, checks and bounds by `about` in the field's metadata.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import math
import os
import sys
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, Union

import yaml

from kit.errors import FIX, KitError
from kit.excerpt import control_character, shown
from kit.yamlbound import Document, compose, reason

INT_MAX = 10**9  # no machine counts past a billion of anything a schema counts
MAX_LISTED = 5  # problems spelled out in the one-line error; the rest are counted
MAX_PROBLEMS = 100  # a walk stops recording here: the error stays bounded however bad the file
MAX_ITEMS = 100_000  # entries of one list or mapping
MERGE_TAG = "tag:yaml.org,2002:merge"  # `<<: *x` copies keys a reader then cannot place by line


@dataclass(frozen=True)
class Bad:
    """What a check found wrong with a value, and how to fix it (None: the schema's own fix)."""

    what: str
    fix: str | None = None


Check = Callable[[Any], "Bad | None"]
SectionCheck = Callable[[dict[str, Any]], "list[tuple[str, Bad]]"]


@dataclass(frozen=True)
class Items:
    """A list whose every entry is ``of``."""

    of: Field
    min_len: int = 0
    max_len: int = MAX_ITEMS


@dataclass(frozen=True)
class Names:
    """A mapping of free names (strings) to values that are each ``of``."""

    of: Field
    name: Check | None = None  # checks each name


@dataclass(frozen=True)
class Field:
    """One key: its type, whether it must be present, and the values it may take."""

    # "str" "int" "float" "bool" "any" "list[str]" "map[str,str]", a Section, Items or Names
    kind: str | Section | Items | Names
    required: bool = True
    nullable: bool = False
    default: Any = None
    choices: tuple[Any, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    positive: bool = False
    check: Check | None = None
    doc: str = ""


@dataclass(frozen=True)
class Section:
    """A mapping with a fixed set of keys; ``open``: keys not declared are passed over (a file
    the kit writes may carry more than a reader uses)."""

    fields: dict[str, Field]
    check: SectionCheck | None = None  # cross-field: [(key, Bad)], once every key is good
    open: bool = False


@dataclass(frozen=True)
class Problem:
    path: str
    line: int | None
    what: str
    fix: str | None = None

    def where(self, file: str) -> str:
        return f"{file}:{self.line}" if self.line else file

    def render(self, file: str) -> str:
        return f"{self.where(file)}: {self.path}: {self.what}" + (
            f"{FIX}{self.fix}" if self.fix else ""
        )


class _Unbuildable(Exception):
    pass


class _Yaml:
    """A composed YAML node: values are built on demand, so a bad one is named by its line."""

    def __init__(self, loader: yaml.SafeLoader, node: yaml.Node):
        self.loader, self.node = loader, node
        self.line: int | None = node.start_mark.line + 1

    def entries(self) -> list[tuple[_Yaml, _Yaml]] | None:
        if not isinstance(self.node, yaml.MappingNode):
            return None
        return [(_Yaml(self.loader, k), _Yaml(self.loader, v)) for k, v in self.node.value]

    def items(self) -> list[_Yaml] | None:
        if not isinstance(self.node, yaml.SequenceNode):
            return None
        return [_Yaml(self.loader, v) for v in self.node.value]

    def is_null(self) -> bool:
        return isinstance(self.node, yaml.ScalarNode) and self.node.tag == "tag:yaml.org,2002:null"

    def build(self) -> Any:
        try:
            return self.loader.construct_object(self.node, deep=True)
        except (yaml.YAMLError, ValueError, OverflowError, RecursionError) as exc:
            raise _Unbuildable(reason(exc)) from None


class _Value:
    """A value already built: JSON, where the key path names where, or a parsed YAML document
    whose nodes give each value's line (``lines``: yamlbound.Document.line)."""

    def __init__(
        self,
        value: Any,
        path: tuple[Any, ...] = (),
        lines: Callable[..., int] | None = None,
    ):
        self.value, self.path, self.lines = value, path, lines

    @property
    def line(self) -> int | None:
        return self.lines(*self.path) if self.lines else None

    def entries(self) -> list[tuple[_Value, _Value]] | None:
        if not isinstance(self.value, dict):
            return None
        return [
            (_Value(k, (*self.path, k), self.lines), _Value(v, (*self.path, k), self.lines))
            for k, v in self.value.items()
        ]

    def items(self) -> list[_Value] | None:
        if not isinstance(self.value, list):
            return None
        return [_Value(v, (*self.path, i), self.lines) for i, v in enumerate(self.value)]

    def is_null(self) -> bool:
        return self.value is None

    def build(self) -> Any:
        return self.value


Node = Union[_Yaml, _Value]


@dataclass
class _Walker:
    problems: list[Problem] = field(default_factory=list)

    def fail(self, path: str, node: Node, bad: Bad | str) -> None:
        if isinstance(bad, str):
            bad = Bad(bad)
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(Problem(path or "(top level)", node.line, bad.what, bad.fix))

    def value(self, node: Node, path: str) -> Any:
        """The node's value, or _BAD with the problem recorded (a 5000-digit integer, a bad
        date)."""
        try:
            return node.build()
        except _Unbuildable as exc:
            self.fail(path, node, f"a value YAML cannot build ({exc})")
            return _BAD

    def section(self, sec: Section, node: Node, path: str) -> dict[str, Any] | None:
        entries = node.entries()
        if entries is None:
            self.fail(path, node, f"expected a mapping with keys {', '.join(sec.fields)}")
            return None
        out: dict[str, Any] = {}
        seen: dict[str, int | None] = {}
        for key_node, value_node in entries[:MAX_ITEMS]:
            key = self.key(key_node, path, seen)
            if key is None:
                continue
            kpath = _join(path, key)
            spec = sec.fields.get(key)
            if spec is None:
                if not sec.open:
                    close = difflib.get_close_matches(key, list(sec.fields), n=1, cutoff=0.6)
                    hint = f"; did you mean '{close[0]}'?" if close else ""
                    allowed = ", ".join(sec.fields)
                    self.fail(kpath, key_node, f"unknown key{hint} (allowed: {allowed})")
                continue
            got = self.field(spec, value_node, kpath)
            if got is not _BAD:
                out[key] = got
        for key, spec in sec.fields.items():
            if key in out or key in seen:
                continue
            if spec.required:
                self.fail(_join(path, key), node, f"missing required key ({_describe(spec)})")
            else:
                out[key] = _fresh(spec.default)
        if sec.check and len(out) == len(sec.fields):
            keys = {_scalar(k): k for k, _v in entries}
            for key, bad in sec.check(out):
                self.fail(_join(path, key), keys.get(key, node), bad)
        return out

    def key(self, key_node: Node, path: str, seen: dict[str, int | None]) -> str | None:
        """A mapping's key: a string given once, else None with the problem recorded."""
        if isinstance(key_node, _Yaml) and key_node.node.tag == MERGE_TAG:
            self.fail(path, key_node, Bad("a YAML merge key (<<)", "write the merged keys out"))
            return None
        key = self.value(key_node, path)
        if key is _BAD:
            return None
        if not isinstance(key, str):
            self.fail(_join(path, _key(key)), key_node, "keys must be strings")
            return None
        if key in seen:
            first = f" (first given on line {seen[key]})" if seen[key] else ""
            self.fail(_join(path, key), key_node, f"duplicate key{first}")
            return None
        seen[key] = key_node.line
        return key

    def field(self, spec: Field, node: Node, path: str) -> Any:
        if node.is_null() and not isinstance(spec.kind, str):
            if spec.nullable:
                return None
            self.fail(path, node, f"must not be empty: expected {_describe(spec)}")
            return _BAD
        if isinstance(spec.kind, Section):
            got = self.section(spec.kind, node, path)
            return _BAD if got is None else got
        if isinstance(spec.kind, Items):
            return self.items(spec, node, path)
        if isinstance(spec.kind, Names):
            return self.names(spec, node, path)
        value = self.value(node, path)
        if value is _BAD:
            return _BAD
        if value is None:
            if spec.nullable:
                return None
            self.fail(path, node, f"must not be empty: expected {_describe(spec)}")
            return _BAD
        bad = _type_error(spec, value)
        if bad is None and spec.check:
            bad = spec.check(value)
        if bad:
            self.fail(path, node, bad)
            return _BAD
        return float(value) if spec.kind == "float" else value

    def items(self, spec: Field, node: Node, path: str) -> Any:
        kind = spec.kind
        assert isinstance(kind, Items)
        entries: list[Node] | None = node.items()  # type: ignore[assignment]
        if entries is None:
            self.fail(path, node, f"expected {_describe(spec)}")
            return _BAD
        if not kind.min_len <= len(entries) <= kind.max_len:
            self.fail(
                path, node, f"holds {len(entries)} entries, expected {kind.min_len}..{kind.max_len}"
            )
            return _BAD
        out = [self.field(kind.of, item, f"{path}[{i}]") for i, item in enumerate(entries)]
        if any(v is _BAD for v in out):
            return _BAD
        return self.checked(spec, out, node, path=path)

    def names(self, spec: Field, node: Node, path: str) -> Any:
        kind = spec.kind
        assert isinstance(kind, Names)
        entries = node.entries()
        if entries is None:
            self.fail(path, node, f"expected {_describe(spec)}")
            return _BAD
        out: dict[str, Any] = {}
        seen: dict[str, int | None] = {}
        bad = False
        for key_node, value_node in entries[:MAX_ITEMS]:
            key = self.key(key_node, path, seen)
            if key is None:
                bad = True
                continue
            problem = kind.name(key) if kind.name else _text_error(key)
            if problem:
                self.fail(_join(path, _key(key)), key_node, problem)
                bad = True
                continue
            got = self.field(kind.of, value_node, _join(path, key))
            bad = bad or got is _BAD
            out[key] = got
        return _BAD if bad else self.checked(spec, out, node, path=path)

    def checked(self, spec: Field, value: Any, node: Node, *, path: str) -> Any:
        if spec.check and (bad := spec.check(value)):
            self.fail(path, node, bad)
            return _BAD
        return value


_BAD = object()


def _scalar(node: Node) -> Any:
    """A key as written, without building it (a cross-field problem is named by its key)."""
    if isinstance(node, _Value):
        return node.value
    return node.node.value if isinstance(node.node, yaml.ScalarNode) else None


def _join(path: str, key: str) -> str:
    return f"{path}.{_key(key)}" if path else _key(key)


def _key(key: Any) -> str:
    """A key as a path element: itself when it is a short printable string (an empty one quoted)."""
    if isinstance(key, str) and 0 < len(key) <= 40 and key.isprintable():
        return key
    return shown(key, 40)


def _fresh(default: Any) -> Any:
    return type(default)(default) if isinstance(default, (list, dict)) else default


def _describe(spec: Field) -> str:
    kind = spec.kind
    if isinstance(kind, Section):
        text = "a mapping"
    elif isinstance(kind, Items):
        text = f"a list of {_plural(kind.of)}"
    elif isinstance(kind, Names):
        text = f"a mapping of names to {_plural(kind.of)}"
    else:
        text = {
            "str": "a string",
            "int": "an integer",
            "float": "a number",
            "bool": "true or false",
            "any": "a value",
            "list[str]": "a list of strings",
            "map[str,str]": "a mapping of names to strings",
        }[kind]
    if spec.choices:
        text = f"one of {', '.join(map(str, spec.choices))}"
    if spec.nullable:
        text += " or null"
    return text


def _plural(spec: Field) -> str:
    one = _describe(dataclasses.replace(spec, nullable=False, choices=()))
    return {"a string": "strings", "an integer": "integers", "a number": "numbers"}.get(
        one, one.removeprefix("a ").removeprefix("an ") + "s"
    )


def _text_error(text: str) -> Bad | None:
    if bad := control_character(text):
        return Bad(
            f"{shown(text)} contains a control character ({bad})", "one line of printable text"
        )
    return None


def _type_error(spec: Field, value: Any) -> Bad | None:
    kind = spec.kind
    assert isinstance(kind, str), kind  # containers are checked entry by entry (_Walker.field)
    ok = {
        "str": isinstance(value, str),
        "int": isinstance(value, int) and not isinstance(value, bool),
        "float": isinstance(value, (int, float)) and not isinstance(value, bool),
        "bool": isinstance(value, bool),
        "any": True,
        "list[str]": isinstance(value, list) and all(isinstance(v, str) for v in value),
        "map[str,str]": isinstance(value, dict)
        and all(
            isinstance(k, str) and isinstance(v, (str, int, float)) and not isinstance(v, bool)
            for k, v in value.items()
        ),
    }[kind]
    if not ok:
        return Bad(f"expected {_describe(spec)}, got {type(value).__name__} {shown(value)}")
    if kind == "any":
        return None
    for text in _strings(value):
        if bad := _text_error(text):
            return bad
    if kind == "int" and spec.maximum is None and value > INT_MAX:  # a count, unless bounded
        return Bad(f"{shown(value)} is more than {INT_MAX}", "give the real count")
    if kind == "float" and (
        isinstance(value, int) and value.bit_length() > 1000 or not math.isfinite(value)
    ):
        return Bad(f"{shown(value)} is not a finite number")
    if spec.choices and value not in spec.choices:
        close = difflib.get_close_matches(str(value), [str(c) for c in spec.choices], n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        allowed = ", ".join(map(str, spec.choices))
        return Bad(f"{shown(value)} is not allowed{hint} (allowed: {allowed})")
    if spec.positive and value <= 0:
        return Bad(f"must be greater than 0, got {shown(value)}")
    if spec.minimum is not None and value < spec.minimum:
        return Bad(f"must be at least {spec.minimum}, got {shown(value)}")
    if spec.maximum is not None and value > spec.maximum:
        most = spec.maximum if isinstance(spec.maximum, int) else f"{spec.maximum:g}"
        return Bad(f"must be at most {most}, got {shown(value)}")
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


def _raise(walker: _Walker, file: str, what: str, fix: str | None, error: type[KitError]) -> None:
    problems = walker.problems
    if not problems:
        return
    if len(problems) == 1:
        p = problems[0]
        raise error(f"{p.path}: {p.what}", fix=p.fix or fix, where=p.where(file))
    listed = "; ".join(p.render(file) for p in problems[:MAX_LISTED])
    more = len(problems) - MAX_LISTED
    count = f"{len(problems)}{'+' if len(problems) >= MAX_PROBLEMS else ''}"
    raise error(
        f"invalid {what} ({count} problem(s)): {listed}"
        + (f"; and {more} more" if more > 0 else ""),
        fix=fix,
        where=file,
    )


def check_yaml(
    text: str,
    file: str | os.PathLike[str],
    schema: Section,
    *,
    what: str,
    fix: str | None = None,
    error: type[KitError] = KitError,
) -> dict[str, Any]:
    """Parse ``text`` (bounded: depth, aliases, tags) and validate it against ``schema``; one
    ``error`` line lists the problems with their lines and fixes (``fix``: where a problem has
    none of its own)."""
    loader, root = compose(text, file, error=error)
    if root is None:
        raise error(f"{file}: the file is empty; expected a {what} mapping", fix=fix)
    doc: dict[str, Any] = check_node(
        _Yaml(loader, root), str(file), schema, what=what, fix=fix, error=error
    )
    return doc


def check_value(
    value: Any,
    file: str | os.PathLike[str],
    schema: Section,
    *,
    what: str,
    fix: str | None = None,
    error: type[KitError] = KitError,
) -> dict[str, Any]:
    """A value already built (a JSON document) checked against ``schema``; problems are named by
    their key path."""
    doc: dict[str, Any] = check_node(
        _Value(value), str(file), schema, what=what, fix=fix, error=error
    )
    return doc


def check_doc(
    doc: Document,
    schema: Section | Field,
    what: str,
    *,
    fix: str | None = None,
    error: type[KitError] = KitError,
) -> Any:
    """A YAML document already parsed (yamlbound.load_file, load_tagged) checked against
    ``schema`` (a Field: a top level that is not a fixed set of keys, e.g. a map of free names);
    problems are named by file, line and key path."""
    return check_node(
        _Value(doc.value, (), doc.line), doc.file, schema, what=what, fix=fix, error=error
    )


def check_node(
    node: Node,
    file: str,
    schema: Section | Field,
    *,
    what: str,
    fix: str | None = None,
    error: type[KitError] = KitError,
) -> Any:
    walker = _Walker()
    if isinstance(schema, Field):
        data = walker.field(schema, node, "")
    else:
        data = walker.section(schema, node, "")
    _raise(walker, file, what, fix, error)  # a None section or a _BAD field recorded a problem
    return data


def yaml_node(loader: yaml.SafeLoader, node: yaml.Node) -> Node:
    """A composed node (e.g. a yamlbound.Document's root) to check with `check_node`."""
    return _Yaml(loader, node)


# --- sections derived from dataclasses ---


class _Unions(ast.NodeTransformer):
    """`A | B` in an annotation as `Union[A, B]`, which Python 3.9 can evaluate."""

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        if not isinstance(node.op, ast.BitOr):
            return node
        pair = ast.Tuple([node.left, node.right], ast.Load())
        return ast.Subscript(ast.Name("_Union", ast.Load()), pair, ast.Load())


def type_hints(cls: type) -> dict[str, Any]:
    """typing.get_type_hints of a kit dataclass, also on the Python 3.9 of a login node (the kit
    core's floor), which cannot evaluate the `X | None` of its string annotations."""
    return typing.get_type_hints(cls) if sys.version_info >= (3, 10) else evaluated_hints(cls)


def evaluated_hints(cls: type) -> dict[str, Any]:
    """The annotations of `cls` and its bases evaluated with each `|` as typing.Union."""
    namespace = {**vars(sys.modules[cls.__module__]), "_Union": Union}
    hints: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        for name, text in vars(klass).get("__annotations__", {}).items():
            if isinstance(text, str):
                tree = ast.fix_missing_locations(_Unions().visit(ast.parse(text, mode="eval")))
                text = eval(compile(tree, "<annotation>", "eval"), namespace)  # the kit's own code
            hints[name] = text
    return hints


_SCALARS = {str: "str", int: "int", float: "float", bool: "bool"}


def field_of(hint: Any) -> Field:
    """The Field a dataclass field's type names: str, int, float, bool, X | None, a dataclass,
    list[X] / tuple[X, ...], dict[str, X]."""
    args = typing.get_args(hint)
    origin = typing.get_origin(hint)
    if origin in (Union, getattr(types, "UnionType", Union)) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        if len(rest) != 1:
            raise TypeError(f"no schema field for {hint!r}")
        return dataclasses.replace(field_of(rest[0]), nullable=True)
    if hint in _SCALARS:
        return Field(_SCALARS[hint])
    if hint is Any or hint in (list, dict):
        return Field("any")
    if dataclasses.is_dataclass(hint):
        return Field(section_of(hint))  # type: ignore[arg-type]
    if origin in (list, tuple) and args and (origin is list or args[1:] in ((), (Ellipsis,))):
        return Field(Items(field_of(args[0])))
    if origin is dict and len(args) == 2 and args[0] is str:
        return Field(Names(field_of(args[1])))
    if origin in (list, dict):
        return Field("any")
    raise TypeError(f"no schema field for {hint!r}")


ABOUT = "kit.schema"  # the dataclass field metadata key `about` fills and section_of reads


@dataclass(frozen=True)
class About:
    """What a dataclass field adds to the Field its annotation and default give."""

    doc: str
    check: Check | None = None
    choices: tuple[Any, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    positive: bool = False
    kind: str | None = None  # a scalar kind in place of the annotation's, e.g. "map[str,str]"
    section_check: SectionCheck | None = None  # a dataclass-valued field: its cross-field check


def about(
    doc: str,
    *,
    check: Check | None = None,
    choices: tuple[Any, ...] = (),
    minimum: float | None = None,
    maximum: float | None = None,
    positive: bool = False,
    kind: str | None = None,
    section_check: SectionCheck | None = None,
) -> dict[str, About]:
    """Metadata declaring a key where its dataclass field is, so the schema and the record cannot
    drift apart: ``port: int = field(default=22, metadata=about("SSH port", check=_port))``."""
    return {
        ABOUT: About(
            doc=doc,
            check=check,
            choices=choices,
            minimum=minimum,
            maximum=maximum,
            positive=positive,
            kind=kind,
            section_check=section_check,
        )
    }


def _with_about(spec: Field, extra: About) -> Field:
    kind: str | Section | Items | Names = extra.kind or spec.kind
    if extra.section_check is not None:
        if not isinstance(kind, Section):
            raise TypeError(f"a section check on a {kind!r} field")
        kind = dataclasses.replace(kind, check=extra.section_check)
    return dataclasses.replace(
        spec,
        kind=kind,
        doc=extra.doc,
        check=extra.check,
        choices=extra.choices,
        minimum=extra.minimum,
        maximum=extra.maximum,
        positive=extra.positive,
    )


def section_of(
    cls: type,
    *,
    only: tuple[str, ...] | None = None,
    skip: tuple[str, ...] = (),
    fields: dict[str, Field] | None = None,
    check: SectionCheck | None = None,
    open: bool = False,
    first: tuple[str, ...] = (),
) -> Section:
    """The Section of a frozen dataclass: each field's type from its annotation, required unless
    it has a default, with what its `about` metadata adds. ``only``/``skip`` pick the fields a
    file holds; ``fields`` replaces or adds a key's Field (its checks, bounds, choices);
    ``first``: keys listed first, in a file's reading order (a dataclass puts its required
    fields before those with defaults)."""
    hints = type_hints(cls)
    out: dict[str, Field] = {}
    for f in dataclasses.fields(cls):
        if f.name in skip or (only is not None and f.name not in only):
            continue
        spec = field_of(hints[f.name])
        if f.default is not dataclasses.MISSING:
            spec = dataclasses.replace(spec, required=False, default=f.default)
        elif f.default_factory is not dataclasses.MISSING:
            spec = dataclasses.replace(spec, required=False, default=f.default_factory())
        if ABOUT in f.metadata:
            spec = _with_about(spec, f.metadata[ABOUT])
        out[f.name] = spec
    for name, spec in (fields or {}).items():
        out[name] = spec
    out = {**{name: out[name] for name in first}, **out}
    return Section(out, check=check, open=open)


def record(cls: type, data: dict[str, Any], **more: Any) -> Any:
    """A dataclass built from a checked section (``more``: fields given here instead), each value
    as its field's type says: a nested section as its dataclass, a list as a tuple, a mapping's
    values as strings for a dict[str, str] (a "map[str,str]" key takes numbers too)."""
    hints = type_hints(cls)
    values = {}
    for f in dataclasses.fields(cls):
        if f.name in more or f.name in data:
            value = more[f.name] if f.name in more else data[f.name]
            values[f.name] = _typed(hints[f.name], value)
    return cls(**values)


def _typed(hint: Any, value: Any) -> Any:
    """A checked value as the type ``hint`` names (record's conversions)."""
    args = typing.get_args(hint)
    origin = typing.get_origin(hint)
    if origin in (Union, getattr(types, "UnionType", Union)) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return value if value is None or len(rest) != 1 else _typed(rest[0], value)
    if dataclasses.is_dataclass(hint) and isinstance(value, dict):
        return record(hint, value)  # type: ignore[arg-type]
    if origin is tuple and isinstance(value, list):
        return tuple(value)
    if origin is dict and args == (str, str) and isinstance(value, dict):
        return {k: str(v) for k, v in value.items()}
    return value
