"""Every text the kit did not write is printed safely. A value holding rich markup (`[/]`,
`[bold]`, `[link=...]`), terminal controls (ESC, BEL, CR, NUL, C1), bidi overrides or a megabyte
is planted in each kind of file a command prints from, and the command run in-process: it ends
with exit 0 or 1 (never an internal error), prints no raw control character, prints under 64 KB,
and where it succeeds the value's escaped start is there to read.

Files are real where they are cheap to make (pair files, site configs, study ledgers, image
configs, bundles); what comes from a scheduler, a remote host or MPI ranks (sweep status, remote
listings, the virtual cluster's state, `kit mpi check`'s ranks) is given by replacing the one
function that reads it."""

from __future__ import annotations

import copy
import json
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest import mock

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from kit.cli import main
from kit.excerpt import plain_console, printable, printable_lines, printable_text
from tests.image.builders import oci_layout, tar_bytes
from tests.study.fakes import spec_file
from tests.support.pairs import GOOD
from tests.support.printing import (
    HOSTILE,
    assert_printed_safely,
    planted,
    raw_controls,
    run,
    words,
)
from tests.support.sites import slurm_site_dict, write_site

Plant = Callable[[Path, str, Path], Callable[[], int]]  # (tmp, value, study) -> the command


def pair_file(tmp: Path, value: str, _: Path) -> Callable[[], int]:
    pair: dict[str, Any] = copy.deepcopy(GOOD)
    pair["binds"].append(f"{tmp}:{tmp}")
    pair["verdict"]["warnings"] = [value, {"nested": value[:100]}]
    (tmp / "img.pair.yaml").write_text(yaml.dump(pair, Dumper=yaml.CSafeDumper))
    site = write_site(tmp, slurm_site_dict())
    argv = ["slurm", "render", "--site", str(site), "--image", str(tmp / "img.pair.yaml")]
    return lambda: main([*argv, "--dir", str(tmp / "runs"), "--dry-run"])


def site_config(tmp: Path, value: str, _: Path) -> Callable[[], int]:
    """The schema refuses a control character in a module's name; the description keeps the rest."""
    site = slurm_site_dict()
    site |= {"description": _no_controls(value), "modules": [value[:100]]}
    (tmp / "site.yaml").write_text(yaml.dump(site, Dumper=yaml.CSafeDumper))
    return lambda: main(["site", "show", str(tmp / "site.yaml")])


def study_ledger(tmp: Path, value: str, study: Path) -> Callable[[], int]:
    """The header's objective is free text (the reader refuses a control in it)."""
    copy_ = shutil.copytree(study, tmp / "study")
    header, *records = (copy_ / "ledger.jsonl").read_text().splitlines()
    records.append(json.dumps({"event": "proposed", "eval": "e0001", "config": {"lr": 0.005}}))
    lines = [json.dumps(json.loads(header) | {"objective": value}), *records]
    (copy_ / "ledger.jsonl").write_text("\n".join(lines) + "\n")  # raw: the reader's to refuse
    return lambda: main(["study", "status", str(copy_)])


def _no_controls(value: str) -> str:
    return "".join(c for c in value if c.isprintable() or c == " ")


def image_config(tmp: Path, value: str, _: Path) -> Callable[[], int]:
    image = oci_layout(tmp / "img", [tar_bytes([("etc", "d", None)])], env=(f"V={value}",))
    return lambda: main(["image", "inspect", str(image)])


def bundle(tmp: Path, value: str, _: Path) -> Callable[[], int]:
    (tmp / "b").mkdir()
    (tmp / "b" / "MANIFEST").write_text("")
    name = value.replace("/", "_").replace("\x00", "_").encode()[:200].decode(errors="ignore")
    (tmp / "b" / name).write_text("x")  # a file no manifest lists: named in the report
    return lambda: main(["transfer", "verify", str(tmp / "b")])


def remote_listing(tmp: Path, value: str, _: Path) -> Callable[[], int]:
    from kit.transfer.versions import Installed, Versions

    listing = Versions(value, value, value, [Installed(value, True, value, 1e300)])
    stub = SimpleNamespace(installed_versions=lambda *a, **k: listing)

    def call() -> int:
        with mock.patch("kit.commands.transfer._transfer", return_value=stub):
            return main(["transfer", "versions", "gan3d", "--site", "laptop"])

    return call


def vcluster_state(tmp: Path, value: str, _: Path) -> Callable[[], int]:
    node = {"name": value, "address": value, "slurm_state": value}
    doc = {"dir": str(tmp), "running": True, "name": value, "subnet": value, "bridge": value}
    doc |= {"slurm_conf": value, "problems": [value], "nodes": [node]}

    def call() -> int:
        with mock.patch("kit.commands.vcluster.status", return_value=doc):
            return main(["vcluster", "status", str(tmp)])

    return call


def sweep_status(tmp: Path, value: str, _: Path) -> Callable[[], int]:
    from kit.scale.sweep_jobs import RunStatus

    runs = [
        RunStatus(value, value, value, None, problem=value, physics=value),
        RunStatus(value, None, value, Path(value), physics="failed", physics_problem=value),
    ]

    def call() -> int:
        with mock.patch("kit.scale.sweep_jobs.collect", return_value=runs):
            return main(["scale", "collect", str(tmp)])

    return call


def mpi_ranks(tmp: Path, value: str, _: Path) -> Callable[[], int]:
    rank = SimpleNamespace(
        rank=0,
        size=2,
        host=value,
        library_version=value,
        libraries=[value],
        mapped=[value],
        component_dirs=[],
        libc=[value],
        sum=value,
    )
    result = SimpleNamespace(ranks=[rank], nodes=1, problems=[value], ok=False, output=value)
    pair = SimpleNamespace(
        site=SimpleNamespace(name="laptop"), launch=SimpleNamespace(runtime=SimpleNamespace())
    )
    pair.launch.runtime.command = "ch-run"

    def call() -> int:
        with (
            mock.patch("kit.mpi.make_pair", return_value=pair),
            mock.patch("kit.mpi.run_check", return_value=result),
        ):
            return main(["-v", "mpi", "check", str(tmp), "--site", "laptop"])

    return call


def mpi_pair(tmp: Path, value: str, _: Path) -> Callable[[], int]:
    mpi = SimpleNamespace(describe=lambda: value)
    pair = SimpleNamespace(
        host=mpi,
        container=mpi,
        found=SimpleNamespace(source=value, notes=[value]),
        verdict=SimpleNamespace(reasons=[value]),
        warnings=[value],
        document=lambda: {"verdict": {"ok": True}},  # --dry-run prints it whole, as YAML
    )

    def call() -> int:
        with mock.patch("kit.mpi.make_pair", return_value=pair):
            return main(["mpi", "pair", str(tmp / "img"), "--site", "laptop", "--dry-run"])

    return call


def demo_record(tmp: Path, value: str, _: Path) -> Callable[[], int]:
    from gan3d.demo import print_summary
    from tests.support.records import record

    rec = record("laptop", "fp32", physics={"score": None, "score_null_reason": value})
    rec |= {"site": value, "preset": value, "peak_fp32_theoretical_basis": value}

    def call() -> int:
        print_summary(plain_console(), rec, plots=None, results=tmp / "r.json")
        return 0

    return call


# the command; whether the value shows as it is (a file's name is quoted, its "/" replaced); the
# exit code when the value holds markup but no control character (1: the command reports a problem)
KINDS: dict[str, tuple[Plant, bool, int]] = {
    "pair file": (pair_file, True, 0),
    "site config": (site_config, True, 0),
    "study ledger": (study_ledger, True, 0),
    "image config": (image_config, True, 0),
    "bundle listing": (bundle, False, 1),
    "remote listing": (remote_listing, True, 0),
    "vcluster state": (vcluster_state, True, 1),
    "sweep status": (sweep_status, True, 1),
    "mpi ranks": (mpi_ranks, True, 1),
    "mpi pair": (mpi_pair, True, 0),
    "demo record": (demo_record, True, 0),
}
MARKUP = "[/] [bold]x[/bold] [link=https://x.example/]y[/link] :smile: \u202e end"


@pytest.fixture(scope="module")
def places(tmp_path_factory) -> tuple[Path, Path]:
    """A directory for each example's files, and a planned study to copy."""
    base = tmp_path_factory.mktemp("printing")
    study = base / "planned"
    spec = spec_file(base)
    assert main(["-q", "study", "plan", str(spec), "--dir", str(study), "--site", "laptop"]) == 0
    return base, study


def printed(places: tuple[Path, Path], kind: str, value: str) -> tuple[int, str, str]:
    base, study = places
    with tempfile.TemporaryDirectory(dir=base) as tmp:
        return run(KINDS[kind][0](Path(tmp), value, study))


@given(kind=st.sampled_from(sorted(KINDS)), text=HOSTILE)
def test_a_hostile_value_in_any_file_prints_as_escaped_bounded_text(places, kind, text):
    value = planted(text)
    code, out, err = printed(places, kind, value)
    assert_printed_safely(code, out, err, value, shown=KINDS[kind][1])


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_markup_in_a_value_prints_as_the_text_it_is(places, kind):
    """No file's checks refuse this value: every command prints it, markup as text."""
    value = planted(MARKUP)
    code, out, err = printed(places, kind, value)
    assert code == KINDS[kind][2], (code, err)
    assert_printed_safely(code, out, err, value, shown=KINDS[kind][1])
    if KINDS[kind][1]:
        assert words(printable(value)) in words(out + err), (code, out, err)


@pytest.mark.parametrize("kind", sorted(set(KINDS) - {"pair file"}))  # tests/slurm: its own
def test_a_megabyte_value_prints_bounded(places, kind):
    value = planted("[/] [bold]\x1b[2J\u202e ", long=True)
    code, out, err = printed(places, kind, value)
    assert_printed_safely(code, out, err, value, shown=KINDS[kind][1])


@given(text=st.text(), limit=st.integers(0, 400))
def test_printable_is_bounded_and_escaped_and_keeps_plain_text(text, limit):
    out = printable(text, limit)
    assert len(out) <= limit and not raw_controls(out) and "\n" not in out
    if len(text) <= limit and not raw_controls(text.replace("\n", "\r")):
        assert out == text  # plain text of printable length is left as it is
    assert printable_text(text, limit).plain == out


def test_printable_shows_values_of_any_type_bounded():
    assert printable(10**5000) == "<16610-bit integer>"  # str() of it would raise
    assert printable(Path("/a\x1bb")) == "/a\\x1bb"
    assert len(printable(["x" * 10**6] * 10**3)) <= 200


def test_printable_lines_keeps_a_log_tail_escaped():
    log = "".join(f"line {i}\x1b[2J\r\n" for i in range(1000)) + "the end [/]"
    assert printable_lines(log, 3).splitlines() == [
        "line 998\\x1b[2J",
        "line 999\\x1b[2J",
        "the end [/]",
    ]
