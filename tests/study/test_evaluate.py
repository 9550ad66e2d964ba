"""A config becomes `gan3d train` arguments (the study spec's) and a layout; the objective is read
back from a results JSON, and anything else there is a failed evaluation named in one line (never a
number made up)."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gan3d.train import _check_args, build_parser
from kit.site import load_site
from kit.study.evaluate import (
    EvaluationFailed,
    eval_run,
    local_commands,
    read_objective,
    validation_data,
)
from kit.study.spec import load_study
from tests.support.studies import study_yaml

PARSER = build_parser()  # gan3d train's own: the words are read back as the job will read them


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    d = tmp_path_factory.mktemp("spec")
    return load_study(
        study_yaml(
            d,
            [d / "a.h5", d / "b.h5", d / "c.h5"],
            "random",
            10,
            {
                "lr": {"type": "float", "low": 1e-6, "high": 1.0, "log": True},
                "batch-size": {"type": "int", "low": 1, "high": 512},
                "optimizer": {"type": "choice", "values": ["adam", "rmsprop"]},
                "flip-prob": {
                    "type": "float",
                    "low": 0.0,
                    "high": 0.45,
                },  # gan3d train takes [0, 0.5)
                "deterministic": {"type": "choice", "values": [True, False]},
                "ranks-per-node": {"type": "choice", "values": [1, 2]},
                "threads": {"type": "choice", "values": [1, 2]},
            },
        )
    )


@given(seed=st.integers(0, 2**32))
def test_a_config_reaches_gan3ds_parser_as_itself_and_the_layout_as_the_layout(spec, seed):
    config = spec.space.sample(random.Random(seed))
    run = eval_run("e0001", config, spec, site=load_site("laptop"))
    args = PARSER.parse_args(list(run.train_args))
    _check_args(args)  # gan3d train's own checks take every config the study can plan
    assert args.lr == config["lr"] and args.batch_size == config["batch-size"]
    assert args.optimizer == config["optimizer"] and args.flip_prob == config["flip-prob"]
    assert (
        args.deterministic is config["deterministic"] and args.preset == "tiny" and args.epochs == 1
    )
    assert (run.ranks_per_node, run.threads) == (config["ranks-per-node"], config["threads"])
    # the layout is the runner's to pass (and the batch script's, which refuses a second --threads)
    assert not {"--threads", "--oversubscribe", "--ranks-per-node"} & set(run.train_args)
    assert not run.validate


def test_the_layout_defaults_to_one_rank_on_every_core(tmp_path):
    bare = load_study(
        study_yaml(
            tmp_path,
            [tmp_path / "a.h5"] * 3,
            "random",
            2,
            {"lr": {"type": "float", "low": 0.001, "high": 0.01}},
            objective="physics_score",
        )
    )
    run = eval_run("e0002", {"lr": 0.002}, bare, site=load_site("laptop"))
    assert (run.ranks_per_node, run.threads) == (1, 2) and run.validate
    assert validation_data(run.train_args) == str(tmp_path / "a.h5")
    assert validation_data(("--data", "a.h5", "--validation-data=b.h5")) == "b.h5"


def test_the_physics_score_validates_the_evaluations_own_checkpoint_and_showers(tmp_path):
    """Generated showers (--synthetic) are kept in the evaluation's directory to validate
    against.
    """
    laptop = load_site("laptop")
    spec = study_yaml(
        tmp_path,
        [tmp_path / "a.h5"] * 3,
        "random",
        2,
        {"lr": {"type": "float", "low": 0.001, "high": 0.01}},
        objective="physics_score",
        synthetic=64,
    )
    spec.write_text(
        "\n".join(line for line in spec.read_text().splitlines() if "data:" not in line) + "\n"
    )
    run = eval_run("e0007", {"lr": 0.002}, load_study(spec), site=laptop)
    study = tmp_path / "study"
    train, validate = local_commands(run, study, laptop, launcher=["mpiexec"], python="py")
    e = (study / "evals" / "e0007").absolute()
    args = PARSER.parse_args(train[train.index("train") + 1 :])
    assert args.ranks == int(train[train.index("-n") + 1])  # what the launcher starts
    assert args.synthetic == 64 and args.synthetic_dir == str(e / "synthetic")
    assert args.checkpoint_dir == str(e / "checkpoints") and args.results == str(
        e / "results" / "e0007.json"
    )
    assert validate[:4] == ["py", "-m", "gan3d", "validate"]
    v = dict(zip(validate[4::2], validate[5::2]))
    assert v == {
        "--checkpoint": str(e / "checkpoints"),
        "--data": str(e / "synthetic"),
        "--out": str(e / "validation"),
        "--results": args.results,
    }


def _results(tmp_path, record):
    path = tmp_path / "r.json"
    path.write_text(json.dumps(record) if not isinstance(record, str) else record)
    return path


def test_each_objective_is_read_from_its_place_in_the_results(tmp_path):
    record = {
        "status": "ok",
        "showers_per_second": 4.5,
        "physics": {"score": 0.25},
        "losses": [{"validation": {"g_loss": 9.0}}, {"validation": {"g_loss": 7.0, "d_loss": 3.0}}],
    }
    path = _results(tmp_path, record)
    assert read_objective(path, "showers_per_second") == 4.5
    assert read_objective(path, "physics_score") == 0.25
    assert read_objective(path, "validation.g_loss") == 7.0  # the last epoch's
    assert read_objective(path, "validation.d_loss") == 3.0


@pytest.mark.parametrize(
    "record, message",
    [
        (
            {"status": "failed", "error": "losses became NaN at epoch 1"},
            "the run failed: losses became NaN",
        ),
        (
            {"status": "ok", "physics": {"score": None, "score_null_reason": "too few showers"}},
            "no physics score (too few",
        ),
        (
            {"status": "ok", "showers_per_second": "fast"},
            "showers_per_second: expected a number, got str 'fast'",
        ),
        ({"status": "ok", "showers_per_second": True}, "expected a number, got bool True"),
        ({"status": "ok", "losses": "x"}, "losses: expected a list of mappings"),
        ('{"status": "ok", "showers_', "not valid JSON"),
        ("[1]", "not the object a gan3d results file is"),
    ],
)
def test_a_results_file_without_the_objective_is_a_failed_evaluation_in_one_line(
    tmp_path, record, message
):
    objective = (
        "physics_score"
        if "physics" in str(record)
        else "validation.g_loss"
        if "losses" in str(record)
        else "showers_per_second"
    )
    with pytest.raises(EvaluationFailed) as err:
        read_objective(_results(tmp_path, record), objective)
    assert message in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(EvaluationFailed, match="no results file"):
        read_objective(tmp_path / "none.json", objective)


def test_a_physics_score_gan3d_could_not_scale_names_the_reason_validate_wrote(tmp_path):
    reason = "held-out data scores 4 against data, not well below the 5 of empty showers"
    record = {"status": "ok", "physics": {"score": None, "score_null_reason": reason}}
    with pytest.raises(EvaluationFailed) as err:
        read_objective(_results(tmp_path, record), "physics_score")
    assert str(err.value) == f"{tmp_path / 'r.json'}: no physics score ({reason})"


def test_every_bad_key_an_objective_reads_is_named_in_one_line(tmp_path):
    path = _results(
        tmp_path, {"status": "done", "showers_per_second": 1e300, "physics": {"score": 0.5}}
    )
    with pytest.raises(EvaluationFailed) as err:
        read_objective(path, "showers_per_second")
    line = str(err.value)
    assert line.startswith(f"{path}: invalid gan3d results file (2 problem(s)): ")
    assert f"{path}: status: 'done' is not allowed" in line
    assert f"{path}: showers_per_second: must be at most 1e+15, got 1e+300" in line
    assert line.endswith("; fix: the evaluation is recorded as failed") and "\n" not in line


def test_a_validation_loss_is_the_last_epochs_and_checked_in_every_epoch(tmp_path):
    losses = [{"epoch": 1, "validation": {}}, {"epoch": 2, "validation": {"gen_aux": 0.5}}]
    path = _results(tmp_path, {"status": "ok", "losses": losses})
    assert read_objective(path, "validation.gen_aux") == 0.5
    with pytest.raises(EvaluationFailed, match=r"losses\[-1\]\.validation holds no g_loss; fix"):
        read_objective(path, "validation.g_loss")
    losses[0]["validation"] = {"gen_aux": "x"}
    with pytest.raises(EvaluationFailed, match=r"losses\[0\]\.validation\.gen_aux: expected a"):
        read_objective(_results(tmp_path, {"status": "ok", "losses": losses}), "validation.gen_aux")
