"""SIGINT and SIGTERM at chosen moments of the commands that write (besides `kit image convert`,
tests/image/test_interrupt.py): a real subprocess sent a real signal (tests/support/signal_at.py)
just before an audited step (early, the temporary file made, complete but not renamed, the rename).
Then: exit 130 or 143, one line on stderr, the outputs the complete old or the complete new ones
and nothing else left in their directory, the user's files untouched, no process of the run alive,
and the next run succeeds."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest
import yaml

from kit.cli import main
from tests.mpi.hostile import mpich_tree, site_file
from tests.support.interrupts import signalled_env, tagged
from tests.support.studies import study_yaml

ROOT = Path(__file__).parents[1]
LIMIT = 300  # seconds: a bound only a hung run reaches, never a speed assertion
STATUS = {"SIGINT": 130, "SIGTERM": 143}


@dataclass
class Case:
    """A command: `inputs(tmp, showers)` makes what it reads and returns its argv (run as `python -m`,
    writing into tmp/"area"); `old(area, argv)` puts an earlier output there (or nothing);
    `volatile` blanks what differs between two runs (a clock); `new_only`: the command refuses an
    output that is there (the next run is only asked of one that left the old state)."""

    inputs: Callable[[Path, list[Path]], list[str]]
    old: Callable[[Path, list[str]], None]
    moments: list[tuple[str, str, int]]  # (audit event, needle in its arguments, Nth)
    volatile: Callable[[str, bytes], bytes] = lambda rel, data: data
    new_only: bool = False


def _nothing(area: Path, argv: list[str]) -> None:
    """No earlier output: the complete old state is none at all."""


def _pair_inputs(tmp: Path, showers: list[Path]) -> list[str]:
    image, site = mpich_tree(tmp / "img"), site_file(tmp)
    return [
        "kit",
        "mpi",
        "pair",
        "--site",
        str(site),
        str(image),
        "--out",
        str(tmp / "area" / "img.pair.yaml"),
    ]


def _pair_old(area: Path, argv: list[str]) -> None:
    assert main(argv[1:] + ["--mode", "major"]) == 0


def _probe_inputs(tmp: Path, showers: list[Path]) -> list[str]:
    return ["kit", "site", "probe", "--out", str(tmp / "area" / "here.yaml")]


def _plan_inputs(tmp: Path, showers: list[Path]) -> list[str]:
    return [
        "kit",
        "scale",
        "plan",
        "--site",
        "supermuc-ng",
        "--no-container",
        "--nodes",
        "4,8",
        "--ranks-per-node",
        "4",
        "--threads",
        "12,24",
        "--dir",
        str(tmp / "area" / "sweep"),
        "--",
        "--epochs",
        "1",
    ]


def _report_inputs(tmp: Path, showers: list[Path]) -> list[str]:
    from tests.scale.builders import write_run

    results = [str(write_run(tmp / f"n{n}.json", n, 100.0 / n**0.9)) for n in (1, 2, 4)]
    return ["kit", "scale", "report", "--results", *results, "--out", str(tmp / "area" / "report")]


def _report_old(area: Path, argv: list[str]) -> None:
    """The report of the first two runs: every file differs from the new one's."""
    assert main(argv[1:4] + argv[5:]) == 0


def _bundle_inputs(tmp: Path, showers: list[Path]) -> list[str]:
    from tests.support.transfer import random_image

    return [
        "kit",
        "transfer",
        "bundle",
        str(random_image(tmp / "one.tar", 3 << 20)),
        "--dir",
        str(tmp / "area" / "b1"),
    ]


def _bundle_clock(rel: str, data: bytes) -> bytes:
    """MANIFEST.json names its creation time; SHA256SUMS holds MANIFEST.json's digest."""
    if rel.endswith("MANIFEST.json"):
        return json.dumps({k: v for k, v in json.loads(data).items() if k != "created"}).encode()
    if rel.endswith("SHA256SUMS"):
        return b"".join(
            line for line in data.splitlines(True) if not line.endswith(b" MANIFEST.json\n")
        )
    return data


def _write_checkpoint(path: Path) -> None:
    code = (
        "import sys, tensorflow as tf\nfrom gan3d.checkpoint import EpochCheckpoints\n"
        "from gan3d.model import generator\ntf.keras.utils.set_random_seed(3)\nmodel = generator('tiny')\n"
        "EpochCheckpoints(sys.argv[1]).save(tf.train.Checkpoint(generator=model), model, 1, "
        "meta={'preset': 'tiny'})\n"
    )
    made = subprocess.run(
        [sys.executable, "-c", code, str(path)],
        env=signalled_env(),
        capture_output=True,
        text=True,
        timeout=LIMIT,
    )
    assert made.returncode == 0, made.stderr


def _validate_inputs(tmp: Path, showers: list[Path]) -> list[str]:
    """A tiny untrained generator's checkpoint (made once beside the module's showers: validate
    only reads it), and a results file of gan3d train's schema."""
    checkpoint = showers[0].parent.with_name(f"{showers[0].parent.name}-checkpoint")
    if not checkpoint.exists():
        part = checkpoint.with_name(f"{checkpoint.name}.part")
        shutil.rmtree(part, ignore_errors=True)
        _write_checkpoint(part)
        part.rename(checkpoint)  # whole or absent: a failed save is made again by the next case
    return [
        "gan3d",
        "validate",
        "--data",
        ",".join(map(str, showers)),
        "--checkpoint",
        str(checkpoint),
        "--events",
        "192",
        "--out",
        str(tmp / "area" / "plots"),
        "--results",
        str(tmp / "area" / "r.json"),
        "--seed",
        "2",
    ]


def _validate_old(area: Path, argv: list[str]) -> None:
    """The results of a training, and an earlier validation of them (another seed: other plots)."""
    (area / "r.json").write_text(json.dumps({"schema": "gan3d-run/1", "ranks": 1}))
    run = subprocess.run(
        [sys.executable, "-m", *argv[:-1], "1"],
        env=signalled_env(),
        capture_output=True,
        text=True,
        timeout=LIMIT,
    )
    assert run.returncode == 0, run.stderr


def _study_inputs(tmp: Path, showers: list[Path]) -> list[str]:
    spec = study_yaml(
        tmp, showers, "random", 3, {"lr": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True}}
    )
    return [
        "kit",
        "study",
        "plan",
        str(spec),
        "--dir",
        str(tmp / "area" / "study"),
        "--site",
        "laptop",
    ]


def _probe_keys(rel: str, data: bytes) -> bytes:
    """The probe measures this host (free memory moves): a complete draft has every section."""
    return json.dumps(sorted(yaml.safe_load(data))).encode() if rel == "here.yaml" else data


def _study_clock(rel: str, data: bytes) -> bytes:
    if not rel.endswith("ledger.jsonl"):
        return data
    head = json.loads(data.splitlines()[0])
    head.pop("created")
    return json.dumps(head).encode()


def _simulate_inputs(tmp: Path, showers: list[Path]) -> list[str]:
    return [
        "gan3d",
        "simulate",
        "--out",
        str(tmp / "area"),
        "--files",
        "2",
        "--events-per-file",
        "200",
        "--seed",
        "2",
        "--compression",
        "none",
    ]


def _simulate_old(area: Path, argv: list[str]) -> None:
    run = subprocess.run(
        [sys.executable, "-m", *argv[:-3], "1", *argv[-2:]],
        env=signalled_env(),
        capture_output=True,
        text=True,
        timeout=LIMIT,
    )
    assert run.returncode == 0, run.stderr


WRITE = [("tempfile.mkstemp", "", 1), ("os.chmod", ".part", 1), ("os.rename", ".part", 1)]
CASES = {
    "mpi-pair": Case(
        _pair_inputs,
        _pair_old,
        [("open", "site.yaml", 1), ("tempfile.mkstemp", "", 1), ("os.remove", ".part", 1)],
    ),  # the old pair, swapped out
    "site-probe": Case(
        _probe_inputs,
        _nothing,
        [
            ("subprocess.Popen", "", 1),
            ("subprocess.Popen", "", 3),
            ("tempfile.mkstemp", "", 1),
            ("os.chmod", ".part", 1),
        ],
        _probe_keys,
        True,
    ),
    "scale-plan": Case(_plan_inputs, _nothing, [("os.mkdir", "sweep", 1), *WRITE]),
    "scale-report": Case(
        _report_inputs,
        _report_old,
        [
            ("tempfile.mkstemp", "report.md", 1),
            ("tempfile.mkstemp", ".png", 2),
            ("os.rename", "report.csv", 1),
        ],
    ),
    "transfer-bundle": Case(
        _bundle_inputs,
        _nothing,
        [("open", "one.tar", 1), ("os.chmod", "verify.sh", 1), ("os.chmod", ".tmp", 3)],
        _bundle_clock,
        True,
    ),
    "gan3d-validate": Case(
        _validate_inputs,
        _validate_old,
        [
            ("tempfile.mkstemp", ".png", 1),
            ("tempfile.mkstemp", "r.json", 1),
            ("os.rename", "physics_cellsum", 1),
        ],
    ),
    "study-plan": Case(
        _study_inputs,
        _nothing,
        [
            ("tempfile.mkstemp", "study.yaml", 1),
            ("os.chmod", "study.yaml", 1),
            ("open", "ledger.jsonl", 1),
        ],
        _study_clock,
        True,
    ),
    "gan3d-simulate": Case(
        _simulate_inputs,
        _simulate_old,
        [("open", ".part", 1), ("os.rename", "EleEscan_1_0", 1), ("os.rename", "EleEscan_1_1", 1)],
    ),
}
# SIGINT and SIGTERM take one path (kit.interrupt): the commands that need a TensorFlow model take
# SIGTERM at every moment and SIGINT at the first only (each case runs the command five times).
TENSORFLOW = {"gan3d-validate"}
PARAMS = [
    (name, sig, i)
    for name, case in CASES.items()
    for i in range(len(case.moments))
    for sig in ("SIGINT", "SIGTERM")
    if not (name in TENSORFLOW and sig == "SIGINT" and i > 0)
]


@pytest.fixture(scope="module")
def showers(tmp_path_factory) -> list[Path]:
    from gan3d.simulate import write_files

    return write_files(tmp_path_factory.mktemp("showers"), 3, 64, seed=5)


def snapshot(area: Path, volatile: Callable[[str, bytes], bytes]) -> dict:
    """Every entry under AREA: kind, and a file's bytes (a link's target)."""
    found = {}
    for path in sorted(area.rglob("*")):
        rel = str(path.relative_to(area))
        if path.is_symlink():
            found[rel] = ("link", os.readlink(path))
        elif path.is_dir():
            found[rel] = ("dir",)
        else:
            found[rel] = ("file", volatile(rel, path.read_bytes()))
    return found


def _fresh(tmp: Path, case: Case, argv: list[str]) -> dict:
    """AREA with the user's file and the case's old output; its snapshot."""
    area = tmp / "area"
    shutil.rmtree(area, ignore_errors=True)
    area.mkdir()
    (area / "mine.txt").write_text("mine\n")
    case.old(area, argv)
    return snapshot(area, case.volatile)


@pytest.mark.parametrize("name,sig,moment", PARAMS, ids=[f"{n}-{s}-{m}" for n, s, m in PARAMS])
def test_a_signal_leaves_old_or_new_and_nothing_else(tmp_path, showers, name, sig, moment):
    case = CASES[name]
    argv = case.inputs(tmp_path, showers)
    area, kept = tmp_path / "area", tmp_path / "old-area"
    old = _fresh(tmp_path, case, argv)
    shutil.copytree(area, kept, symlinks=True)  # the old area again, without making it again
    done = subprocess.run(
        [sys.executable, "-m", *argv],
        env=signalled_env(),
        capture_output=True,
        text=True,
        timeout=LIMIT,
    )
    assert done.returncode == 0, done.stderr
    new = snapshot(area, case.volatile)
    shutil.rmtree(area)
    shutil.copytree(kept, area, symlinks=True)
    assert snapshot(area, case.volatile) == old
    mine = (area / "mine.txt").stat().st_ino

    event, needle, nth = case.moments[moment]
    tag, fired = f"KIT_TEST_RUN_{uuid.uuid4().hex}", tmp_path / "fired"
    run = subprocess.run(
        [sys.executable, "-m", "tests.support.signal_at", *argv],
        capture_output=True,
        text=True,
        timeout=LIMIT,
        env=signalled_env(
            **{
                tag: "1",
                "KIT_TEST_SIGNAL_AT": f"{event}|{needle}|{nth}|{sig}",
                "KIT_TEST_SIGNAL_FIRED": str(fired),
            }
        ),
    )
    assert fired.exists(), (
        f"the moment {event} {needle!r} #{nth} never came (exit {run.returncode}): {run.stderr}"
    )
    assert run.returncode == STATUS[sig], run.stderr
    words = "interrupted" if sig == "SIGINT" else "terminated (SIGTERM)"
    expected = (
        f"kit: {words}; outputs are replaced only when complete"
        if argv[0] == "kit"
        else f"gan3d {argv[1]}: {words}"
    )
    assert run.stderr.splitlines() == [expected], run.stderr
    deadline = time.monotonic() + LIMIT
    while left := tagged(tag):  # a child that outlives the command is an error
        assert time.monotonic() < deadline, f"processes of the run still alive: {left}"
        time.sleep(0.1)

    now = snapshot(area, case.volatile)
    if name == "gan3d-simulate":  # one file after the other: each the whole old or new one
        assert now.keys() == new.keys() and all(now[k] in (old[k], new[k]) for k in now), sorted(
            now
        )
    else:
        assert now in (old, new) or now == {
            **old,
            **{k: v for k, v in new.items() if v == ("dir",)},
        }, f"not the old or the new output: {sorted(now)}"
    assert (area / "mine.txt").stat().st_ino == mine
    if case.new_only and now == new:
        return
    again = subprocess.run(
        [sys.executable, "-m", *argv],
        env=signalled_env(),
        capture_output=True,
        text=True,
        timeout=LIMIT,
    )
    assert again.returncode == 0, again.stderr
    assert snapshot(area, case.volatile) == new
