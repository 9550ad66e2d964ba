"""build/vcluster/state: what `up` made, written BEFORE each thing is made, so that `down` can
remove exactly that (and no more) even after an `up` killed half-way."""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kit.atomic import atomic_write_text
from kit.errors import KitError
from kit.readfile import read_json

STATE_FORMAT = 1
STATE_NAME = "state"
NAME_RE = re.compile(r"[a-z][a-z0-9]{0,7}")  # interface names: "kvc-" + name + "-" + node <= 15
KINDS = ("bridge", "netns", "veth", "daemon")


class VclusterError(KitError):
    """A virtual cluster that cannot be made, found or removed: one line with the fix."""


@dataclass
class Made:
    """One thing `up` made: a bridge, a namespace, a host-side veth or a daemon (by its pid
    file).
    """

    kind: str
    name: str
    pid_file: str | None = None
    argv_mark: str | None = None  # a word of the daemon's command line: a reused pid is not ours


@dataclass
class ClusterState:
    name: str
    directory: str
    subnet: str
    nodes: list[dict]  # {"name", "netns", "veth", "address"}
    bridge: str
    host_address: str
    controller: str  # the host's short name: slurmctld refuses any other
    partition: str
    made: list[Made] = field(default_factory=list)
    complete: bool = False

    @property
    def path(self) -> Path:
        return Path(self.directory) / STATE_NAME

    @property
    def conf(self) -> Path:
        return Path(self.directory) / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        """What a client (sinfo, sbatch, kit scale) needs to talk to this cluster."""
        return dict(os.environ, SLURM_CONF=str(self.conf))

    def record(self, made: Made) -> None:
        """Note a thing before making it (intent first: a kill between the two leaves it noted)."""
        self.made.append(made)
        self.save()

    def save(self) -> None:
        doc = {"kit_vcluster": STATE_FORMAT, **asdict(self)}
        atomic_write_text(self.path, json.dumps(doc, indent=1) + "\n")


def load_state(directory: Path) -> ClusterState | None:
    """The recorded cluster, or None if there is none; a state file kit did not write is one
    line.
    """
    path = directory / STATE_NAME
    fix = (
        "restore the state file kit vcluster up wrote, "
        f"or remove what it made by hand and delete {path}"
    )
    try:
        doc = read_json(path, "virtual cluster state", fix, limit=1 << 20)
    except FileNotFoundError:
        return None
    try:
        if doc.pop("kit_vcluster") != STATE_FORMAT:
            raise ValueError("format")
        made = [Made(**m) for m in doc.pop("made")]
        state = ClusterState(**doc, made=made)
        if not NAME_RE.fullmatch(state.name) or any(m.kind not in KINDS for m in made):
            raise ValueError("names")
    except (AttributeError, KeyError, TypeError, ValueError):
        raise VclusterError(
            "not a virtual cluster state kit wrote", fix=fix, where=str(path)
        ) from None
    return state
