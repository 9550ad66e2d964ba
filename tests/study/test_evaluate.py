"""A config becomes `gan3d train` arguments and a layout; the objective is read back from a results
JSON, and anything else there is a failed evaluation named in one line (never a number made up)."""
from __future__ import annotations

import argparse
import json
import shlex

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kit.site import load_site
from kit.study.evaluate import EvaluationFailed, eval_run, read_objective, validation_data, words


def _gan3d_parser() -> argparse.ArgumentParser:
    """gan3d train's own parser, to read the words back as the job will (no TensorFlow imported)."""
    import gan3d.train as train

    captured = {}

    def parse(self, args=None, namespace=None):
        captured["parser"] = self
        raise SystemExit(0)
    old = argparse.ArgumentParser.parse_args
    argparse.ArgumentParser.parse_args = parse
    try:
        try:
            train.main(["--preset", "tiny"])
        except SystemExit:
            pass
    finally:
        argparse.ArgumentParser.parse_args = old
    return captured["parser"]


@given(lr=st.floats(1e-6, 1.0), batch=st.integers(1, 512), opt=st.sampled_from(["adam", "rmsprop"]),
       flip=st.floats(0, 0.5), det=st.booleans())
def test_config_words_read_back_by_gan3ds_parser_as_the_config(lr, batch, opt, flip, det):
    config = {"lr": lr, "batch-size": batch, "optimizer": opt, "flip-prob": flip, "deterministic": det}
    run = eval_run("e0001", config, ["--preset", "tiny", "--epochs", "1"], "showers_per_second", load_site("laptop"))
    args = PARSER.parse_args(list(run.train_args) + ["--data", "x"])
    assert args.lr == pytest.approx(lr, rel=1e-9) and args.batch_size == batch and args.optimizer == opt
    assert args.flip_prob == pytest.approx(flip, rel=1e-9, abs=1e-12) and args.deterministic is det
    assert args.preset == "tiny" and args.epochs == 1 and not run.validate


def test_layout_keys_set_ranks_and_threads_not_arguments():
    laptop = load_site("laptop")
    run = eval_run("e0002", {"ranks-per-node": 2, "lr": 0.01}, {"preset": "tiny"}, "physics_score", laptop)
    assert (run.ranks_per_node, run.threads) == (2, 1) and run.validate  # cores shared evenly
    assert run.train_args == ("--preset=tiny", "--lr=0.01")
    run = eval_run("e0003", {"threads": 1}, [], "validation_g_loss", laptop)
    assert (run.ranks_per_node, run.threads) == (1, 1)
    assert validation_data(("--data", "a.h5", "--validation-data=b.h5")) == "b.h5"


def test_a_value_that_looks_like_a_flag_stays_a_value():
    """--name=value: a categorical value '-1' or '--resume' is never read as an option of its own."""
    for value in ("-1,2,3", "--resume"):
        run = eval_run("e0001", {"loss-weights": value}, [], "showers_per_second", load_site("laptop"))
        args = PARSER.parse_args(list(run.train_args) + ["--data", "x"])
        assert args.loss_weights == value and args.resume is False
    assert shlex.split(shlex.join(run.train_args)) == list(run.train_args)


def _results(tmp_path, record):
    path = tmp_path / "r.json"
    path.write_text(json.dumps(record) if not isinstance(record, str) else record)
    return path


def test_each_objective_is_read_from_its_place_in_the_results(tmp_path):
    record = {"status": "ok", "showers_per_second": 4.5, "physics": {"score": 0.25},
              "losses": [{"validation": {"g_loss": 9.0}}, {"validation": {"g_loss": 7.0, "d_loss": 3.0}}]}
    path = _results(tmp_path, record)
    assert read_objective(path, "showers_per_second") == 4.5
    assert read_objective(path, "physics_score") == 0.25
    assert read_objective(path, "validation_g_loss") == 7.0  # the last epoch's
    assert read_objective(path, "validation_d_loss") == 3.0


@pytest.mark.parametrize("record, message", [
    ({"status": "failed", "error": "losses became NaN at epoch 1"}, "the run failed: losses became NaN"),
    ({"status": "ok", "physics": {"score": None, "score_reason": "too few showers"}}, "no physics score (too few"),
    ({"status": "ok", "showers_per_second": "fast"}, "objective showers_per_second is 'fast', not a finite number"),
    ({"status": "ok", "showers_per_second": True}, "is True, not a finite number"),
    ({"status": "ok", "losses": "x"}, "validation_g_loss is None"),
    ('{"status": "ok", "showers_', "not valid JSON"),
    ("[1]", "not a gan3d results file"),
])
def test_a_results_file_without_the_objective_is_a_failed_evaluation_in_one_line(tmp_path, record, message):
    objective = "physics_score" if "physics" in str(record) else \
        "validation_g_loss" if "losses" in str(record) else "showers_per_second"
    with pytest.raises(EvaluationFailed) as err:
        read_objective(_results(tmp_path, record), objective)
    assert message in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(EvaluationFailed, match="no results file"):
        read_objective(tmp_path / "none.json", objective)


PARSER = _gan3d_parser()
