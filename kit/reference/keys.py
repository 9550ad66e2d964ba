"""The rows of a kit.schema tree, one per key (`scheduler.max_nodes`), for the pages that list a
file's keys: type, required or default, allowed values and meaning, all read from the Fields."""

from __future__ import annotations

from typing import Any

from kit.schema import Field, Items, Names, Section

HEADERS = ("key", "type", "required / default", "allowed", "meaning")
WIDTHS = (38, 24, 20, 30, 70)  # at most markdown.MAX_LINE with the separators
MAX_CHOICES = 12  # a longer list of allowed values is shortened
_SCALARS = {
    "str": "string",
    "int": "integer",
    "float": "number",
    "bool": "boolean",
    "any": "any value",
    "list[str]": "list of strings",
    "map[str,str]": "mapping of names to strings",
}


def rows(section: Section, prefix: str = "") -> list[list[str]]:
    """Each key of ``section`` and of the sections below it; a list's entries are `key[]`, a
    mapping's free names `key.NAME`."""
    out = []
    for name, spec in section.fields.items():
        out += _field_rows(f"{prefix}{name}", spec)
    return out


def rows_of(schema: Section | Field) -> list[list[str]]:
    """The rows of a file's schema: a Section's keys, or a top level that is one Field (a
    mapping of free names) as `(top level)` and the keys below it."""
    if isinstance(schema, Section):
        return rows(schema)
    top = ["(top level)", kind(schema), "required", allowed(schema), schema.doc]
    inner = _inner(schema)
    below = rows(inner, _child_prefix("", schema).lstrip(".")) if isinstance(inner, Section) else []
    return [top] + below


def _field_rows(key: str, spec: Field) -> list[list[str]]:
    row = [f"`{key}`", kind(spec), _presence(spec), allowed(spec), spec.doc]
    inner = _inner(spec)
    if isinstance(inner, Section):
        return [row] + rows(inner, _child_prefix(key, spec))
    return [row]


def _inner(spec: Field) -> Any:
    """The Section below a field, through lists and free-name mappings."""
    kind_ = spec.kind
    while isinstance(kind_, (Items, Names)):
        kind_ = kind_.of.kind
    return kind_


def _child_prefix(key: str, spec: Field) -> str:
    kind_ = spec.kind
    while isinstance(kind_, (Items, Names)):
        key += "[]" if isinstance(kind_, Items) else ".NAME"
        kind_ = kind_.of.kind
    return key + "."


def kind(spec: Field) -> str:
    """The type in words: `list of mappings`, `integer or null`."""
    text = _kind_words(spec.kind)
    return f"{text} or null" if spec.nullable else text


def _kind_words(kind_: Any) -> str:
    if isinstance(kind_, Section):
        return "mapping (open)" if kind_.open else "mapping"  # open: other keys pass
    if isinstance(kind_, Items):
        return f"list of {_plural(_kind_words(kind_.of.kind))}"
    if isinstance(kind_, Names):
        return f"mapping of names to {_plural(_kind_words(kind_.of.kind))}"
    return _SCALARS[kind_]


def _plural(words: str) -> str:
    first, _, rest = words.partition(" ")
    if first == "any":
        return "values"
    return f"{first}s {rest}".strip() if not first.endswith("s") else words


def _presence(spec: Field) -> str:
    if spec.required:
        return "required"
    if spec.default is None:
        return "optional" if not spec.nullable else "default `null`"
    return f"default {value(spec.default)}"


def allowed(spec: Field) -> str:
    """Choices and bounds, of the field or of a list's entries."""
    parts = []
    if spec.choices:
        shown = [value(c) for c in spec.choices[:MAX_CHOICES]]
        more = len(spec.choices) - MAX_CHOICES
        parts.append(", ".join(shown) + (f" and {more} more" if more > 0 else ""))
    if spec.positive:
        parts.append("> 0")
    if spec.minimum is not None:
        parts.append(f">= {_number(spec.minimum)}")
    if spec.maximum is not None:
        parts.append(f"<= {_number(spec.maximum)}")
    if isinstance(spec.kind, Items):
        low, high = spec.kind.min_len, spec.kind.max_len
        if low:
            parts.append(f"at least {low} entries")
        if high < Items(spec.kind.of).max_len:
            parts.append(f"at most {high} entries")
        entries = allowed(spec.kind.of)
        if entries:
            parts.append(f"each: {entries}")
    return "; ".join(parts)


def _number(x: float) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def value(x: Any) -> str:
    """A YAML value as written in a file."""
    if x is None:
        return "`null`"
    if isinstance(x, bool):
        return f"`{'true' if x else 'false'}`"
    if isinstance(x, (list, tuple)):
        return "`[]`" if not x else "`[" + ", ".join(str(v) for v in x) + "]`"
    if isinstance(x, dict):
        return "`{}`" if not x else "`{" + ", ".join(f"{k}: {v}" for k, v in x.items()) + "}`"
    return f"`{x}`" if x != "" else '`""`'
