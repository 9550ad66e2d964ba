"""YAML with bounded work: size, nesting depth, alias expansion and tags are checked while the
document is composed, before any value is built.

PyYAML's safe loader shares aliased values, so a "billion laughs" document costs little to load,
but every later walk over it (a repr in an error, a join into a batch script) pays the expanded
size. Each node here carries its expanded weight (nodes plus characters), computed bottom-up as it
is composed, so an expansion past the bound is refused at the node that crosses it, in time
linear in the text. Composition recurses per level: the depth bound keeps it far from Python's
recursion limit.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import yaml

from kit.errors import KitError
from kit.readfile import MAX_BYTES, read_text

MAX_DEPTH = 50
EXPANSION = 16  # aliases may make a document weigh at most this many times its own text
# Tags the safe constructor builds into plain values;
# anything else (!!python/..., !local) is refused.
ALLOWED_TAGS = frozenset(t for t in yaml.SafeLoader.yaml_constructors if t) | {
    "tag:yaml.org,2002:merge"
}


class _Bound(yaml.MarkedYAMLError):
    def __init__(self, problem: str, mark: yaml.Mark) -> None:
        super().__init__(problem=problem, problem_mark=mark)


class BoundedLoader(yaml.SafeLoader):
    """A SafeLoader whose composer refuses deep, alias-inflated, recursive or foreign-tagged
    nodes.
    """

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.depth = 0
        self.max_weight = EXPANSION * len(text) + 4096

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            target = self.anchors.get(event.anchor)
            if target is not None and not hasattr(target, "weight"):
                raise _Bound(
                    f"alias *{event.anchor} refers to a value that contains it", event.start_mark
                )
            return super().compose_node(parent, index)
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise _Bound(f"nested deeper than {MAX_DEPTH} levels", event.start_mark)
        node = super().compose_node(parent, index)
        self.depth -= 1
        if node.tag not in ALLOWED_TAGS:
            raise _Bound(
                f"tag {node.tag.replace('tag:yaml.org,2002:', '!!')[:60]} is not allowed "
                "(plain YAML values only)",
                node.start_mark,
            )
        if isinstance(node, yaml.ScalarNode):
            node.weight = 1 + len(node.value)
        elif isinstance(node, yaml.SequenceNode):
            node.weight = 1 + sum(child.weight for child in node.value)
        else:
            node.weight = 1 + sum(k.weight + v.weight for k, v in node.value)
        if node.weight > self.max_weight:
            raise _Bound(
                f"aliases expand the document past {self.max_weight} nodes and characters "
                f"({EXPANSION} times its size)",
                node.start_mark,
            )
        return node


def _line(text: str, exc: yaml.YAMLError) -> int | None:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    if mark is not None:
        line: int = mark.line + 1
        return line
    position = getattr(exc, "position", None)  # ReaderError: an unacceptable character
    return text.count("\n", 0, position) + 1 if isinstance(position, int) else None


def reason(exc: Exception) -> str:
    """What PyYAML (or the bounds, or int()) found, in one short line."""
    if isinstance(exc, yaml.reader.ReaderError):
        return f"character #x{exc.character:04x} is not allowed in YAML"
    context, problem = getattr(exc, "context", None), getattr(exc, "problem", None)
    what = (f"{context}: {problem}" if context and problem else problem) or (
        str(exc).splitlines() or [""]
    )[0]
    return what[:120]


def problem_of(text: str, file: str | os.PathLike[str], exc: yaml.YAMLError) -> tuple[str, str]:
    """(FILE:LINE, what was found): an error's where and what."""
    line = _line(text, exc)
    kind = "YAML refused" if isinstance(exc, _Bound) else "not valid YAML"
    return f"{file}{f':{line}' if line else ''}", f"{kind}: {reason(exc)}"


def compose(
    text: str,
    file: str | os.PathLike[str],
    *,
    error: type[KitError] = KitError,
    fix: str = "correct the YAML at that line",
) -> tuple[BoundedLoader, yaml.Node | None]:
    """The node tree of a single-document YAML text (None if empty), and the loader to build
    values; ``fix``: the error's fix for a text that is not one.
    """
    try:
        loader = BoundedLoader(text)  # the reader refuses raw control characters here
        try:
            return loader, loader.get_single_node()
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        where, what = problem_of(text, file, exc)
        raise error(what, fix=fix, where=where) from None


def construct(
    loader: BoundedLoader,
    node: yaml.Node,
    file: str | os.PathLike[str],
    *,
    error: type[KitError] = KitError,
    fix: str = "correct the YAML at that line",
) -> Any:
    """The Python value of a composed node; a value YAML cannot build is one line naming its
    line.
    """
    try:
        return loader.construct_object(node, deep=True)
    except yaml.YAMLError as exc:
        where, what = problem_of("", file, exc)
        raise error(what, fix=fix, where=where) from None
    except (ValueError, OverflowError) as exc:  # an integer of more than 4300 digits, a bad date
        raise error(
            f"a value YAML cannot build ({reason(exc)})",
            fix=fix,
            where=f"{file}:{node.start_mark.line + 1}",
        ) from None


@dataclass(frozen=True)
class Document:
    """A parsed YAML file: its value, and the nodes to name the line of any part of it."""

    file: str
    root: yaml.Node | None
    value: Any

    def line(self, *path: str | int) -> int:
        """The line of the deepest node along ``path`` (keys and list indexes) that exists."""
        node, line = self.root, (self.root.start_mark.line + 1 if self.root else 1)
        for step in path:
            if isinstance(node, yaml.MappingNode):
                key, node = next(
                    ((k, v) for k, v in node.value if getattr(k, "value", None) == step),
                    (None, None),
                )
                # the key's line: where a reader looks
                line = key.start_mark.line + 1 if key else line
            elif (
                isinstance(node, yaml.SequenceNode)
                and isinstance(step, int)
                and 0 <= step < len(node.value)
            ):
                node = node.value[step]
                line = node.start_mark.line + 1
            else:
                break
        return line

    def where(self, *path: str | int) -> str:
        return f"{self.file}:{self.line(*path)}"


def parse(
    text: str,
    file: str | os.PathLike[str],
    *,
    error: type[KitError] = KitError,
    fix: str = "correct the YAML at that line",
) -> Document:
    loader, root = compose(text, file, error=error, fix=fix)
    value = None if root is None else construct(loader, root, file, error=error, fix=fix)
    return Document(str(file), root, value)


def load_file(
    path: str | os.PathLike[str],
    what: str,
    fix: str,
    *,
    error: type[KitError] = KitError,
    limit: int = MAX_BYTES,
) -> Document:
    """A YAML file the kit reads: regular, at most ``limit`` bytes, UTF-8, bounded (``fix``: the
    errors' fix); FileNotFoundError passes through so that callers can say what creates the
    file."""
    return parse(read_text(path, what, limit=limit, error=error), path, error=error, fix=fix)


def load_tagged(
    path: str | os.PathLike[str],
    what: str,
    tag: str,
    *,
    version: int,
    fix: str,
    missing: str,
    wrote: str,
    missing_fix: str | None = None,
) -> Document:
    """A YAML file the kit wrote, recognised by ``tag: version`` at its top: a missing file is
    ``missing`` (with ``missing_fix``), any other content is not ``wrote``; one line each, naming
    the file (and line)."""
    try:
        doc = load_file(path, what, fix)
    except FileNotFoundError:
        raise KitError(missing, where=str(path), fix=missing_fix) from None
    if not isinstance(doc.value, dict) or doc.value.get(tag) != version:
        raise KitError(f"key {tag} is not {version}: not {wrote}", fix=fix, where=doc.where(tag))
    return doc
