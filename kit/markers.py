"""Evaluates the environment markers of constraints.txt for a Python other than the one running.

pip evaluates a pin list's markers with its own interpreter, so to ask which pins a site's
Python 3.9 installs, the check of the pin list (kit/wheelcheck.py) evaluates them itself. The
grammar is the one kit/pins.py accepts (`VAR OP 'VALUE'` joined by and/or, in parentheses);
standard library only: the check runs before anything is installed.
"""

from __future__ import annotations

import re

from kit.errors import KitError

VERSION_VARS = ("python_version", "python_full_version", "implementation_version")
STRING_VARS = (
    "sys_platform",
    "platform_system",
    "platform_machine",
    "implementation_name",
    "platform_python_implementation",
    "os_name",
    "platform_release",
    "platform_version",
)
_TOKEN = re.compile(r"\s*(\(|\)|==|!=|<=|>=|~=|<|>|'[^']*'|[a-z_]+)")
_VERSION = re.compile(r"[0-9]+(?:\.[0-9]+){0,3}")
MAX_LENGTH = 2000  # a lock's longest marker is ~80 characters


class MarkerError(KitError, ValueError):
    """A marker this evaluator does not understand (named with the fix)."""


def linux_env(python: str, patch: int, machine: str = "x86_64") -> dict[str, str]:
    """The marker variables of CPython ``python`` (e.g. "3.11") at ``patch`` on Linux."""
    return {
        "python_version": python,
        "python_full_version": f"{python}.{patch}",
        "implementation_version": f"{python}.{patch}",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "platform_machine": machine,
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "os_name": "posix",
        "platform_release": "",
        "platform_version": "",
    }


def _version(text: str, marker: str) -> tuple[int, ...]:
    if not _VERSION.fullmatch(text):
        raise MarkerError(
            f"marker {marker!r}: {text!r} is not a version this check compares",
            fix="regenerate the pin list with scripts/lock.sh",
        )
    return tuple(int(part) for part in text.split("."))


def _pad(a: tuple[int, ...], n: int) -> tuple[int, ...]:
    return a + (0,) * (n - len(a))


def _compare_versions(have: str, op: str, want: str, marker: str) -> bool:
    if want.endswith(".*") and op in ("==", "!="):  # a prefix match: 3.10.* holds 3.10 and 3.10.7
        prefix = _version(want[:-2], marker)
        same = _pad(_version(have, marker), len(prefix))[: len(prefix)] == prefix
        return same if op == "==" else not same
    v, w = _version(have, marker), _version(want, marker)
    n = max(len(v), len(w))
    v, w = _pad(v, n), _pad(w, n)
    if op == "~=":
        if len(_version(want, marker)) < 2:
            raise MarkerError(
                f"marker {marker!r}: ~= needs two or more version parts",
                fix="regenerate the pin list with scripts/lock.sh",
            )
        kept = len(_version(want, marker)) - 1
        return v >= w and v[:kept] == w[:kept]
    return {"==": v == w, "!=": v != w, "<": v < w, "<=": v <= w, ">": v > w, ">=": v >= w}[op]


def _term(var: str, op: str, value: str, env: dict[str, str], marker: str) -> bool:
    if var in VERSION_VARS and op not in ("in", "not in"):
        return _compare_versions(env[var], op, value, marker)
    if var not in VERSION_VARS + STRING_VARS:
        raise MarkerError(
            f"marker {marker!r}: unknown variable {var!r}",
            fix="regenerate the pin list with scripts/lock.sh",
        )
    have = env[var]
    if op == "==":
        return have == value
    if op == "!=":
        return have != value
    if op == "in":
        return have in value
    if op == "not in":
        return have not in value
    raise MarkerError(
        f"marker {marker!r}: {var} {op} compares no versions",
        fix="regenerate the pin list with scripts/lock.sh",
    )


def _tokens(marker: str) -> list[str]:
    out, pos = [], 0
    while pos < len(marker):
        match = _TOKEN.match(marker, pos)
        if not match or match.end() == pos:
            if marker[pos:].strip() == "":
                break
            raise MarkerError(
                f"marker {marker!r}: cannot read it at {marker[pos : pos + 20]!r}",
                fix="regenerate the pin list with scripts/lock.sh",
            )
        out.append(match.group(1))
        pos = match.end()
    return out


def evaluate(marker: str, env: dict[str, str]) -> bool:
    """Whether ``marker`` holds in ``env`` (see linux_env); `and` binds tighter than `or`."""
    if len(marker) > MAX_LENGTH:
        raise MarkerError(
            f"marker of {len(marker)} characters",
            fix="regenerate the pin list with scripts/lock.sh",
        )
    tokens = _tokens(marker)
    pos = 0

    def fail() -> MarkerError:
        return MarkerError(
            f"marker {marker!r}: unexpected {' '.join(tokens[pos : pos + 3]) or 'end'!r}",
            fix="regenerate the pin list with scripts/lock.sh",
        )

    def take() -> str:
        nonlocal pos
        if pos >= len(tokens):
            raise fail()
        pos += 1
        return tokens[pos - 1]

    def atom() -> bool:
        if pos < len(tokens) and tokens[pos] == "(":
            take()
            inner = either()
            if take() != ")":
                raise fail()
            return inner
        var, op = take(), take()
        if op == "not":
            if take() != "in":
                raise fail()
            op = "not in"
        value = take()
        if (
            not re.fullmatch(r"[a-z_]+", var)
            or op not in ("==", "!=", "<", "<=", ">", ">=", "~=", "in", "not in")
            or not (value.startswith("'") and value.endswith("'") and len(value) >= 2)
        ):
            raise fail()
        return _term(var, op, value[1:-1], env, marker)

    def both() -> bool:
        value = atom()
        while pos < len(tokens) and tokens[pos] == "and":
            take()
            value = atom() and value  # both sides are always read, so errors do not depend on order
        return value

    def either() -> bool:
        value = both()
        while pos < len(tokens) and tokens[pos] == "or":
            take()
            value = both() or value
        return value

    result = either()
    if pos != len(tokens):
        raise fail()
    return result
