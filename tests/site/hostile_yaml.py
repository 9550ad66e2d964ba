"""Hypothesis strategies for hostile site configs: the shipped laptop.yaml as a dict, mutated
(keys deleted, types swapped, line breaks and control characters, huge numbers, deep nesting,
shared values that YAML writes as aliases), then optionally spliced with raw YAML fragments
(tags, recursive or undefined aliases, raw control characters) or bytes that are no UTF-8."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[2]
LAPTOP = yaml.safe_load((REPO / "site-configs" / "laptop.yaml").read_text())

BREAKS = [
    "\n",
    "\r",
    "\x0b",
    "\x0c",
    "\x1c",
    "\x1e",
    "\x85",
    "\u2028",
    "\u2029",
    "\x00",
    "\x1b[2J",
    "\t",
]
INJECTIONS = ["\n#SBATCH --uid=0", "\nrm -rf ~", "';touch /tmp/pwned;'", "$(id)", "`id`", "\n"]
FRAGMENTS = [
    "!!python/object/apply:os.system ['true']",
    "!!python/name:os.system ''",
    "!local x",
    "*undefined",
    "&a [*a]",
    "!!binary Zm9v",
    "!!set {a, b}",
    "!!timestamp 2001-13-45",
    "[[[[[[[[[[[[1]]]]]]]]]]]]",
    "{",
    "'unterminated",
    "\x01",
    "\x7f",
    "\ufeffx",
    "? [a]\n  : 1",
    "!!omap [a: 1]",
    "1e400",
    ".nan",
    "0x" + "f" * 40,
    "9" * 5000,
    "<<: {a: 1}",
    "|\n  two\n  lines",
    "- a\n- b",
    "&x 1 *x",
]


def key_paths(doc: Any, prefix: tuple = (), seen: frozenset = frozenset()) -> list[tuple]:
    """Every key path of a nested mapping, sections included (a shared value may make it cyclic)."""
    paths = []
    if isinstance(doc, dict) and id(doc) not in seen:
        for key, value in doc.items():
            paths.append(prefix + (key,))
            paths += key_paths(value, prefix + (key,), seen | {id(doc)})
    return paths


def nested(depth: int, leaf: Any = 1) -> Any:
    for _ in range(depth):
        leaf = [leaf]
    return leaf


def laughs(width: int, depth: int) -> list:
    """A value every level of which is shared `width` times: safe_dump writes it with aliases."""
    value: Any = ["lol"]
    for _ in range(depth):
        value = [value] * width
    return value


hostile_text = st.one_of(
    st.text(max_size=20),
    st.builds(
        lambda a, brk, b: a + brk + b,
        st.text(max_size=8),
        st.sampled_from(BREAKS + INJECTIONS),
        st.text(max_size=8),
    ),
    st.text(st.characters(categories=["Cc", "Zl", "Zp", "Cf", "Ll", "Nd", "Po"]), max_size=12),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=10**9, max_value=10**40).map(lambda i: -i if i % 2 else i),
    st.floats(),
    hostile_text,
)
values = st.one_of(
    st.recursive(
        scalars,
        lambda inner: (
            st.lists(inner, max_size=4) | st.dictionaries(hostile_text, inner, max_size=3)
        ),
        max_leaves=8,
    ),
    st.builds(nested, st.integers(20, 150)),
    st.builds(laughs, st.integers(2, 12), st.integers(1, 7)),
)


@st.composite
def mutated_site(draw, base: dict | None = None, least: int = 1, most: int = 4) -> dict:
    """The site dict with `least` to `most` mutations."""
    doc = copy.deepcopy(base if base is not None else LAPTOP)
    for _ in range(draw(st.integers(least, most))):
        path = draw(st.sampled_from(key_paths(doc) or [("name",)]))
        holder = doc
        for key in path[:-1]:
            holder = holder[key] if isinstance(holder, dict) else {}
        if not isinstance(holder, dict):
            continue
        action = draw(st.sampled_from(["delete", "replace", "break", "share"]))
        if action == "delete":
            holder.pop(path[-1], None)
        elif action == "replace":
            holder[path[-1]] = draw(values)
        elif action == "break" and isinstance(holder.get(path[-1]), str):
            text = holder[path[-1]]
            at = draw(st.integers(0, len(text)))
            holder[path[-1]] = text[:at] + draw(st.sampled_from(BREAKS + INJECTIONS)) + text[at:]
        elif action == "share":  # the same object twice: safe_dump writes an anchor and an alias
            other = draw(st.sampled_from(key_paths(doc)))
            target = doc
            for key in other[:-1]:
                target = target.get(key, {}) if isinstance(target, dict) else {}
            if isinstance(target, dict) and other[-1] in target:
                holder[path[-1]] = target[other[-1]]
    return doc


@st.composite
def site_bytes(draw, base: dict | None = None) -> bytes:
    """A mutated site as YAML bytes, sometimes with a raw fragment spliced in or broken UTF-8."""
    text = yaml.safe_dump(
        draw(mutated_site(base)), sort_keys=False, allow_unicode=draw(st.booleans())
    )
    lines = text.split("\n")
    if draw(st.booleans()):
        candidates = [i for i, line in enumerate(lines) if ": " in line] or [0]
        i = draw(st.sampled_from(candidates))
        lines[i] = lines[i].split(": ", 1)[0] + ": " + draw(st.sampled_from(FRAGMENTS))
    data = "\n".join(lines).encode()
    if draw(st.integers(0, 9)) == 0:
        at = draw(st.integers(0, len(data)))
        data = (
            data[:at]
            + draw(st.sampled_from([b"\xff", b"\xc3", b"\xe9", b"\xed\xa0\x80"]))
            + data[at:]
        )
    return data
