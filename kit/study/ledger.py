"""DIR/ledger.jsonl: every proposal, submission, result and failure of a study, in order.

Append-only JSON lines, each fsynced before the driver acts on it, so a driver killed at any point
leaves a ledger from which `kit study run DIR` resumes: what was proposed is not proposed again, a
finished evaluation is never re-run, an evaluation in flight is re-attached. The state of each
evaluation is the fold of its lines (`fold`). A half-written last line (the driver died inside a
write) is ignored and overwritten by the next append; any other line that is not a record the kit
wrote is refused in one line naming the file, the line and the fix.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kit.errors import KitError
from kit.excerpt import shown
from kit.readfile import json_kind, read_bytes
from kit.schema import Bad, Field, Names, Section, check_value
from kit.site.model import WALLTIME_RE
from kit.slurm.jobs import JOB_ID_RE

NAME = "ledger.jsonl"
FORMAT = 1
MAX_BYTES = 64 * 2**20  # a study of 10^4 evaluations with log tails fits many times over
MAX_LINE = 64 * 1024
MAX_LINES = 200_000
MAX_DEPTH = 6  # configs are flat mappings; the header nests the study options one level
EVAL_RE = re.compile(r"e[0-9]{4,6}")
KINDS = ("study", "proposed", "submitted", "finished", "failed", "cancelled", "started")
FIX = "restore the ledger.jsonl kit study wrote (or start a new study with kit study plan)"
MAX_PARALLEL = 1000  # evaluations in flight (kit study plan --parallel)
MAX_PILOT_NODES = 100_000
# kit.study.evaluate refuses a larger objective: no loss, score or rate is near it
MAX_OBJECTIVE = 1e15
MAX_VALUE = 1e15  # a config's numbers (kit.study.spec.MAX_MAGNITUDE)
MAX_TIME = 1e11  # seconds since the epoch (year 5138)
MAX_CONFIG_KEYS = 256


@dataclass
class Evaluation:
    """One evaluation as the ledger tells it."""

    eval_id: str
    config: dict[str, Any]
    prediction: dict[str, float] | None = None  # the searcher's guess at proposal time (mbo)
    submissions: list[dict[str, Any]] = field(default_factory=list)  # {"how", "job"|"pid", ...}
    state: str = "proposed"  # proposed | submitted | finished | failed | cancelled
    objective: float | None = None
    result: str | None = None
    error: str | None = None
    line: int = 0  # the ledger line that proposed it

    @property
    def done(self) -> bool:
        return self.state in ("finished", "failed")

    @property
    def in_flight(self) -> bool:
        return self.state in ("proposed", "submitted")


@dataclass
class Ledger:
    """The folded ledger: the study header and the evaluations in proposal order."""

    path: Path
    header: dict[str, Any]
    evaluations: dict[str, Evaluation]
    started: list[float]  # when each `kit study run` began
    end_order: dict[str, int] = field(default_factory=dict)  # eval id -> the line that ended it

    def done(self) -> list[Evaluation]:
        return [e for e in self.evaluations.values() if e.done]

    def in_flight(self) -> list[Evaluation]:
        return [e for e in self.evaluations.values() if e.in_flight]

    def next_id(self) -> str:
        return f"e{len(self.evaluations) + 1:04d}"


def create(study_dir: Path, header: dict[str, Any]) -> Path:
    """A new ledger holding only the study line; refused if one is there (O_EXCL: never
    overwritten).
    """
    path = study_dir / NAME
    line = _encode({"event": "study", "format": FORMAT, **header})
    try:
        fd = os.open(
            path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644
        )
    except FileExistsError:
        raise KitError(
            f"{path} exists: this directory holds a study already",
            fix=f"kit study run {study_dir} to continue it, or plan into a new directory",
        ) from None
    with os.fdopen(fd, "wb") as fh:
        fh.write(line)
        fh.flush()
        os.fsync(fh.fileno())
    return path


def append(study_dir: Path, event: str, **fields: Any) -> None:
    """One record, durable before this returns. A torn last line (a killed writer) is cut first."""
    if event not in KINDS[1:]:
        raise ValueError(f"unknown ledger event {event!r}")
    line = _encode({"event": event, "t": round(time.time(), 3), **fields})
    path = study_dir / NAME
    fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":  # a torn line: cut back to the last newline
            tail = os.pread(fd, min(size, MAX_LINE + 1), max(0, size - MAX_LINE - 1))
            size -= len(tail) - (tail.rfind(b"\n") + 1)
            os.ftruncate(fd, size)
        if size + len(line) > MAX_BYTES:
            raise KitError(
                f"{path}: the ledger would pass {MAX_BYTES // 2**20} MiB", fix="start a new study"
            )
        os.pwrite(fd, line, size)
        os.fsync(fd)
    finally:
        os.close(fd)


def read(study_dir: Path) -> Ledger:
    """Parse and fold the ledger, bounded in bytes, lines, line length and nesting."""
    path = study_dir / NAME
    try:
        data = read_bytes(path, "study ledger", MAX_BYTES)
    except FileNotFoundError:
        raise KitError(
            f"{path}: no study here", fix=f"kit study plan SPEC --site S --dir {study_dir}"
        ) from None
    lines = data.split(b"\n")
    torn = lines.pop()  # after the last newline: empty, or a record a killed driver did not finish
    if len(lines) > MAX_LINES:
        raise KitError(
            f"more than {MAX_LINES} lines, more than a study writes", fix=FIX, where=str(path)
        )
    if torn and len(lines) == 0:
        lines, torn = [torn], b""
    records = [_decode(path, i + 1, raw) for i, raw in enumerate(lines)]
    if not records or records[0].get("event") != "study":
        raise KitError("the first line is not the study's header", fix=FIX, where=f"{path}:1")
    return fold(path, records)


def fold(path: Path, records: list[dict[str, Any]]) -> Ledger:
    """The ledger's state from its records; a record that contradicts the ones before is refused."""
    header = records[0]
    if header.get("format") != FORMAT:
        raise KitError(
            f"key format is {shown(header.get('format'))}, this kit reads {FORMAT}",
            fix=FIX,
            where=f"{path}:1",
        )
    check_header(path, header)
    evals: dict[str, Evaluation] = {}
    started: list[float] = []
    end_order: dict[str, int] = {}
    for n, raw in enumerate(records[1:], start=2):
        rec = _checked(f"{path}:{n}", raw)
        event, eid, where = rec["event"], rec.get("eval"), f"{path}:{n}"
        if event == "started":
            started.append(rec["t"])
            continue
        assert isinstance(eid, str)
        if event == "proposed":
            if eid in evals:
                raise KitError(f"{eid} proposed twice", fix=FIX, where=where)
            evals[eid] = Evaluation(eid, rec["config"], rec["prediction"], line=n)
            continue
        if eid not in evals:
            raise KitError(
                f"{eid} has a {event} record before it was proposed", fix=FIX, where=where
            )
        ev = evals[eid]
        if ev.done and event != "cancelled":
            raise KitError(
                f"{eid} has a {event} record after it {ev.state}: no evaluation is counted twice",
                fix=FIX,
                where=where,
            )
        if event == "submitted":
            ev.submissions.append({k: raw.get(k) for k in ("how", "job", "pid", "attached", "t")})
            ev.state = "submitted"
        elif event == "finished":
            ev.state, ev.objective, ev.result = "finished", rec["objective"], rec["result"]
            end_order[eid] = n
        elif event == "failed":
            ev.state, ev.error = "failed", rec["error"]
            end_order[eid] = n
        elif event == "cancelled" and not ev.done:
            ev.state = "cancelled"
    return Ledger(path=path, header=header, evaluations=evals, started=started, end_order=end_order)


def bounded_number(value: Any, limit: float) -> bool:
    """A JSON number (not a boolean) no larger than ``limit`` in size: JSON has no bound on digits,
    and a 400-digit integer converts to no float (OverflowError)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if isinstance(value, int) and value.bit_length() > 64:
        return False
    return math.isfinite(value) and abs(value) <= limit


def _eval_id(value: str) -> Bad | None:
    return None if EVAL_RE.fullmatch(value) else Bad(f"{shown(value)} is not an id like e0001")


def _job(value: str) -> Bad | None:
    return (
        None
        if JOB_ID_RE.fullmatch(value)
        else Bad(f"{shown(value)} is not a Slurm job id like \"123\"")
    )


def _config_value(value: Any) -> Bad | None:
    if isinstance(value, (str, bool)) or bounded_number(value, MAX_VALUE):
        return None
    return Bad(
        f"is {shown(value)}: not a flat mapping of numbers (at most {MAX_VALUE:g} in size), "
        "strings and booleans"
    )


def _config(config: dict) -> Bad | None:
    return None if len(config) <= MAX_CONFIG_KEYS else Bad(f"has more than {MAX_CONFIG_KEYS} keys")


def _any_text(value: Any) -> Bad | None:
    """Free text (a failure's log tail holds line breaks): shown escaped wherever it is printed."""
    if isinstance(value, str):
        return None
    return Bad(f"expected a string or null, got {type(value).__name__} {shown(value)}")


def _bounded(limit: float, **more: Any) -> Field:
    """A finite number no larger than ``limit`` in size (JSON has no bound on digits)."""
    return Field("float", minimum=-limit, maximum=limit, **more)


_EVENT = {"event": Field("str", choices=KINDS[1:])}
_EVAL = {"eval": Field("str", check=_eval_id)}
# Each record kind's keys, as the driver writes them; other keys (a time stamp) pass.
RECORDS = {
    "started": Section({**_EVENT, "t": _bounded(MAX_TIME)}, open=True),
    "proposed": Section(
        {
            **_EVENT,
            **_EVAL,
            "config": Field(Names(Field("any", check=_config_value)), check=_config),
            "prediction": Field(
                Section(
                    {
                        "mean": _bounded(MAX_OBJECTIVE, required=False),
                        "sd": _bounded(MAX_OBJECTIVE, required=False),
                    }
                ),
                nullable=True,
                required=False,
            ),
        },
        open=True,
    ),
    "submitted": Section(
        {
            **_EVENT,
            **_EVAL,
            "how": Field("str", choices=("local", "slurm", "pilot")),
            "job": Field("str", nullable=True, required=False, check=_job),
            "pid": Field("int", nullable=True, required=False, positive=True, maximum=2**31 - 1),
            "attached": Field("bool", nullable=True, required=False),
        },
        open=True,
    ),
    "finished": Section(
        {
            **_EVENT,
            **_EVAL,
            "objective": _bounded(MAX_OBJECTIVE),
            "result": Field("any", nullable=True, required=False, check=_any_text),
        },
        open=True,
    ),
    "failed": Section(
        {**_EVENT, **_EVAL, "error": Field("any", nullable=True, required=False, check=_any_text)},
        open=True,
    ),
    "cancelled": Section({**_EVENT, **_EVAL}, open=True),
}
_KIND_ONLY = Section(_EVENT, open=True)


def _checked(where: str, rec: dict[str, Any]) -> dict[str, Any]:
    """A record after its header, checked by its kind's section; one line naming the ledger line,
    the key and the fix otherwise."""
    check_value(rec, where, _KIND_ONLY, what="ledger record", fix=FIX)
    return check_value(rec, where, RECORDS[rec["event"]], what="ledger record", fix=FIX)


def _line_of_text(value: str) -> Bad | None:
    return None if len(value) <= 4096 else Bad("is longer than 4096 characters")


def _walltime(value: str) -> Bad | None:
    return None if WALLTIME_RE.fullmatch(value) else Bad(f"{shown(value)} is not HH:MM:SS")


def _text_field(nullable: bool = False) -> Field:
    return Field("str", nullable=nullable, required=False, check=_line_of_text)


# The keys `kit study plan` writes in the header, checked for type and bounds when read: a header
# edited to "parallel": 10**9 would make the driver ask for a billion configs, a wrongly typed one
# crash it. The study's options beside them pass.
HEADER = Section(
    {
        "site": _text_field(),
        "site_name": _text_field(),
        "parallel": Field("int", required=False, positive=True, maximum=MAX_PARALLEL),
        "pilot": Field(
            "int", nullable=True, required=False, positive=True, maximum=MAX_PILOT_NODES
        ),
        "walltime": Field("str", nullable=True, required=False, check=_walltime),
        "pair": _text_field(nullable=True),
        "python": _text_field(nullable=True),
        "objective": _text_field(),
        "direction": Field("str", required=False, choices=("minimize", "maximize")),
        "strategy": _text_field(),
        "created": _text_field(),
    },
    open=True,
)


def check_header(path: Path, header: dict[str, Any]) -> None:
    """The header's keys as `kit study plan` wrote them; one line naming ledger line 1 otherwise."""
    check_value(header, f"{path}:1", HEADER, what="study header", fix=FIX)


def _encode(record: dict[str, Any]) -> bytes:
    line = (
        json.dumps(record, sort_keys=True, allow_nan=False, separators=(",", ":")) + "\n"
    ).encode()
    if len(line) > MAX_LINE:
        raise KitError(
            f"a ledger record of {len(line)} bytes (at most {MAX_LINE}): "
            "a config or log tail too large",
            fix="shorter parameter values",
        )
    return line


def _decode(path: Path, n: int, raw: bytes) -> dict[str, Any]:
    where = f"{path}:{n}"
    if len(raw) > MAX_LINE:
        raise KitError(f"a line of {len(raw)} bytes (at most {MAX_LINE})", fix=FIX, where=where)
    if raw.count(b"{") + raw.count(b"[") > 4 * MAX_DEPTH and _depth(raw) > MAX_DEPTH:
        raise KitError(f"nested deeper than {MAX_DEPTH}", fix=FIX, where=where)
    try:
        record = json.loads(raw, parse_constant=_no_constant)
    except (ValueError, UnicodeDecodeError) as exc:
        raise KitError(f"not a JSON record ({shown(str(exc), 80)})", fix=FIX, where=where) from None
    if not isinstance(record, dict):
        raise KitError(
            f"{json_kind(record)}, not a ledger record (an object)", fix=FIX, where=where
        )
    return record


def _depth(raw: bytes) -> int:
    """Bracket nesting, strings skipped: checked before json.loads so a hostile line cannot recurse
    deep.
    """
    depth = deepest = 0
    in_string = escaped = False
    for byte in raw:
        if in_string:
            escaped, in_string = (False, True) if escaped else (byte == 0x5C, byte != 0x22)
        elif byte == 0x22:
            in_string = True
        elif byte in (0x7B, 0x5B):
            depth += 1
            deepest = max(deepest, depth)
        elif byte in (0x7D, 0x5D):
            depth -= 1
    return deepest


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")
