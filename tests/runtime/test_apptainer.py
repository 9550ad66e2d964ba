"""kit.runtime.apptainer: the launch line under every launcher the kit supports (golden, then
parsed back by a real shell), what the site config refuses, the image environment of an image
file read back with the real unsquashfs, and a directory image run by an ordinary user through
a real Apptainer with the site's userns option. (A real Apptainer runs a SIF as root in
tests/image/test_sif_apptainer.py.)"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml

from kit.errors import KitError
from kit.image import convert, sif
from kit.mpi.launch import Launch
from kit.runtime import runtime_of
from kit.runtime.apptainer import env_words, file_environment
from kit.site import load_site
from tests.support import apptainer
from tests.support.parts import require
from tests.support.paths import REPO
from tests.support.sites import slurm_site_dict, write_site
from tests.support.transfer import busybox_image
from tests.support.udocker import USER

BINDS = [("/usr/lib/x86_64-linux-gnu", "/opt/hostmpi/lib0"), ("/scratch/my data", "/data")]
IMAGE_ENV = {"PATH": "/opt/py/bin:/usr/bin", "LD_LIBRARY_PATH": "/opt/app/lib"}
RANK = (
    "apptainer exec --bind=/usr/lib/x86_64-linux-gnu:/opt/hostmpi/lib0 "
    "'--bind=/scratch/my data:/data' --env=PATH=/opt/py/bin:/usr/bin "
    "--env=LD_LIBRARY_PATH=/opt/hostmpi/compat:/opt/app/lib "
    "--env=UCX_MODULE_DIR=/opt/hostmpi/lib0/ucx '--env=MSG=a b;c /opt/py/bin:/usr/bin' "
    "~/images/gan3d.current python3 -m gan3d train"
)
GOLDEN = {
    "hydra": f"/usr/bin/mpiexec -n ${{NRANKS}} {RANK}",
    "pmi2": f"srun --mpi=pmi2 {RANK}",
    "pmix": f"srun --mpi=pmix {RANK}",
    "openmpi": "/opt/openmpi/4.1.5/bin/mpirun -n ${NRANKS} --map-by "
    "ppr:${RANKS_PER_NODE}:node:PE=${OMP_NUM_THREADS} --bind-to core -x OMP_NUM_THREADS "
    f"-x TF_CPP_MIN_LOG_LEVEL -x KIT_RUN_ID {RANK}",
}


def _doc(launcher: str) -> dict:
    if launcher == "hydra":
        doc = yaml.safe_load((REPO / "site-configs" / "laptop.yaml").read_text())
    elif launcher == "openmpi":
        doc = yaml.safe_load((REPO / "site-configs" / "openmpi-cluster.yaml").read_text())
    else:
        doc = slurm_site_dict()
        doc["scheduler"]["mpi_plugin"] = launcher
    doc["name"] = f"app-{launcher}"
    doc["container"]["runtime"] = "apptainer"
    return doc


def _launch(site, environment: dict[str, str] | None = IMAGE_ENV) -> Launch:
    return Launch(
        site,
        BINDS,
        {"UCX_MODULE_DIR": "/opt/hostmpi/lib0/ucx", "MSG": "a b;c $PATH"},
        {"LD_LIBRARY_PATH": ["/opt/hostmpi/compat"]},
        True,
        environment,
    )


@pytest.mark.parametrize("launcher", sorted(GOLDEN))
def test_the_launch_line_under_each_launcher(launcher, tmp_path):
    """The pair's binds, and every value a rank needs as --env (the image's environment first,
    the pair's directories in front of its LD_LIBRARY_PATH): the host's never reaches it."""
    site = load_site(write_site(tmp_path, _doc(launcher)))
    line = _launch(site).line("~/images/gan3d.current")
    assert line == GOLDEN[launcher]
    words = subprocess.run(
        ["bash", "-c", f"HOME=/h; printf '%s\\n' {line}"], capture_output=True, text=True
    ).stdout.splitlines()
    start = words.index("apptainer")
    assert words[start : start + 4] == [
        "apptainer",
        "exec",
        "--bind=/usr/lib/x86_64-linux-gnu:/opt/hostmpi/lib0",
        "--bind=/scratch/my data:/data",
    ]
    assert "--env=MSG=a b;c /opt/py/bin:/usr/bin" in words and "/h/images/gan3d.current" in words
    assert not {"--cleanenv", "--containall", "--contain", "-e", "-c", "-C"} & set(words)


def test_singularity_options_and_userns(tmp_path):
    """runtime singularity is this runtime, run as `singularity`; the site's options and
    --userns come right after exec; run_args is the same line as argv, ending at the image."""
    doc = _doc("hydra")
    doc["container"]["runtime"] = "singularity"
    doc["container"]["apptainer"] = {"options": ["--sharens"], "userns": True}
    site = load_site(write_site(tmp_path, doc))
    assert runtime_of(site).name == "apptainer"
    argv = _launch(site).run_args("/x/img.sif")
    assert argv[:5] == [
        "singularity",
        "exec",
        "--userns",
        "--sharens",
        "--bind=/usr/lib/x86_64-linux-gnu:/opt/hostmpi/lib0",
    ]
    assert (
        argv[-1] == "/x/img.sif"
        and "--env=LD_LIBRARY_PATH=/opt/hostmpi/compat:/opt/app/lib" in argv
    )


@pytest.mark.parametrize("option", ["--cleanenv", "-C", "--contain", "--containall", "--compat"])
def test_options_that_break_an_mpi_run_are_refused(option, tmp_path):
    doc = _doc("hydra")
    doc["container"]["apptainer"] = {"options": ["--sharens", option]}
    with pytest.raises(KitError) as err:
        load_site(write_site(tmp_path, doc))
    line = str(err.value)
    assert "\n" not in line and "container.apptainer.options" in line and option in line
    assert "one-rank job" in line and "fix: remove it" in line


def test_apptainer_settings_need_runtime_apptainer(tmp_path):
    doc = _doc("hydra")
    doc["container"]["runtime"] = "charliecloud"
    doc["container"]["apptainer"] = {"userns": True}
    with pytest.raises(KitError, match=r"apptainer settings for runtime charliecloud.*fix: "):
        load_site(write_site(tmp_path, doc))


def test_push_installs_a_sif_as_it_is_on_an_apptainer_site_and_nowhere_else(tmp_path):
    """kit transfer push --install: Apptainer takes a .sif as it is whatever --install-as says
    (and tarballs and .sqfs as before); Charliecloud and udocker refuse it in one line naming
    the fix, before any byte is sent."""
    from kit.transfer.push import install_format

    site = load_site(write_site(tmp_path, _doc("hydra")))
    assert [install_format(site, a, "g.sif") for a in ("dir", "squash")] == ["sif", "sif"]
    assert install_format(site, "dir", "g.tar.gz") == "unpack"
    assert install_format(site, "squash", "g.sqfs") == "squash"
    for runtime in ("charliecloud", "udocker"):
        doc = _doc("hydra")
        doc["container"] = {"runtime": runtime, "image_dir": "~/images"}
        other = load_site(write_site(tmp_path, doc))
        with pytest.raises(KitError, match=f"g.sif is a SIF, which its runtime {runtime}") as err:
            install_format(other, "dir", "g.sif")
        assert "\n" not in str(err.value) and "kit image convert SRC OUT.sqfs" in str(err.value)


def test_a_run_inside_apptainer_or_singularity_is_recorded_as_apptainer():
    """gan3d's results name the runtime (a report never merges it with bare or other runs):
    Apptainer exports APPTAINER_CONTAINER and SINGULARITY_CONTAINER, SingularityCE the second."""
    from gan3d.results import container_runtime

    for env in ({"APPTAINER_CONTAINER": "/i.sif"}, {"SINGULARITY_CONTAINER": "/i.sif"}):
        assert container_runtime(env) == "apptainer"
    assert container_runtime({"APPTAINER_NAME": "i.sif"}) is None


@pytest.mark.parametrize("value", ['say "hi"', "a=1,b=2"])
def test_a_value_apptainer_would_split_is_refused(value):
    with pytest.raises(KitError, match=r"the value of K, .* apptainer exec --env would split"):
        env_words({"K": value})
    assert env_words({"K": "a=1;b 2", "L": "x,y"}) == ["--env=K=a=1;b 2", "--env=L=x,y"]


def _squash(tree: Path, out: Path) -> Path:
    subprocess.run(
        ["mksquashfs", str(tree), str(out), "-quiet", "-noappend", "-no-progress"],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return out


def test_the_environment_of_an_image_file_is_read_from_it(tmp_path):
    """SquashFS and SIF images: ch/environment read with the real unsquashfs (at the SIF's
    partition, also through a link not named .sif), and put on the line; an image without one
    gives nothing."""
    if shutil.which("mksquashfs") is None:
        pytest.skip("squashfs-tools not installed (scripts/setup.sh)")
    tree = tmp_path / "tree"
    (tree / "ch").mkdir(parents=True)
    (tree / "ch" / "environment").write_text('PATH=/opt/py/bin:/bin\nPYTHONPATH="/opt/app"\n')
    squash = _squash(tree, tmp_path / "img.sqfs")
    image = tmp_path / "img.sif"
    with open(image, "wb") as out:
        sif.write(
            out,
            squash,
            hashlib.sha256(squash.read_bytes()).hexdigest(),
            definition=b"Bootstrap: scratch\n",
            labels=b"{}",
            arch=sif.arch_code("amd64"),
            mtime=1,
        )
    want = {"PATH": "/opt/py/bin:/bin", "PYTHONPATH": "/opt/app"}
    assert file_environment(str(squash)) == file_environment(str(image)) == want
    (tmp_path / "img.current").symlink_to("img.sif")  # what push --install leaves: by its header
    assert file_environment(str(tmp_path / "img.current")) == want
    site = load_site(write_site(tmp_path, _doc("hydra")))
    words = _launch(site, None).run_args(str(image))
    assert "--env=PYTHONPATH=/opt/app" in words and "--env=MSG=a b;c /opt/py/bin:/bin" in words
    (tree / "ch" / "environment").unlink()
    assert file_environment(str(_squash(tree, tmp_path / "bare.sqfs"))) == {}


def test_an_ordinary_user_runs_the_kits_directory_image_with_the_sites_userns(tmp_path):
    """As `nobody` (setpriv), with Apptainer copied where that user may read it: the rank's words
    of a site with `userns: true` start the kit's directory image in a user namespace of its own
    (its uid_map maps nobody alone), which reads the image's file, the bind and an --env value."""
    require(os.geteuid() == 0 and shutil.which("setpriv") is not None, "root and setpriv")
    apptainer.apptainer()  # skip, naming why, where there is none
    base = Path(tempfile.mkdtemp(prefix="kit-apptainer-", dir="/tmp"))
    try:
        base.chmod(0o755)
        executable = apptainer.copied(base / "apptainer")
        (base / "home").mkdir()
        shutil.chown(base / "home", "nobody")
        (base / "shared").mkdir()
        (base / "shared" / "note").write_text("bound\n")
        image = base / "bb"
        convert(busybox_image(base / "src" / "bb.tar.gz", b"sandbox"), image)
        doc = _doc("hydra")
        doc["container"]["apptainer"] = {"executable": str(executable), "userns": True}
        site = load_site(write_site(tmp_path, doc))
        argv = Launch(site, [(str(base / "shared"), "/mnt/0")], {"MSG": "a b;c"}, {}).run_args(
            str(image)
        )
        assert argv[:3] == [str(executable), "exec", "--userns"]
        script = 'cat /etc/kit-version; echo; cat /mnt/0/note; echo "$MSG"; cat /proc/self/uid_map'
        done = subprocess.run(
            [*USER, "env", f"HOME={base / 'home'}", *argv, "/bin/busybox", "sh", "-c", script],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert lines[:3] == ["sandbox", "bound", "a b;c"], done.stdout + done.stderr
        assert lines[3].split() == ["65534", "65534", "1"], "a user namespace mapping nobody alone"
    finally:
        shutil.rmtree(base, ignore_errors=True)
