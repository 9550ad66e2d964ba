"""kit mpi check judges every library a rank maps against what the pair promises, and never hangs:
this machine's Debian MPICH 4.0.2 (hydra, UCX) and Open MPI 4.1.4 as host MPIs bound into real images,
2 real ranks under ch-run; the wrong library is made to load by the rank's own environment (LD_PRELOAD,
an MCA component path) or by a pair that leaves a variable out. Nothing is mocked."""

import dataclasses
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml

from kit.cli import main
from kit.mpi import make_pair, run_check
from tests.support.hostmpi import TARGET

pytestmark = pytest.mark.slow
HOST_HWLOC = f"{TARGET}/lib0/libhwloc.so.15.6.1"  # the host's libhwloc as the pair binds it
IMAGE_HWLOC = "/usr/lib/x86_64-linux-gnu/libhwloc.so.15"  # the image's own (bookworm's libhwloc15)
HOST_UCX_MODULES = f"{TARGET}/lib0/ucx"
IMAGE_UCX_MODULES = "/usr/lib/x86_64-linux-gnu/ucx"
IMAGE_COMPONENTS = "/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3"  # the image's own Open MPI's


def _with_env(pair, **env):
    return dataclasses.replace(pair, env_set={**pair.env_set, **env})


def test_ucx_loads_its_transport_modules_from_the_host(mpich_host_site, mpich_paired):
    """Debian's MPICH uses UCX; UCX looks for its modules beside the libucs it was loaded through (the
    pair's compat link: nothing there), then in its compiled-in dir, inside the image the image's own
    UCX's. The pair names the host's, as bound, and the ranks map them from there."""
    pair = make_pair(mpich_host_site, mpich_paired)
    assert pair.env_set["UCX_MODULE_DIR"] == HOST_UCX_MODULES
    result = run_check(pair)
    assert result.ok, (result.problems, result.output[-2000:])
    for r in result.ranks:
        modules = [lib for lib in r.libs if lib.rsplit("/", 1)[-1].startswith("libuct_")]
        assert modules and all(m.startswith(HOST_UCX_MODULES + "/") for m in modules), r.libs


def test_check_names_a_ucx_module_mapped_from_the_image(mpich_host_site, mpich_paired):
    """The pair without UCX_MODULE_DIR (a pair of an earlier kit version): UCX loads the image's
    modules.
    """
    pair = make_pair(mpich_host_site, mpich_paired)
    old = dataclasses.replace(
        pair, env_set={k: v for k, v in pair.env_set.items() if k != "UCX_MODULE_DIR"}
    )
    result = run_check(old)
    assert len(result.ranks) == 2 and not result.ok, result.output[-2000:]
    for rank in (0, 1):
        assert (
            f"rank {rank}: UCX transport module libuct_cma.so.0.0.0 mapped from {IMAGE_UCX_MODULES}, "
            f"not from the host UCX's module dir {HOST_UCX_MODULES}; fix: "
            f"re-make the pair where the site's MPI is installed (it sets UCX_MODULE_DIR={HOST_UCX_MODULES})"
            in result.problems
        ), result.problems


def test_check_names_an_mpi_dependency_mapped_from_the_image(mpich_host_site, mpich_paired):
    """libhwloc is the host's in the pair (a link to the bound copy); an LD_PRELOAD of the image's copy
    wins, and libmpich runs on it."""
    preloaded = _with_env(make_pair(mpich_host_site, mpich_paired), LD_PRELOAD=IMAGE_HWLOC)
    result = run_check(preloaded)
    assert len(result.ranks) == 2, result.output[-2000:]
    assert all(HOST_HWLOC not in r.libs for r in result.ranks)
    for rank in (0, 1):
        assert (
            f"rank {rank}: "
            "libhwloc.so.15 mapped from /usr/lib/x86_64-linux-gnu/libhwloc.so.15.6.1 (the image's), "
            f"but the pair binds the host's ({HOST_HWLOC}); fix: "
            "let nothing in the image load it ahead of the pair's LD_LIBRARY_PATH (an LD_PRELOAD, "
            "an image binary's RPATH, a dlopen by full path), or remove the image's copy"
            in result.problems
        ), result.problems


def test_check_names_two_copies_of_one_library_in_a_rank(mpich_host_site, mpich_paired):
    """Two files of one SONAME loaded by path: the loader keeps both."""
    both = _with_env(
        make_pair(mpich_host_site, mpich_paired),
        LD_PRELOAD=f"{IMAGE_HWLOC} {TARGET}/lib0/libhwloc.so.15",
    )
    result = run_check(both)
    assert len(result.ranks) == 2, result.output[-2000:]
    for rank in (0, 1):
        assert any(
            p.startswith(
                f"rank {rank}: libhwloc.so.15 is mapped twice ({HOST_HWLOC}, "
                f"/usr/lib/x86_64-linux-gnu/libhwloc.so.15.6.1); it should come once, from {HOST_HWLOC}; "
                "fix: "
            )
            for p in result.problems
        ), result.problems


def test_check_names_open_mpi_components_from_a_foreign_dir(openmpi_site, openmpi_image):
    """An MCA component path pointing at the image's own Open MPI: its components run on the host's
    libmpi.
    """
    elsewhere = _with_env(
        make_pair(openmpi_site, openmpi_image), OMPI_MCA_mca_base_component_path=IMAGE_COMPONENTS
    )
    result = run_check(elsewhere, timeout=120)
    assert len(result.ranks) == 2, result.output[-2000:]
    assert all(r.component_dirs == [IMAGE_COMPONENTS] for r in result.ranks)
    for rank in (0, 1):
        assert any(
            p.startswith(f"rank {rank}: Open MPI components (")
            and f") mapped from {IMAGE_COMPONENTS}, "
            f"not from the host's component dirs ({TARGET}/ompi-components, {TARGET}/pmix-components); fix: "
            in p
            for p in result.problems
        ), result.problems


LAUNCH = """#!/bin/bash
# The site's launcher: MPICH's hydra, with rank 1's command (after ch-run's --) replaced by $RANK1
n=$1 count=$2; shift 2
exec /usr/bin/mpiexec.hydra "$n" "$count" "$0.rank" "$@"
"""
RANK = """#!/bin/bash
if [ "$PMI_RANK" = 1 ]; then
  words=(); while [ "$1" != "--" ]; do words+=("$1"); shift; done
  exec "${words[@]}" -- %s
fi
exec "$@"
"""


def _site_with_launcher(site: Path, tmp_path: Path, rank1: str) -> Path:
    """The MPICH site with a launcher (named by path) that starts rank 1 as ``rank1`` in the
    image.
    """
    launcher = tmp_path / "launch"
    launcher.write_text(LAUNCH)
    Path(f"{launcher}.rank").write_text(RANK % rank1)
    for script in (launcher, Path(f"{launcher}.rank")):
        script.chmod(0o755)
    doc = yaml.safe_load(site.read_text())
    doc["host_mpi"]["launcher"] = str(launcher)
    path = tmp_path / "mpich-wrapped.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _ours(marker: str) -> list[str]:
    """Command lines of the live processes that carry ``marker``."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            words = cmdline.read_bytes().split(b"\0")
            state = (cmdline.parent / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z" and any(marker.encode() in w for w in words):
            found.append(b" ".join(words).decode(errors="replace"))
    return found


def test_a_rank_that_never_reaches_mpi_init_ends_the_check_at_its_timeout(
    mpich_host_site, mpich_paired, tmp_path
):
    """Rank 1 sleeps in the image instead of starting: rank 0 waits in MPI_Init for it forever. At the
    timeout every process of the check goes (hydra, its proxy, both ch-runs, rank 0, and the sleep,
    which bash's job control put in a process group of its own: hydra's cleanup and a signal to the
    launcher's process group leave it running)."""
    sleep = f"{3000 + os.getpid() % 1000}.{uuid.uuid4().int % 10**6}"  # a sleep no one else runs
    site = _site_with_launcher(mpich_host_site, tmp_path, f"bash -c 'set -m; sleep {sleep} & wait'")
    result = run_check(make_pair(site, mpich_paired), timeout=20)
    assert len(result.problems) == 1 and not result.ranks, result.problems
    assert result.problems[0].startswith(
        "the ranks did not finish within 20 s; every process of the check was stopped: "
        "0 of 2 ranks finished MPI_Init (a rank that never reached it, "
        "or a launcher waiting for a peer that never started)"
    ), result.problems
    assert not _ours(sleep) and not _ours(f"kitcheck-{os.getpid()}-"), (
        _ours(sleep),
        _ours(f"kitcheck-{os.getpid()}-"),
    )
    assert not list(
        Path("/dev/shm").glob(f"*kitcheck-{os.getpid()}-*")
    )  # the stopped ch-runs' peer group


def test_a_rank_that_crashes_ends_the_check_with_one_line(
    mpich_host_site, mpich_paired, tmp_path, capsys, monkeypatch
):
    site = _site_with_launcher(mpich_host_site, tmp_path, "sh -c 'kill -SEGV $$'")
    result = run_check(make_pair(site, mpich_paired), timeout=120)
    assert len(result.problems) == 1 and not result.ranks, result.problems
    # hydra's status is the signal's number, or 255 when its wait on the dead ranks fails first
    # (a race inside hydra, seen under load); either way the line carries the launcher's words
    verdict = re.fullmatch(
        r"no rank reported \(launcher exit status (11|255)\): 0 of 2 ranks finished MPI_Init; "
        r"the launcher says: (\S.*)",
        result.problems[0],
    )
    assert verdict, result.problems
    if verdict[1] == "11":  # hydra saw the signal: its words name it
        assert "signal 11" in verdict[2].lower() or "signal: 11" in verdict[2].lower(), verdict[2]
    assert not _ours(f"kitcheck-{os.getpid()}-")
    assert not list(
        Path("/dev/shm").glob(f"*kitcheck-{os.getpid()}-*")
    )  # the crashed ranks' peer group
    monkeypatch.setenv("COLUMNS", "1000")  # the verdict on one line, unfolded
    assert main(["mpi", "check", "--site", str(site), str(mpich_paired)]) == 1
    out = capsys.readouterr().out.splitlines()
    # hydra's status for the same crash is 11 or, when its wait on the dead ranks fails first, 255
    assert len(out) == 1 and re.match(
        r"FAIL: no rank reported \(launcher exit status (11|255)\): 0 of 2", out[0]
    ), out


@pytest.mark.parametrize(
    "launcher, message",
    [
        (
            "srun",
            "site mpich-system: launcher 'srun' not found on PATH; fix: "
            "run the check where Slurm's clients are installed (the site's login node)",
        ),
        (
            "{tmp}/not-a-program",
            "launcher {tmp}/not-a-program: cannot be started (Exec format error); fix: "
            "host_mpi.launcher and host_mpi.prefix in the site config must name an installed, "
            "executable launcher",
        ),
    ],
)
def test_a_launcher_that_cannot_start_is_one_line(
    mpich_host_site, mpich_paired, tmp_path, launcher, message
):
    """The command line, in a process of its own: exit status 1 and one line, no traceback."""
    (tmp_path / "not-a-program").write_text("neither a script nor an ELF file\n")
    (tmp_path / "not-a-program").chmod(0o755)
    bin_dir = tmp_path / "bin"  # ch-run, but no Slurm clients
    bin_dir.mkdir()
    (bin_dir / "ch-run").symlink_to("/usr/bin/ch-run")
    doc = yaml.safe_load(mpich_host_site.read_text())
    doc["host_mpi"]["launcher"] = launcher.format(tmp=tmp_path)
    if launcher == "srun":
        doc["scheduler"] = {
            "type": "slurm",
            "partition": "debug",
            "max_nodes": 1,
            "max_walltime": "00:10:00",
        }
    site = tmp_path / "mpich-system.yaml"
    site.write_text(yaml.safe_dump(doc, sort_keys=False))
    done = subprocess.run(
        [sys.executable, "-m", "kit", "mpi", "check", "--site", str(site), str(mpich_paired)],
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": str(bin_dir)},
    )
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().splitlines() == [f"kit: error: {message.format(tmp=tmp_path)}"], (
        done.stderr
    )
