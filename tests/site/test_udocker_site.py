"""container.runtime: udocker in a site config: its settings with their defaults, and each bad value
an error naming the file, the line and the key."""

import json
import shutil
import sys
from pathlib import Path

import pytest
import yaml

from kit.cli import main
from kit.site import SiteError, load_site
from kit.site.model import Udocker
from tests.support.parts import require

REPO = Path(__file__).resolve().parents[2]
LAPTOP = yaml.safe_load((REPO / "site-configs" / "laptop.yaml").read_text())


def _site(tmp_path: Path, runtime: str = "udocker", **section) -> Path:
    doc = json.loads(json.dumps(LAPTOP))
    doc["name"] = "laptop-udocker"
    doc["container"]["runtime"] = runtime
    if section:
        doc["container"]["udocker"] = section
    path = tmp_path / "laptop-udocker.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _line(path: Path, needle: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if needle in line)


def test_a_udocker_site_without_its_section_takes_the_defaults(tmp_path):
    site = load_site(_site(tmp_path))
    assert site.container.runtime == "udocker" and site.container.udocker is None
    assert site.container.udocker_settings == Udocker(
        "P1", "udocker", "/usr/bin/proot", None, "~/.udocker", False
    )


def test_every_setting_is_read(tmp_path):
    site = load_site(
        _site(
            tmp_path,
            mode="P2",
            executable="/opt/ud/bin/udocker",
            proot=None,
            tarball="/scratch/udocker-englib-1.2.11.tar.gz",
            dir="/local/udocker",
            allow_root=True,
        )
    )
    assert site.container.udocker_settings == Udocker(
        "P2",
        "/opt/ud/bin/udocker",
        None,
        "/scratch/udocker-englib-1.2.11.tar.gz",
        "/local/udocker",
        True,
    )


@pytest.mark.parametrize(
    "section, key, says",
    [
        ({"mode": "F3"}, "container.udocker.mode", "'F3' is not allowed (allowed: P1, P2)"),
        ({"proot": "bin/proot"}, "container.udocker.proot", "must be an absolute path"),
        (
            {"proot": None},
            "container.udocker.proot",
            "is null (udocker's own proot), but no tarball gives it; fix: ",
        ),
        ({"dir": "udocker"}, "container.udocker.dir", "must be an absolute path"),
        ({"executable": "ud ocker"}, "container.udocker.executable", "or a command name on PATH"),
        ({"allow_root": "yes"}, "container.udocker.allow_root", "expected true or false"),
        ({"modes": "P1"}, "container.udocker.modes", "unknown key; did you mean 'mode'?"),
    ],
)
def test_a_bad_setting_names_its_key_and_line(tmp_path, section, key, says):
    path = _site(tmp_path, **section)
    with pytest.raises(SiteError) as err:
        load_site(path)
    text = str(err.value)
    assert "\n" not in text and f"{path}:" in text and f": {key}: " in text and says in text, text


def test_udocker_settings_for_another_runtime_are_refused(tmp_path):
    path = _site(tmp_path, "charliecloud", mode="P1")
    with pytest.raises(
        SiteError,
        match="container.udocker: udocker settings for runtime charliecloud; fix: "
        "remove them or set runtime: udocker",
    ):
        load_site(path)


def test_an_unknown_runtime_lists_the_registered_ones(tmp_path):
    with pytest.raises(
        SiteError,
        match=r"container.runtime: 'podman' is not allowed .*\(allowed: "
        r"charliecloud, udocker, apptainer, singularity\)",
    ):
        load_site(_site(tmp_path, "podman"))


def test_show_names_udocker_settings_and_only_for_udocker(tmp_path, capsys):
    assert main(["site", "show", str(_site(tmp_path, mode="P2")), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)["container"]
    assert shown["runtime"] == "udocker" and shown["udocker"]["mode"] == "P2"
    assert shown["udocker"]["proot"] == "/usr/bin/proot"
    assert main(["site", "show", "laptop", "--json"]) == 0
    assert "udocker" not in json.loads(capsys.readouterr().out)["container"]


def test_probe_names_the_proot_in_use_and_its_limits():
    from kit.site.probe import proot_note

    proot = shutil.which("proot")
    require(proot is not None, "proot (apt-get install proot)")
    note = proot_note()
    assert all(line.startswith("# ") for line in note.splitlines())
    text = " ".join(line[2:] for line in note.splitlines())
    assert f"proot: {proot} (version " in text and "version unknown" not in text
    assert (
        "without udocker's -k" in text
        and "20-28 times" in text
        and "statx is not translated" in text
    )


def test_probe_drafts_a_udocker_site_where_only_udocker_is_installed(tmp_path, monkeypatch):
    from kit.site.probe import probe_host, probe_yaml

    proot = shutil.which("proot")
    udocker = shutil.which("udocker") or shutil.which(
        "udocker", path=str(Path(sys.executable).parent)
    )
    require(
        proot is not None and udocker is not None,
        "udocker and proot (pip install '.[udocker]', apt-get install proot)",
    )
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "udocker").symlink_to(udocker)
    (bin_dir / "proot").symlink_to(proot)
    require(shutil.which("mpiexec") is not None, "an MPI's mpiexec (apt-get install mpich)")
    (bin_dir / "mpiexec").symlink_to(
        shutil.which("mpiexec")
    )  # the probe describes the host MPI too
    monkeypatch.setenv("PATH", str(bin_dir))
    container = probe_host("x")["container"]
    assert container["runtime"] == "udocker" and container["udocker"] == {
        "proot": str(bin_dir / "proot")
    }
    assert "\nname: x\n" in probe_yaml("x")  # validated against the schema on the way
    (bin_dir / "proot").unlink()
    proot_free = probe_host("x")["container"]["udocker"]
    assert proot_free["proot"] is None and proot_free["tarball"].endswith(".tar.gz")
