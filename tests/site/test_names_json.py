"""Site names users mistype get a did-you-mean; `kit site show --json` is the library's own
answer.
"""

from __future__ import annotations

import json
import string
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from kit.cli import main
from kit.errors import KitError
from kit.site import SiteError, load_site
from kit.site.load import available_sites

REPO = Path(__file__).resolve().parents[2]
LAPTOP = (REPO / "site-configs" / "laptop.yaml").read_text()


def one_line_error(capsys, argv: list[str]) -> str:
    assert main(argv) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith("kit: error: "), (out, err)
    return err


@pytest.mark.parametrize(
    "typed, meant",
    [
        ("supermuc", "supermuc-ng"),
        ("stampede", "stampede2"),
        ("laptp", "laptop"),
        ("intel_lab", "intel-lab"),
    ],
)
def test_a_mistyped_site_name_gets_a_did_you_mean(capsys, typed, meant):
    err = one_line_error(capsys, ["site", "show", typed])
    assert f"unknown site {typed!r}; did you mean {meant!r}?" in err
    assert "known sites: " in err and "laptop" in err and "supermuc-ng" in err


def test_a_name_like_none_names_the_known_sites_and_no_guess(capsys):
    err = one_line_error(capsys, ["site", "show", "atlantis"])
    assert "unknown site 'atlantis'" in err and "did you mean" not in err and "known sites: " in err


def test_every_command_taking_a_site_suggests(capsys):
    err = one_line_error(
        capsys,
        ["scale", "plan", "--site", "supermuc", "--nodes", "1", "--dry-run", "--image", "x.sqfs"],
    )
    assert "did you mean 'supermuc-ng'?" in err


def test_a_hostile_file_name_in_the_search_path_keeps_the_error_one_line(
    tmp_path, monkeypatch, capsys
):
    """A stem that is no valid site name can never be loaded by name: it is neither listed nor
    suggested.
    """
    (tmp_path / "supermuc-nx\n\x1b[2Jkit: error: forged.yaml").write_text(LAPTOP)
    (tmp_path / "Supermuc.yaml").write_text(LAPTOP)
    monkeypatch.setenv("KIT_SITE_PATH", str(tmp_path))
    assert "Supermuc" not in available_sites() and not any("\n" in n for n in available_sites())
    err = one_line_error(capsys, ["site", "show", "supermuc"])
    assert "forged" not in err and "\x1b" not in err and "did you mean 'supermuc-ng'?" in err


def test_a_user_site_is_suggested_too(tmp_path, monkeypatch):
    (tmp_path / "mycluster.yaml").write_text(LAPTOP.replace("name: laptop", "name: mycluster"))
    monkeypatch.setenv("KIT_SITE_PATH", str(tmp_path))
    with pytest.raises(SiteError, match=r"did you mean 'mycluster'\?"):
        load_site("mycluster2")


def test_the_known_sites_list_is_bounded(tmp_path, monkeypatch):
    for i in range(500):
        (tmp_path / f"site{i:03d}.yaml").write_text("")
    monkeypatch.setenv("KIT_SITE_PATH", str(tmp_path))
    with pytest.raises(SiteError) as caught:
        load_site("nosuchsite")
    assert len(str(caught.value)) < 1000 and "more)" in str(caught.value)


NAMES = st.text(alphabet=string.ascii_lowercase + string.digits + "-._/\n\x00 ~", max_size=30)


@settings(deadline=None)
@example(name="~\x00")  # found in CI: a NUL reached os.stat (ValueError)
@given(name=NAMES)
@example(name="supermuc")
@example(name="")
@example(name="\x00")
@example(name="-")
@example(name="~0")  # Path.expanduser raised RuntimeError (exit 70) for an unknown user
def test_any_name_loads_or_fails_in_one_line(name):
    try:
        site = load_site(name)
    except KitError as exc:
        assert "\n" not in str(exc) and str(exc)
    else:
        assert site.name == Path(name).stem or site.path is not None


def test_show_json_is_the_librarys_answer(capsys):
    assert main(["site", "show", "supermuc-ng", "--json"]) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)
    site = load_site("supermuc-ng")
    n = site.node
    assert doc["schema"] == "kit-site-show/1" and doc["name"] == "supermuc-ng" and err == ""
    assert doc["config_file"] == str(site.path)
    assert doc["node"]["cores"] == n.cores == 48 and doc["node"]["usable_memory_gb"] == 77
    assert doc["node"]["hardware_threads"] == 96
    peak = doc["peak_flops"]
    assert peak["per_node"] == {p: n.theoretical_peak_flops(p) for p in ("fp32", "bf16", "fp64")}
    assert (
        peak["per_node"]["bf16"] is None and "bf16_flop_per_cycle_per_core" in peak["basis"]["bf16"]
    )
    assert peak["per_node_max_clock"]["fp64"] == pytest.approx(4.15e12, rel=1e-3)
    assert (
        peak["per_island"]["fp32"]
        == site.peak_per_island("fp32")
        == pytest.approx(5.60e15, rel=1e-3)
    )
    assert peak["at_max_nodes"]["fp32"] == site.scheduler.max_nodes * n.theoretical_peak_flops()
    assert doc["scheduler"]["max_nodes"] == site.scheduler.max_nodes
    assert (
        doc["host_mpi"]["vendor"] == "intel"
        and doc["host_mpi"]["library_dirs"] == site.host_mpi.lib_dirs
    )
    assert doc["transfer"]["port"] == site.transfer.port and doc["network"]["island_nodes"] == 792


def test_show_json_without_islands_or_max_clock_has_nulls(capsys):
    assert main(["site", "show", "laptop", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    site = load_site("laptop")
    assert doc["peak_flops"]["per_island"] == (
        None if site.network.island_nodes is None else doc["peak_flops"]["per_island"]
    )
    assert (doc["peak_flops"]["per_node_max_clock"] is None) == (site.node.clock_ghz_max is None)
    # a VM: no clock, so no theoretical peak at all, and each says why
    assert doc["peak_flops"]["per_node"] == {"fp32": None, "bf16": None, "fp64": None}
    assert doc["peak_flops"]["at_max_nodes"] == {"fp32": None, "bf16": None, "fp64": None}
    assert all(b.startswith("unknown clock") for b in doc["peak_flops"]["basis"].values())


def test_show_json_error_is_one_json_line_and_nothing_on_stdout(capsys):
    assert main(["site", "show", "supermuc", "--json"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert "did you mean 'supermuc-ng'?" in json.loads(err)["error"]["message"]


@settings(
    deadline=None, max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture]
)  # capsys is read out each time
@given(name=NAMES)
@example(name="supermuc-ng")
@example(name="~0")
@example(name="-.-fuf9nddu1\n/b0")  # after `--` a leading dash is a name, not an option
def test_show_json_is_a_document_or_one_line_error(capsys, name):
    code = main(["site", "show", "--json", "--", name])
    out, err = capsys.readouterr()
    assert code in (0, 1), err
    if code == 0:
        assert json.loads(out)["schema"] == "kit-site-show/1" and err == ""
    else:
        assert out == "" and err.count("\n") == 1 and json.loads(err)["error"]["exit"] == 1, err
