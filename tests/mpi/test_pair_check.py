"""End to end: Intel MPI (impi-rt) as the host MPI, bound into a real MPICH image under ch-run."""

import dataclasses
import os
import shutil
import subprocess

import pytest
import yaml

from kit.cli import main
from kit.errors import KitError
from kit.image_names import pair_path
from kit.mpi import make_pair, prepare_image_dir, run_check, write_pair
from tests.support.chrun_join import stale_join_group
from tests.support.hostmpi import TARGET
from tests.support.parts import require

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _charliecloud():
    require(
        shutil.which("ch-run") is not None, "ch-run not installed (Debian package charliecloud)"
    )


def test_pair_accepts_debian_mpich_for_intel_host_and_writes_the_pair_file(
    impi_site, impi_prefix, mpich_image, tmp_path, capsys
):
    out = tmp_path / "img.pair.yaml"
    assert main(["mpi", "pair", "--site", str(impi_site), str(mpich_image), "--out", str(out)]) == 0
    doc = yaml.safe_load(out.read_text())
    assert doc["host_mpi"]["vendor"] == "intel" and doc["host_mpi"]["soname"] == "libmpi.so.12"
    assert doc["host_mpi"]["abi_version"] == "12.0.0"  # read from the installed impi-rt files
    assert (
        doc["container_mpi"]["vendor"] == "mpich" and doc["container_mpi"]["abi_family"] == "mpich"
    )
    assert doc["verdict"]["ok"] and doc["verdict"]["status"] == "accepted with warnings"
    assert doc["binds"] == [f"{impi_prefix / 'lib'}:{TARGET}/lib0"]
    assert doc["mount_points"] == [f"{TARGET}/lib0"]
    assert doc["links"] == {f"{TARGET}/compat/libmpich.so.12": f"{TARGET}/lib0/libmpi.so.12"}
    assert doc["env"]["set"]["FI_PROVIDER_PATH"] == f"{TARGET}/lib0"  # host path rewritten
    assert doc["env"]["prepend"]["LD_LIBRARY_PATH"] == [f"{TARGET}/compat", f"{TARGET}/lib0"]
    assert doc["launch"].startswith(
        f"{impi_prefix}/bin/mpiexec -n ${{NRANKS}} ch-run --join-ct=${{RANKS_PER_NODE}}"
    )
    assert (
        "'--set-env=LD_LIBRARY_PATH=/opt/hostmpi/compat:/opt/hostmpi/lib0:$LD_LIBRARY_PATH'"
        in doc["launch"]
    )
    assert doc["site_image"] == str(mpich_image) and f" {mpich_image} -- python3" in doc["launch"]
    assert "warning: host minor 0 is older" in " ".join(capsys.readouterr().out.split())
    dry = tmp_path / "dry.pair.yaml"
    assert (
        main(
            [
                "mpi",
                "pair",
                "--site",
                str(impi_site),
                str(mpich_image),
                "--out",
                str(dry),
                "--dry-run",
            ]
        )
        == 0
    )
    assert not dry.exists() and "kit_pair: 1" in capsys.readouterr().out


def test_check_on_the_squashfs_image(impi_site, mpich_squash):
    pair = make_pair(impi_site, mpich_squash)
    assert pair.document()["image_ready"]["ok"]  # mount point and link found inside the SquashFS
    result = run_check(pair)
    assert result.ok, result.problems
    assert {r.mapped[0] for r in result.ranks} == {f"{TARGET}/lib0/libmpi.so.12"}


def test_check_runs_beside_the_peer_group_a_killed_check_of_the_same_pid_left(
    impi_site, mpich_squash
):
    """A check killed mid-way leaves its ch-run --join group in /dev/shm, and pids repeat (a pid
    namespace's start afresh): a later check with the same pid still runs (its tag is its own)."""
    pair = make_pair(impi_site, mpich_squash)
    with stale_join_group(mpich_squash, f"kitcheck-{os.getpid()}"):
        result = run_check(pair)
    assert result.ok, (result.problems, result.output[-1000:])


def test_strict_mode_refuses_the_newer_image_minor(impi_site, mpich_image):
    with pytest.raises(KitError, match=r"minor versions differ: host 0, image 2 \(strict mode"):
        make_pair(impi_site, mpich_image, mode="strict")
    assert (
        main(
            [
                "mpi",
                "pair",
                "--site",
                str(impi_site),
                str(mpich_image),
                "--mode",
                "strict",
                "--out",
                "/dev/null/never",
            ]
        )
        == 1
    )


def test_check_runs_intel_mpi_from_the_bind_inside_ch_run(impi_site, mpich_image, capsys):
    assert main(["mpi", "check", "--site", str(impi_site), str(mpich_image)]) == 0
    out = capsys.readouterr().out
    assert "Intel(R) MPI Library" in out and "PASS" in out
    result = run_check(make_pair(impi_site, mpich_image))
    assert result.ok, result.problems
    assert [r.rank for r in result.ranks] == [0, 1]
    for r in result.ranks:
        assert r.library_version.startswith("Intel(R) MPI Library") and r.sum == 3 and r.size == 2
        assert r.mapped == [f"{TARGET}/lib0/libmpi.so.12"]


def test_check_fails_when_the_image_mpi_is_what_runs(impi_site, mpich_image):
    """Without the binds the image's own MPICH is loaded: the check must say so."""
    pair = make_pair(impi_site, mpich_image)
    unbound = dataclasses.replace(pair, binds=[], links={}, env_prepend={})
    result = run_check(unbound, timeout=60)
    assert not result.ok
    assert any(
        "not from the host bind" in p or "not the host's" in p or "ranks reported" in p
        for p in result.problems
    )


def test_check_names_the_missing_mount_point(impi_site, mpich_oci, tmp_path):
    from kit.image.convert import convert

    image = tmp_path / "img"
    convert(mpich_oci, image, fmt="dir")  # no --mount-point; drop the recipe's alias link too
    (image / TARGET.lstrip("/") / "compat/libmpich.so.12").unlink()
    pair = make_pair(impi_site, image)
    assert pair.document()["image_ready"] == {
        "ok": False,
        "missing": [
            f"{TARGET}/lib0",
            f"{TARGET}/compat/libmpich.so.12 -> {TARGET}/lib0/libmpi.so.12",
        ],
    }
    assert any("kit image convert SRC OUT --site SITE" in w for w in pair.warnings)
    with pytest.raises(
        KitError,
        match=r"lacks what the pair binds onto: /opt/hostmpi/lib0, "
        r"/opt/hostmpi/compat/libmpich.so.12 -> .*--site SITE",
    ):
        run_check(pair)
    made = prepare_image_dir(pair, image)  # what conversion does for a directory image
    assert made == [f"{TARGET}/lib0", f"{TARGET}/compat/libmpich.so.12"]
    pair = make_pair(impi_site, image)
    assert not pair.missing
    assert run_check(pair).ok
    path = write_pair(pair)
    assert path == pair_path(image) and path.name == "img.pair.yaml"


def test_launch_line_keeps_a_home_relative_site_image_expandable(impi_site, mpich_image):
    pair = make_pair(impi_site, mpich_image)
    pair.site_image = "~/my images/gan3d.current"  # a site's image_dir of "~/my images"
    word = "~/'my images/gan3d.current'"
    assert f" {word} -- python3 -m gan3d train" in pair.launch_line()
    shell = subprocess.run(
        ["bash", "-c", f"printf '%s' {word}"],
        capture_output=True,
        text=True,
        env={"HOME": "/home/someone"},
        check=True,
    )
    assert shell.stdout == "/home/someone/my images/gan3d.current"
