"""Property: `kit slurm render` over mutated site configs and hostile run values either refuses
with exactly one `kit: error:` line, or prints a script in which every value sits on its intended
line: the #SBATCH block parses back to the intended directives and values, every line has one of
the template's shapes, and bash reads it."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import subprocess
import tempfile
import unicodedata
from pathlib import Path

import yaml
from hypothesis import event, example, given
from hypothesis import strategies as st

from kit.cli import main
from tests.site.hostile_yaml import INJECTIONS, hostile_text, mutated_site
from tests.support.sites import slurm_site_dict

BASE = slurm_site_dict("prop")
BASE["scheduler"].update(account="pr1", constraint="skx")
BASE["modules"] = ["charliecloud", "mpi.intel/2019"]
BASE["host_mpi"]["env"] = {"FI_PROVIDER": "psm2", "I_MPI_FABRICS": "shm:ofi"}
REQUIRED = {"job-name", "nodes", "ntasks-per-node", "cpus-per-task", "time", "output", "exclusive"}
OPTIONAL = {"partition", "account", "constraint", "hint"}
SHAPES = [
    re.compile(p)
    for p in (
        r"#!/bin/bash",
        r"# .*",
        r"",
        r"#SBATCH --[a-z-]+(=\S+)?",
        r"set -euo pipefail",
        r"if ! command -v module >/dev/null 2>&1 && \[ -r /etc/profile.d/modules.sh \]; then",
        r"  \. /etc/profile\.d/modules\.sh",
        r"fi",
        r"module load .*",
        r"export [A-Za-z_][A-Za-z0-9_]*=.*",
        r"RANKS_PER_NODE=[0-9]+",
        r"NRANKS=\$\(\( SLURM_JOB_NUM_NODES \* RANKS_PER_NODE \)\)",
        r'echo "kit: run [A-Za-z0-9._-]+ job \$\{SLURM_JOB_ID\} on \$\{SLURM_JOB_NODELIST\}: '
        r'\$\{NRANKS\} ranks"',
    )
]

CLEAN = {
    "run_id": "r1",
    "walltime": "00:10:00",
    "partition": None,
    "account": None,
    "python": "python3",
    "dir": "/tmp/runs",
}
hostile_run_value = st.one_of(
    hostile_text,
    st.builds(
        lambda a, b: a + b,
        st.sampled_from(["r1", "00:10:00", "debug"]),
        st.sampled_from(INJECTIONS + ["\n", "\r", "\u2028"]),
    ),
)


TRAIN = st.sampled_from(
    ["--epochs", "2", "--data", "/d/x.h5,/d/y.h5", "--batch-size=4", "$(id)", "a b", "'"]
)


@st.composite
def runs(draw) -> dict:
    """The clean run with none, one or two of its values made hostile."""
    run = dict(CLEAN)
    for key in draw(st.lists(st.sampled_from(sorted(CLEAN)), max_size=2, unique=True)):
        run[key] = draw(hostile_run_value)
    if not run["dir"].startswith("/"):
        run["dir"] = "/tmp/runs/" + run["dir"]
    return run


def parse_sbatch(script: str) -> dict[str, str]:
    """The directives sbatch reads: #SBATCH lines before the first line that is no comment."""
    found: dict[str, str] = {}
    for line in script.split("\n")[1:]:
        if line.strip() and not line.startswith("#"):
            break
        if line.startswith("#SBATCH"):
            key, _, value = line[len("#SBATCH --") :].partition("=")
            assert key not in found, f"#SBATCH --{key} twice"
            found[key] = value
    return found


def check_script(script: str, site: dict, run: dict, train: list[str]) -> None:
    assert not any(unicodedata.category(c) in ("Cc", "Zl", "Zp") and c != "\n" for c in script)
    lines = script.rstrip("\n").split("\n")
    odd = [line for line in lines[:-1] if not any(p.fullmatch(line) for p in SHAPES)]
    assert odd == [], odd
    directives = parse_sbatch(script)
    assert REQUIRED <= set(directives) <= REQUIRED | OPTIONAL, directives
    # an empty --run-id/--walltime is no value: the CLI's defaults (nN-rR-tT, at most the site's) apply
    assert re.fullmatch(
        f"gan3d-{re.escape(run['run_id'])}" if run["run_id"] else r"gan3d-n1-r1-t[0-9]+",
        directives["job-name"],
    )
    assert directives["time"] == run["walltime"] or not run["walltime"]
    sched = site["scheduler"]
    for key in ("partition", "account"):
        assert directives.get(key) == (run.get(key) or sched.get(key) or None)
    assert directives.get("constraint") == sched.get("constraint")
    assert script.count("#SBATCH") == len(directives)  # none injected further down either
    exports = [shlex.split(line) for line in lines if line.startswith("export ")]
    assert all(len(words) == 2 for words in exports), exports
    env = dict(w[1].split("=", 1) for w in exports)
    for key, value in (site["host_mpi"].get("env") or {}).items():
        assert env[key] == str(value)
    launch = shlex.split(lines[-1])
    assert launch[-len(train) :] == train if train else True
    assert subprocess.run(["bash", "-n"], input=script, text=True, timeout=30).returncode == 0


def render(site: dict, run: dict, train: list[str]) -> tuple[int, str, str]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "prop.yaml"
        path.write_text(yaml.safe_dump(site, sort_keys=False))
        argv = [
            "slurm",
            "render",
            f"--site={path}",
            "--no-container",
            "--dry-run",
            f"--dir={run['dir']}",
            f"--run-id={run['run_id']}",
            f"--walltime={run['walltime']}",
            f"--python={run['python']}",
            *[f"--{k}={run[k]}" for k in ("partition", "account") if run.get(k) is not None],
            "--",
            *train,
        ]
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(argv)
        return rc, out.getvalue(), err.getvalue()


@given(
    site=mutated_site(BASE, least=0, most=2),
    run=runs(),
    train=st.lists(TRAIN | hostile_text, max_size=3),
)
@example(site=BASE, run={**CLEAN, "run_id": "r1\n"}, train=[])
@example(site=BASE, run={**CLEAN, "walltime": "00:10:00\n"}, train=[])
@example(site=BASE, run={**CLEAN, "dir": "/tmp/runs\n"}, train=[])
@example(site={**BASE, "modules": ["a\nb"]}, run=CLEAN, train=["--epochs", "1"])
@example(
    site={**BASE, "host_mpi": {**BASE["host_mpi"], "env": {"A": "$(id)\n#SBATCH --uid=0"}}},
    run=CLEAN,
    train=[],
)
def test_render_refuses_in_one_line_or_keeps_every_value_on_its_line(site, run, train):
    rc, out, err = render(site, run, train)
    event("rendered" if rc == 0 else "refused")
    assert rc in (0, 1), err[-500:]
    assert "Traceback" not in err and "internal error" not in err
    if rc == 1:
        errors = [line for line in err.split("\n") if line.startswith("kit: error: ")]
        assert len(errors) == 1 and err.endswith(errors[0] + "\n"), err[-500:]
        assert len(errors[0]) < 3000
    else:
        check_script(out, site, run, train)
