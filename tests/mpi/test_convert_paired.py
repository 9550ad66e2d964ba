"""`kit image convert --site`: pair first, convert with the pair's mount points and alias links
inside, write OUT.pair.yaml; proven by running the host's Intel MPI in the read-only result."""

import json
import os
import shutil

import pytest
import yaml

from kit.cli import main
from kit.errors import KitError
from kit.image.convert import convert
from kit.mpi import convert_paired, make_pair, run_check
from tests.support.hostmpi import TARGET
from tests.support.parts import require

pytestmark = pytest.mark.slow
LINK = f"{TARGET}/compat/libmpich.so.12"


@pytest.fixture
def bare_source(mpich_oci, tmp_path):
    """The MPICH image as a flat root directory without the recipe's alias link or mount point:
    everything the pair needs must come from the conversion."""
    base = tmp_path / "base"
    convert(mpich_oci, base, fmt="dir")
    (base / LINK.lstrip("/")).unlink()
    assert not (base / TARGET.lstrip("/") / "lib0").exists()
    return base


def test_squashfs_converted_for_the_site_runs_the_host_mpi(
    impi_site, bare_source, tmp_path, capsys
):
    require(
        shutil.which("ch-run") is not None, "ch-run not installed (Debian package charliecloud)"
    )
    out = tmp_path / "gan3d.sqfs"
    assert main(["image", "convert", str(bare_source), str(out), "--site", str(impi_site)]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert f"links created: {LINK} -> ../lib0/libmpi.so.12" in printed
    assert f"wrote {out}.pair.yaml" in printed

    doc = yaml.safe_load((tmp_path / "gan3d.sqfs.pair.yaml").read_text())
    assert doc["image"] == str(out) and doc["image_ready"] == {"ok": True, "missing": []}
    # the launch line names the image where `kit transfer push --install` will put it
    assert doc["site_image"] == "/tmp/gan3d.current"
    assert doc["launch"].endswith(" /tmp/gan3d.current -- python3 -m gan3d train")
    assert doc["verdict"]["status"] == "accepted with warnings"  # host minor 0 < image minor 2 only
    manifest = json.loads((tmp_path / "gan3d.sqfs.manifest.json").read_text())
    assert f"{TARGET}/lib0" in manifest["mount_points_created"]
    assert manifest["links_created"] == [f"{LINK} -> ../lib0/libmpi.so.12"]

    pair = make_pair(impi_site, out)  # read back from the SquashFS itself
    assert pair.missing == []
    result = run_check(pair)
    assert result.ok, result.problems
    assert {r.mapped[0] for r in result.ranks} == {f"{TARGET}/lib0/libmpi.so.12"}


def test_own_identical_link_is_kept_a_conflicting_path_refused_dry_run_writes_nothing(
    impi_site, mpich_oci, bare_source, tmp_path, capsys
):
    done = convert_paired(mpich_oci, tmp_path / "recipe", impi_site, fmt="dir")
    assert done.report.links == []  # the recipe already made the same link: kept as it was
    assert os.readlink(tmp_path / "recipe" / LINK.lstrip("/")) == "../lib0/libmpi.so.12"
    assert done.pair_file == tmp_path / "recipe.pair.yaml" and done.pair_file.is_file()

    (bare_source / LINK.lstrip("/")).write_text("not a link\n")
    with pytest.raises(
        KitError,
        match=rf"{LINK[1:]} is a file in the image, "
        r"but the site's MPI pair needs a symlink to /opt/hostmpi/lib0/libmpi.so.12",
    ):
        convert_paired(bare_source, tmp_path / "bad.tar.gz", impi_site)
    assert not list(tmp_path.glob("bad*"))

    out = tmp_path / "dry.tar.gz"
    assert (
        main(
            [
                "image",
                "convert",
                str(bare_source.parent / "recipe"),
                str(out),
                "--site",
                str(impi_site),
                "--dry-run",
            ]
        )
        == 0
    )
    assert f"would write {out}.pair.yaml" in capsys.readouterr().out
    assert not list(tmp_path.glob("dry*"))


def test_an_image_that_cannot_pair_is_not_converted(impi_site, openmpi_tar, tmp_path, capsys):
    out = tmp_path / "ompi.tar.gz"
    with pytest.raises(KitError, match="ABI families differ.*; fix: put an MPICH-ABI MPI"):
        convert_paired(openmpi_tar, out, impi_site)
    assert main(["image", "convert", str(openmpi_tar), str(out), "--site", str(impi_site)]) == 1
    assert "ABI families differ" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_srun_launch_under_a_real_slurm_binds_the_pmi_library_too(
    impi_srun_site, mpich_oci, tmp_path
):
    # Slurm starts the ranks (srun --mpi=pmi2, ch-run --join), Intel MPI finds Slurm's PMI-2 through
    # I_MPI_PMI_LIBRARY, which the pair rewrote to the second host library dir's bind
    require(
        shutil.which("ch-run") is not None, "ch-run not installed (Debian package charliecloud)"
    )
    done = convert_paired(mpich_oci, tmp_path / "gan3d.sqfs", impi_srun_site)
    doc = done.pair.document()
    assert doc["mount_points"] == [f"{TARGET}/lib0", f"{TARGET}/lib1"]
    assert doc["env"]["set"]["I_MPI_PMI_LIBRARY"] == f"{TARGET}/lib1/libpmi2.so.0"
    assert doc["launch"].startswith("srun --mpi=pmi2 ch-run --join ")
    result = run_check(make_pair(impi_srun_site, tmp_path / "gan3d.sqfs"))
    assert result.ok, (result.problems, result.output[-2000:])
    assert result.command[:6] == ["srun", "--mpi=pmi2", "-N", "1", "-n", "2"]
    assert {r.mapped[0] for r in result.ranks} == {f"{TARGET}/lib0/libmpi.so.12"}
    assert all(r.library_version.startswith("Intel(R) MPI Library") for r in result.ranks)


@pytest.mark.parametrize("suffix", ["tar.gz", "squashfs"])
def test_mount_points_outside_mpi_named_dirs_are_found_in_tarballs_and_squashfs(
    impi_prefix, mpich_oci, tmp_path, suffix
):
    # a site whose bind target has no "mpi" in its path: the pair must still see the mount points
    # (empty directories) inside a tarball or SquashFS image, which are read in part only
    from tests.support.hostmpi import impi_site_dict

    doc = impi_site_dict(impi_prefix)
    doc["container"]["mpi_target"] = "/opt/host"
    site = tmp_path / "plain-target.yaml"
    site.write_text(yaml.safe_dump(doc, sort_keys=False))
    out = tmp_path / f"img.{suffix}"
    done = convert_paired(mpich_oci, out, site)
    assert done.pair.mount_points == ["/opt/host/lib0"]
    pair = make_pair(site, out)
    assert pair.missing == [], pair.missing
    assert pair.document()["image_ready"]["ok"]
