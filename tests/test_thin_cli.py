"""The CLI is thin: `kit --version` and `kit --help` build the whole parser tree, yet import none of
the heavy or hostile-input libraries a command needs only when it runs (Fabric/paramiko, numpy,
matplotlib, TensorFlow, the ELF reader): a login node answers at once, and a missing extra only
matters to the command that needs it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = (
    "fabric",
    "paramiko",
    "invoke",
    "numpy",
    "matplotlib",
    "tensorflow",
    "elftools",
    "kit.mpi.elf",
    "kit.mpi.discover",
    "kit.mpi.ldcache",
)

PROBE = """
import json, sys
from kit.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)))
"""


@pytest.mark.parametrize(
    "argv",
    [
        ["--version"],
        ["--help"],
        ["scale", "--help"],
        ["transfer", "--help"],
        ["mpi", "pair", "--help"],
        ["slurm", "render", "--help"],
    ],
)
def test_help_and_version_import_nothing_heavy(argv):
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    modules = json.loads(done.stdout.splitlines()[-1])
    assert "kit.commands.transfer" in modules or argv[0] != "--help"  # the whole tree was built
    heavy = [m for m in modules if m.startswith(HEAVY) and (m in HEAVY or m.split(".")[0] in HEAVY)]
    assert heavy == [], (
        f"kit {' '.join(argv)} imported {sorted({m.split('.')[0] for m in heavy})}: {heavy[:5]}"
    )
