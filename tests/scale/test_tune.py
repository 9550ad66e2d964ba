"""`kit scale tune`: real short trainings per layout on the laptop (mpiexec) and through a real one-node
Slurm, the recommendation, and its way into a plan (`kit scale plan --layout best`).

Nothing is mocked: each layout is a real Horovod training of the tiny preset. No figure is asserted
beyond being positive and consistent (speed is bench/'s business): the recommendation must be the
row with the most showers/s, whatever the machine made of them today.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from kit.cli import main
from kit.errors import KitError
from kit.scale import tune
from kit.scale.plan import load_plan
from kit.site import load_site
from kit.slurm.script import RunFiles
from tests.support.parts import require
from tests.support.sites import slurm_site_dict, write_site
from tests.support.training import horovod_with_mpi
from tests.support.tune import check_tune

WAIT = 420  # seconds for the Slurm tune's two jobs (TensorFlow start-up included, two shared cores)


@pytest.fixture(scope="module")
def showers(tmp_path_factory) -> list[Path]:
    from gan3d.simulate import write_files

    return write_files(tmp_path_factory.mktemp("showers"), 3, 64, seed=5)


def _train_args(files: list[Path]) -> list[str]:
    return [
        "--data",
        f"{files[0]},{files[1]}",
        "--validation-data",
        str(files[2]),
        "--preset",
        "tiny",
        "--batch-size",
        "4",
        "--seed",
        "3",
    ]


def test_candidates_split_the_nodes_cores_and_refuse_what_it_cannot_hold():
    sng = load_site("supermuc-ng")
    pairs = [(c.ranks_per_node, c.threads_per_rank) for c in tune.candidate_layouts(sng)]
    assert pairs == [
        (1, 48),
        (2, 24),
        (3, 16),
        (4, 12),
        (6, 8),
        (8, 6),
        (12, 4),
        (16, 3),
        (24, 2),
        (48, 1),
    ]
    both = tune.candidate_layouts(load_site("laptop"), precisions=("fp32", "bf16"))
    assert [c.run_id for c in both] == ["r1-t2-fp32", "r2-t1-fp32", "r1-t2-bf16", "r2-t1-bf16"]
    with pytest.raises(KitError, match="layout 3x48: .* 96; fix"):
        tune.candidate_layouts(sng, tune.parse_layouts("4x12,3x48"))
    with pytest.raises(KitError, match="'4by12' is not RANKSxTHREADS"):
        tune.parse_layouts("1x48,4by12")
    with pytest.raises(KitError, match="--precision fp64"):
        tune.candidate_layouts(sng, precisions=("fp64",))
    with pytest.raises(KitError, match="--epochs --threads=2: kit scale tune sets"):
        tune.check_train_args(("--preset", "tiny", "--epochs", "3", "--threads=2"))


def test_a_tune_file_of_another_site_or_a_damaged_one_is_one_line(tmp_path, capsys):
    path = tmp_path / tune.TUNE_NAME
    path.write_text(
        yaml.safe_dump(
            {
                "kit_tune": 1,
                "site_name": "laptop",
                "best": {"ranks_per_node": 4, "threads_per_rank": 12},
            }
        )
    )
    assert tune.load_best(path, load_site("laptop")) == (4, 12)
    with pytest.raises(
        KitError, match="site_name is 'laptop', but the plan is for site supermuc-ng"
    ):
        tune.load_best(path, load_site("supermuc-ng"))
    path.write_text(
        yaml.safe_dump({"kit_tune": 1, "site_name": "laptop", "best": {"ranks_per_node": "4"}})
    )
    with pytest.raises(
        KitError,
        match=r"invalid layout tune file \(2 problem\(s\)\): \S*tune.yaml:\d+: best.ranks_per_node: "
        r"expected an integer, got str '4'; \S*tune.yaml:\d+: best.threads_per_rank: missing required key",
    ):
        tune.load_best(path, load_site("laptop"))
    assert (
        main(
            [
                "scale",
                "plan",
                "--site",
                "supermuc-ng",
                "--nodes",
                "1",
                "--no-container",
                "--layout",
                "best",
                "--dir",
                str(tmp_path / "none"),
            ]
        )
        == 1
    )
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no tune file here" in err and "Traceback" not in err
    mine = (
        tmp_path / "mine"
    )  # a user's tune.yaml is never overwritten: refused before anything runs
    mine.mkdir()
    (mine / "tune.yaml").write_text("my notes\n")
    assert main(["scale", "tune", "--site", "laptop", "--dir", str(mine), "--dry-run"]) == 1
    assert (
        "tune.yaml: not a tune file kit scale tune wrote; fix: give kit scale tune a new --dir"
        in capsys.readouterr().err
    )
    assert (mine / "tune.yaml").read_text() == "my notes\n"


@pytest.mark.parametrize(
    "flag, value",
    [("--steps", "1"), ("--timeout", "inf"), ("--peak-seconds", "nan"), ("--nodes", "0")],
)
def test_bounds_of_a_tune_are_usage_errors(flag, value, tmp_path, capsys):
    """One timed step is none (the first traces the graph); an endless timeout could hang."""
    with pytest.raises(SystemExit) as exit_:
        main(
            ["scale", "tune", "--site", "laptop", "--dir", str(tmp_path), "--dry-run", flag, value]
        )
    assert (
        exit_.value.code == 2
        and f"argument {flag}: '{value}': give a number " in capsys.readouterr().err
    )
    assert not any(tmp_path.iterdir())


def test_a_peak_measurement_gan3d_train_would_refuse_is_a_usage_error(tmp_path, capsys):
    """--peak-seconds 1e300 passed the dry run and every layout's training then stopped on
    --measure-peak (at most 600 s): refused before anything runs."""
    with pytest.raises(SystemExit) as exit_:
        main(
            [
                "scale",
                "tune",
                "--site",
                "laptop",
                "--dir",
                str(tmp_path),
                "--dry-run",
                "--peak-seconds",
                "1e300",
            ]
        )
    assert exit_.value.code == 2
    assert (
        "argument --peak-seconds: '1e300': give a number from 0.05 to 600"
        in capsys.readouterr().err
    )


def test_a_second_tune_into_the_same_directory_is_refused_before_running(tmp_path):
    """Its figures would mix with the earlier tune's (the laptop tutorial's test runs a real tune)."""
    site = load_site("laptop")
    layouts = tune.candidate_layouts(site)
    earlier = RunFiles(tmp_path.absolute(), layouts[-1].run_id).result
    earlier.parent.mkdir(parents=True)
    earlier.write_text("{}")
    before = sorted(tmp_path.rglob("*"))
    with pytest.raises(KitError, match="an earlier tune's result is there"):
        tune.run_local(
            site, layouts, tmp_path, train_args=(), steps=3, peak_seconds=0.5, timeout=60
        )
    assert sorted(tmp_path.rglob("*")) == before and earlier.read_text() == "{}"


@pytest.mark.slow
def test_slurm_tune_submits_each_layout_and_the_plan_takes_the_best(
    slurm, showers, tmp_path, capsys
):
    require(horovod_with_mpi(), "horovod built with MPI (scripts/setup.sh)")
    site = write_site(tmp_path, slurm_site_dict())
    out = tmp_path / "sweep"
    assert (
        main(
            [
                "scale",
                "tune",
                "--site",
                str(site),
                "--no-container",
                "--python",
                sys.executable,
                "--walltime",
                "00:10:00",
                "--layouts",
                "1x2,2x1",
                "--steps",
                "3",
                "--peak-seconds",
                "0.5",
                "--poll",
                "2",
                "--timeout",
                str(WAIT),
                "--dir",
                str(out),
                "--",
                *_train_args(showers),
            ]
        )
        == 0
    )
    doc = check_tune(out, "localslurm", [(1, 2), (2, 1)])
    jobs = yaml.safe_load((out / "fp32" / "jobs.yaml").read_text())
    assert set(jobs) >= {"r1-t2-fp32", "r2-t1-fp32"}  # each layout was a Slurm job
    capsys.readouterr()

    assert (
        main(
            [
                "scale",
                "plan",
                "--site",
                str(site),
                "--nodes",
                "1",
                "--no-container",
                "--python",
                sys.executable,
                "--layout",
                "best",
                "--dir",
                str(out),
                "--",
                *_train_args(showers),
            ]
        )
        == 0
    )
    assert "layout from " in capsys.readouterr().out
    [run] = load_plan(out).runs
    assert (run.ranks_per_node, run.threads_per_rank) == (
        doc["best"]["ranks_per_node"],
        doc["best"]["threads_per_rank"],
    )


@given(st.lists(st.tuples(st.integers(1, 10**4), st.integers(1, 10**4)), min_size=1, max_size=8))
def test_layouts_written_as_text_read_back_as_written(pairs):
    assert tune.parse_layouts(",".join(f"{r}x{t}" for r, t in pairs)) == pairs


@given(st.text(max_size=40))
def test_any_layouts_text_is_pairs_or_one_clean_error(text):
    try:
        pairs = tune.parse_layouts(text)
    except KitError as exc:
        assert "\n" not in str(exc) and "fix:" in str(exc)
    else:
        assert pairs and all(r >= 0 and t >= 0 for r, t in pairs)


def test_how_a_tune_runs_follows_the_site_and_a_request_that_does_not_fit_is_one_line(
    tmp_path, capsys
):
    """Slurm sites tune through jobs and must be told ch-run or bare; a local site tunes one
    node.
    """
    sng, laptop = load_site("supermuc-ng"), load_site("laptop")
    assert (
        tune.through_slurm(sng, 2, True) is True and tune.through_slurm(laptop, 1, False) is False
    )
    with pytest.raises(KitError, match="--image IMAGE .* or --no-container"):
        tune.through_slurm(sng, 1, False)
    with pytest.raises(KitError, match="--nodes 2: site laptop has no scheduler.*fix: --nodes 1"):
        tune.through_slurm(laptop, 2, False)
    assert (
        main(
            [
                "scale",
                "tune",
                "--site",
                "laptop",
                "--nodes",
                "2",
                "--dir",
                str(tmp_path / "t"),
                "--dry-run",
            ]
        )
        == 1
    )
    assert "fix: --nodes 1" in capsys.readouterr().err and not (tmp_path / "t").exists()


def test_a_layout_log_swapped_for_a_link_is_refused_and_its_target_kept(tmp_path):
    """The log is opened to append, never through a link: a planted link once truncated its
    target.
    """
    from kit.errors import KitError
    from kit.scale.tune import _run_bounded

    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    log = tmp_path / "r1-t2-fp32.out"
    log.symlink_to(target)
    with pytest.raises(KitError, match="cannot open the run's log"):
        _run_bounded(["true"], log, 10)
    assert target.read_text() == "keep me"
    log.unlink()
    assert _run_bounded(["sh", "-c", "echo one"], log, 10) == 0
    assert _run_bounded(["sh", "-c", "echo two"], log, 10) == 0
    assert log.read_text() == "one\ntwo\n"  # appended, an earlier run's lines kept


def _record(**extra) -> dict:
    return {"status": "ok", "showers_per_second": 2.0, "peak_rss_bytes_per_rank": [2**30], **extra}


def test_a_layouts_forms_are_read_from_its_results_and_edited_ones_refused(tmp_path):
    results = tmp_path / "r.json"
    forms = {"d_conv1": "fft", "g_conv4": "direct", "d_conv2": "packed"}
    results.write_text(json.dumps(_record(layer_forms={"forms": forms, "source": "cache"})))
    m = tune.read_measured(tune.Layout(1, 2), results)
    assert (m.problem, m.forms, m.forms_source) == ("", forms, "cache")
    assert tune.forms_line(m) == "direct g_conv4; fft d_conv1; packed d_conv2 (cache)"
    results.write_text(json.dumps(_record()))  # a kit's results before forms were recorded
    m = tune.read_measured(tune.Layout(1, 2), results)
    assert m.problem == "" and m.forms is None and tune.forms_line(m) == "not recorded"
    for bad in (
        {"forms": {"d_conv1": "fft\n"}, "source": "cache"},
        {"forms": {"d_conv1": "fft"}, "source": "\x1b[2J"},
        {"forms": dict.fromkeys((f"l{i}" for i in range(100)), "fft"), "source": "probe"},
        ["fft"],
    ):
        results.write_text(json.dumps(_record(layer_forms=bad)))
        m = tune.read_measured(tune.Layout(1, 2), results)
        assert f"{results}: layer_forms" in m.problem and m.showers_per_second is None, bad
        assert "\n" not in m.problem and "\x1b" not in m.problem


@pytest.mark.parametrize("planted", ["link", "file", "png"])
def test_a_tune_file_planted_while_the_layouts_trained_is_kept(tmp_path, planted):
    """check_outputs runs before the trainings and again as tune.yaml and tune.png are written: a link
    (or someone's file) put there in between is refused in one line and left as it was."""
    from kit.errors import KitError

    out = tmp_path / "tune"
    tune.check_outputs(out)  # what kit scale tune checks before its first training
    out.mkdir()
    target = tmp_path / "precious.yaml"
    target.write_text("keep me\n")
    if planted == "link":
        (out / tune.TUNE_NAME).symlink_to(target)
    elif planted == "file":
        (out / tune.TUNE_NAME).write_text("mine: 1\n")
    else:
        (out / tune.PLOT_NAME).write_bytes(b"mine")
    results = tmp_path / "r.json"
    results.write_text(
        json.dumps({"status": "ok", "showers_per_second": 2.0, "peak_rss_bytes_per_rank": [2**30]})
    )
    measured = [tune.read_measured(tune.Layout(2, 1), results)]
    before = {p.name: (p.is_symlink(), p.read_bytes()) for p in out.iterdir()}
    with pytest.raises(KitError) as caught:
        tune.write_tune(load_site("laptop"), 1, measured, out_dir=out)
    assert "\n" not in str(caught.value) and "fix: give kit scale tune a new --dir" in str(
        caught.value
    )
    assert {p.name: (p.is_symlink(), p.read_bytes()) for p in out.iterdir()} == before
    assert target.read_text() == "keep me\n"


@pytest.mark.parametrize("sub", ["logs", "results"])
def test_a_link_at_the_tunes_logs_or_results_is_refused_before_any_training(
    tmp_path, monkeypatch, sub
):
    """The layouts' logs and results go in DIR/logs and DIR/results, made by the kit: a link there (left
    from an earlier tune, or planted) is refused in one line, nothing run, nothing written through it."""
    from kit.errors import KitError

    out, elsewhere = tmp_path / "tune", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    (out / sub).symlink_to(elsewhere)
    ran = []
    monkeypatch.setattr(tune, "_run_bounded", lambda cmd, log, timeout: ran.append(cmd) or 0)
    monkeypatch.setattr(tune, "local_launcher", lambda site: ["mpiexec"])
    with pytest.raises(
        KitError, match=f"tune/{sub}: is a symlink, not the tune's {sub}/"
    ) as caught:
        tune.run_local(
            load_site("laptop"),
            [tune.Layout(1, 1)],
            out,
            train_args=(),
            steps=1,
            peak_seconds=1.0,
            timeout=10,
        )
    assert "\n" not in str(caught.value) and ran == [] and list(elsewhere.iterdir()) == []
