"""Runs a tutorial page as a reader would: its ```console blocks, command by command, in one bash
process, checking each command's output and exit code against what the page shows. A page that
drifts from the code fails its test instead of misleading its reader.

The format: a line starting with `$ ` is a command (a line ending in `\\` continues it on the next
line); every other line of the block is expected output of the command above it, to be found in
order, each contained in one line of the command's combined stdout+stderr (trailing whitespace
stripped). `…` in a shown line matches any text, and a run of two or more spaces any run of
blanks (table padding); a line that is exactly `…` stands for omitted lines. A block whose first
line is `# exits N` expects its commands to exit with N, others with 0. Other fences (```sh) are
shown, not run.
"""

from __future__ import annotations

import os
import re
import selectors
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from tests.support.paths import REPO

ELLIPSIS = "…"
_EXITS = re.compile(r"#\s*exits\s+(\d+)")
_SHOWN_LINES = 80  # of a failing command's output, in the error (the end: where it failed)


@dataclass(frozen=True)
class Command:
    line: int  # of its `$ ` in the page, 1-based
    text: str  # as bash reads it (continuation lines joined by their backslash-newline)
    expected: tuple[str, ...]  # the shown output lines, `…` lines left out
    exit_code: int


def blocks(path: Path) -> list[Command]:
    """The commands of the page's ```console blocks, in page order."""
    commands: list[Command] = []
    for info, body in _fences(Path(path)):
        if info == "console":
            commands += _commands(Path(path), body)
    return commands


def _fences(path: Path) -> list[tuple[str, list[tuple[int, str]]]]:
    """The page's fenced blocks: info string, and the numbered lines inside, stripped (a shown line
    is matched as contained in a real one, so its indent is no part of it)."""
    found: list[tuple[str, list[tuple[int, str]]]] = []
    body: list[tuple[int, str]] | None = None
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if body is None and line.startswith("```"):
            body = []
            found.append((line[3:].strip(), body))
        elif line.startswith("```"):
            body = None
        elif body is not None:
            body.append((number, line))
    if body is not None:
        raise ValueError(f"{_name(path)}: its last ``` block is not closed")
    return found


def _commands(path: Path, body: list[tuple[int, str]]) -> list[Command]:
    """One console block's commands, with their shown output and expected exit code."""
    exit_code = 0
    if body and _EXITS.fullmatch(body[0][1]):
        exit_code = int(body.pop(0)[1].split()[-1])
    commands: list[Command] = []
    text: list[str] = []  # the lines of the command being read
    out: list[str] = []
    start = 0
    continued = False
    for number, line in body:
        if continued:
            text.append(line)
        elif line.startswith("$ "):
            if text:
                commands.append(Command(start, "\n".join(text), tuple(out), exit_code))
            start, text, out = number, [line[2:]], []
        elif not text and line:
            raise ValueError(
                f"{_name(path)}:{number}: output {line!r} with no `$ ` command above it"
            )
        elif text and line and line != ELLIPSIS:  # a blank line shows nothing
            out.append(line)
        continued = (continued or line.startswith("$ ")) and line.endswith("\\")
    if text:
        commands.append(Command(start, "\n".join(text), tuple(out), exit_code))
    return commands


def matches(shown: str, real: str) -> bool:
    """Whether a shown line is (a trimmed part of) the real one: `…` stands for any text, and a run
    of two or more spaces for any run of blanks (a table pads its columns to what is in them)."""
    parts = (re.escape(part) for part in shown.rstrip().split(ELLIPSIS))
    pattern = ".*".join(re.sub(r"(\\ ){2,}", r"\\s+", part) for part in parts)
    return re.search(pattern, real.rstrip()) is not None


def missing(expected: tuple[str, ...], output: str) -> str | None:
    """The first shown line not found, in order, in the output; None when all are."""
    real = output.splitlines()
    at = 0
    for shown in expected:
        while at < len(real) and not matches(shown, real[at]):
            at += 1
        if at == len(real):
            return shown
        at += 1
    return None


def run_page(
    path: Path,
    cwd: Path,
    env: dict[str, str],
    timeout: float,
    stand_ins: Mapping[str, str] | None = None,
) -> None:
    """Runs the page's commands one after the other in one bash process started in cwd, so `cd`,
    `export` and shell variables carry over; stops at the first command whose exit code or
    output differs from the page (AssertionError naming page:line, the command and its output).
    timeout: seconds for the whole page. stand_ins: page command (its exact text) -> a command
    the test runs instead (e.g. one that copies what the suite already built to where the page's
    command writes it); it must exit as the page expects, its output is not compared, and a
    page command it names must exist (the page and its test cannot drift apart)."""
    commands = blocks(path)
    stand_ins = dict(stand_ins or {})
    unknown = set(stand_ins) - {c.text for c in commands}
    if unknown:
        raise AssertionError(f"{_name(path)}: no command {sorted(unknown)!r} to stand in for")
    deadline = time.monotonic() + timeout
    with tempfile.TemporaryDirectory(prefix="tutorial-") as scratch:
        shell = subprocess.Popen(
            ["bash", "--noprofile", "--norc"],
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its process group: a timeout stops what the command started
        )
        try:
            for index, command in enumerate(commands):
                script, out = Path(scratch, f"{index}.sh"), Path(scratch, f"{index}.out")
                script.write_text(
                    stand_ins.get(command.text, command.text) + "\n", encoding="utf-8"
                )
                # sourced: a command's syntax error cannot swallow the next ones; stdin closed, as
                # a reader's command never waits for input
                line = f'{{ . "{script}"; }} >"{out}" 2>&1 </dev/null; echo "rc=$?"\n'
                assert shell.stdin is not None
                shell.stdin.write(line.encode())
                shell.stdin.flush()
                code = _exit_code(shell, deadline)
                output = out.read_text(encoding="utf-8", errors="replace") if out.exists() else ""
                where = f"{_name(path)}:{command.line}: $ {command.text}"
                if isinstance(code, str):
                    _fail(where, code if code else f"did not finish within {timeout:.0f} s", output)
                elif code != command.exit_code:
                    _fail(where, f"exited {code}, the page expects {command.exit_code}", output)
                lost = None if command.text in stand_ins else missing(command.expected, output)
                if lost is not None:
                    _fail(where, f"the shown line {lost!r} is not in its output (in order)", output)
        finally:
            if shell.poll() is None:
                os.killpg(shell.pid, signal.SIGKILL)
            shell.wait()
            for stream in (shell.stdin, shell.stdout):
                if stream is not None:
                    stream.close()


def _exit_code(shell: subprocess.Popen, deadline: float) -> int | str:
    """The exit code the shell reports for the command it ran; or why there is none: "" past the
    deadline, or the command ended the shell (`exit`), which the next commands needed."""
    assert shell.stdout is not None
    said = b""
    with selectors.DefaultSelector() as selector:
        selector.register(shell.stdout, selectors.EVENT_READ)
        while not said.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not selector.select(left):
                return ""
            chunk = os.read(shell.stdout.fileno(), 64)
            if not chunk:
                return f"ended the page's shell (exit code {shell.wait()})"
            said += chunk
    return int(said.decode().strip().removeprefix("rc="))


def _fail(where: str, why: str, output: str) -> NoReturn:
    lines = output.splitlines()
    tail = lines[-_SHOWN_LINES:]
    cut = f"[{len(lines) - len(tail)} lines above left out]\n" if len(lines) > len(tail) else ""
    raise AssertionError(f"{where}\n{why}; its output:\n{cut}" + "\n".join(tail))


def _name(path: Path) -> str:
    """The page as the reader of a failure finds it: relative to the checkout when inside it."""
    path = Path(path).resolve()
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)
