"""One registry spells every launcher (kit.mpi.launch.LAUNCHERS): the batch script's words and
kit mpi check's words come from the same entry. Nothing is launched here: these are the words;
the launches themselves are proved in test_pair_check.py, test_openmpi_check.py and
tests/vcluster/test_openmpi.py. Also: how a check shows what a rank mapped."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from kit.errors import KitError
from kit.mpi import launch
from kit.mpi.check import _no_report, launcher_command
from kit.site.load import load_site
from tests.support.hostmpi import impi_site_dict


def _site(
    tmp: Path, launcher: str, vendor: str = "intel", root: bool = False, plugin: str | None = None
):
    prefix = tmp / "prefix"
    (prefix / "bin").mkdir(parents=True, exist_ok=True)
    for name in ("mpiexec", "mpirun", "mpiexec.hydra"):
        (prefix / "bin" / name).write_text("")
    data = impi_site_dict(prefix)
    data["host_mpi"].update(vendor=vendor, launcher=launcher, env={})
    if vendor == "openmpi":
        data["host_mpi"]["openmpi"] = {"allow_run_as_root": root}
    data["scheduler"] = {
        "type": "local",
        "max_nodes": 2,
        "max_walltime": "00:10:00",
        "mpi_plugin": plugin,
    }
    path = tmp / "site.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_site(path)


def test_a_launcher_added_to_the_registry_is_used_by_check_and_by_batch_scripts(
    tmp_path, monkeypatch
):
    """Adding a launcher is one registry entry: kit mpi check had a chain of its own, which sent
    any other name to PATH ("not found on PATH")."""

    def script(site, words, hwthreads, exports):
        return ["mylaunch", "--batch"]

    def now(site, words, ranks, nodes):
        return ["/opt/mylaunch", "--ranks", str(ranks), "--nodes", str(nodes)]

    monkeypatch.setitem(launch.LAUNCHERS, "mylaunch", launch.Launcher(script, now, srun=True))
    site = _site(tmp_path, "mylaunch --x")
    pair = SimpleNamespace(site=site)
    words, join = launcher_command(pair, 2, 2)
    assert words == ["/opt/mylaunch", "--ranks", "2", "--nodes", "2"]
    assert join[0] == "--join"  # srun-like: ch-run joins by the step's variables, no --join-ct
    assert launch.launcher_words(site) == (["mylaunch", "--batch"], True)


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(["srun", "mpiexec", "mpirun", "mpiexec.hydra", "env"]),
    vendor=st.sampled_from(["intel", "openmpi"]),
    root=st.booleans(),
    plugin=st.sampled_from([None, "pmix"]),
    nodes=st.sampled_from([1, 2]),
    per_node=st.integers(1, 4),
)
def test_check_words_start_ranks_evenly_under_the_sites_launcher(
    tmp_path_factory, name, vendor, root, plugin, nodes, per_node
):
    tmp = tmp_path_factory.mktemp("site")
    site = _site(tmp, f"{name} -v", vendor, root, plugin)
    ranks = per_node * nodes
    words, srun = launch.launcher_now(site, ranks, nodes)
    assert srun == (name == "srun") == launch.launcher_words(site)[1]
    if srun:
        assert words[:2] == ["srun", "-v"]
        assert (f"--mpi={plugin}" in words) == (plugin is not None)
        assert words[-6:] == [
            "-N",
            str(nodes),
            "-n",
            str(ranks),
            f"--ntasks-per-node={per_node}",
            "--kill-on-bad-exit=1",
        ]
        return
    assert Path(words[0]).is_absolute() and Path(words[0]).name == name
    if name != "env":
        assert words[0] == str(
            Path(site.host_mpi.prefix) / "bin" / name
        )  # the host MPI's, not PATH's
    assert words[-2:] == ["-n", str(ranks)] and "-v" in words
    mpirun = vendor == "openmpi"
    assert ("--allow-run-as-root" in words) == (mpirun and root)
    spread = ["--map-by", f"ppr:{per_node}:node"]
    assert any(words[i : i + 2] == spread for i in range(len(words))) == (mpirun and nodes > 1)


def test_a_host_launcher_missing_from_the_prefix_names_the_field(tmp_path):
    site = _site(tmp_path, "mpiexec")
    (Path(site.host_mpi.prefix) / "bin" / "mpiexec").unlink()
    with pytest.raises(
        KitError, match=r"host_mpi\.launcher 'mpiexec' is not at .*fix: correct host_mpi\.prefix"
    ):
        launch.launcher_now(site, 2, 1)


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["/opt/hostmpi/lib", "/opt/hostmpi/lib/openmpi", "/usr/lib"]),
            st.sampled_from(["libmpi.so.40", "mca_btl_tcp.so", "mca_pml_ob1.so", "libc.so.6"]),
        ),
        max_size=12,
    )
)
def test_a_ranks_libraries_and_component_dirs_split_what_it_mapped(paths):
    """kit mpi check shows Open MPI's components by directory, every other library by name."""
    from kit.mpi.check import RankReport

    mapped = [f"{d}/{n}" for d, n in paths]
    r = RankReport(0, 2, "h", "Open MPI v4.1", mapped, 3)
    assert sorted(r.libraries + [m for m in mapped if "/mca_" in m]) == sorted(mapped)
    assert all("/mca_" not in m for m in r.libraries)
    assert r.component_dirs == sorted({d for d, n in paths if n.startswith("mca_")})


def test_a_failed_srun_step_is_told_by_the_ranks_error_not_by_sruns_clean_up():
    """srun (--kill-on-bad-exit) ends the other rank once one fails and says so last: the verdict
    quotes the failure, and srun's own words only when they are all there is."""
    failed = (
        "[n2:00123] PMIX ERROR: UNREACHABLE in file ptl_tcp.c at line 790\n"
        "srun: error: n2: task 1: Exited with exit code 1\n"
        "srun: launch/slurm: _step_signal: Terminating StepId=5.0\n"
        "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.\n"
    )
    assert _no_report("no rank reported", failed) == (
        "no rank reported: 0 of 2 ranks finished MPI_Init; the launcher says: srun: error: n2: "
        "task 1: Exited with exit code 1"
    )
    only_clean_up = "srun: launch/slurm: _step_signal: Terminating StepId=5.0\n"
    assert _no_report("no rank reported", only_clean_up).endswith(
        "the launcher says: srun: launch/slurm: _step_signal: Terminating StepId=5.0"
    )


@given(st.text(max_size=3000))
@settings(max_examples=200, deadline=None)
def test_a_verdict_without_reports_is_one_bounded_line_whatever_the_launcher_said(output):
    verdict = _no_report("no rank reported", output)
    assert "\n" not in verdict and "\r" not in verdict and len(verdict) < 400, verdict
