"""The study file: the shipped example loads and its configs become arguments gan3d train's own
parser accepts with the same values; every refusal is one line naming file:line, the field and
the fix."""
from __future__ import annotations

import random
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gan3d.train import build_parser
from kit.data import shipped
from kit.errors import KitError
from kit.study.spec import LAYOUT, load_study

EXAMPLE = shipped("studies", "tiny-mbo.yaml")

GOOD = """\
kit_study: 1
seed: 3
parameters:
  lr: {type: float, low: 1.0e-4, high: 1.0e-2, log: true}
  optimizer: {type: choice, values: [rmsprop, adam]}
  warmup-epochs: {type: float, low: 0, high: 2, when: {optimizer: [adam]}}
fixed:
  preset: tiny
  synthetic: 64
objective:
  metric: validation.g_loss
budget:
  evaluations: 5
strategy: random
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "study.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def test_the_shipped_example_loads():
    spec = load_study(EXAMPLE)
    assert spec.strategy.kind == "mbo" and spec.objective.metric == "physics_score"
    assert spec.fixed["preset"] == "tiny" and spec.budget.evaluations >= 1
    assert {"lr", "optimizer", "ranks-per-node", "threads"} <= set(spec.space.names)


@given(st.integers(0, 2**32 - 1))
def test_every_config_of_the_example_is_a_command_line_gan3d_accepts_with_its_values(seed):
    spec = load_study(EXAMPLE)
    config = spec.space.sample(random.Random(seed))
    args = build_parser().parse_args(spec.train_args(config))
    for name, value in config.items():
        if name == LAYOUT:
            continue
        if name.startswith("loss-weight-"):
            index = ("loss-weight-bce", "loss-weight-ep", "loss-weight-ecal").index(name)
            assert float(args.loss_weights.split(",")[index]) == value
            continue
        assert getattr(args, name.replace("-", "_")) == value, name
    for name, value in spec.fixed.items():
        assert getattr(args, name.replace("-", "_")) == value, name
    assert spec.layout(config) == (config[LAYOUT], config["threads"])


def test_defaults_and_conditions_of_a_small_file(tmp_path):
    spec = load_study(write(tmp_path, GOOD))
    assert (spec.objective.metric, spec.objective.direction) == ("validation.g_loss", "minimize")
    assert spec.objective.loss(2.0) == 2.0 and spec.seed == 3 and spec.budget.evaluations == 5
    assert spec.space.by_name["warmup-epochs"].when == {"optimizer": ("adam",)}
    assert spec.train_args({"lr": 0.001, "optimizer": "rmsprop"}) == [
        "--preset", "tiny", "--synthetic", "64", "--lr", "0.001", "--optimizer", "rmsprop"]


def _swap(old: str, new: str) -> str:
    assert old in GOOD, old
    return GOOD.replace(old, new)


# (the file's text, the line the error must name, words the message must hold)
REFUSALS = [
    (_swap("kit_study: 1", "kit_study: 2"), 1, "kit_study: is 2"),
    (_swap("  lr:", "  learning-rate:"), 4, "'learning-rate' is not an option of gan3d train"),
    (_swap("  lr:", "  lrr:"), 4, "did you mean 'lr'"),
    (_swap("rmsprop, adam", "rmsprop, sgd"), 5, "'sgd' is not one of gan3d's rmsprop, adam"),
    (_swap("low: 1.0e-4", "low: 1.0e-1"), 4, "low 0.1 must be below high 0.01"),
    (_swap("log: true}", "log: yes please}"), 4, "parameters.lr.log: is 'yes please'"),
    (_swap("type: float, low: 1.0e-4", "type: int, low: 1.0e-4"), 4, "parameters.lr.low"),
    (_swap("{optimizer: [adam]}", "{optimizer: [sgd]}"), 6, "'sgd' is not one of optimizer's values"),
    (_swap("{optimizer: [adam]}", "{precision: [fp32]}"), 6, "'precision' is not a choice parameter listed above"),
    (_swap("  synthetic: 64", "  data: /x\n  synthetic: 64"), 7, "exactly one of data and synthetic"),
    (_swap("  preset: tiny", "  preset: huge"), 8, "fixed.preset: 'huge' is not one of gan3d's full, tiny"),
    (_swap("  preset: tiny", "  results: r.json"), 8, "fixed.results: 'results' is set by the study runner"),
    (_swap("  preset: tiny", "  lr: 0.1"), 8, "fixed.lr: lr is also a parameter"),
    (_swap("  preset: tiny", "  batch-size: 0"), 8, "fixed.batch-size: 0 is below 1"),
    (_swap("  preset: tiny", "  batch-size: '16'"), 8, "expected a number"),
    (_swap("  preset: tiny", "  deterministic: 1"), 8, "on/off flag"),
    (_swap("metric: validation.g_loss", "metric: accuracy"), 11, "objective.metric: is 'accuracy'"),
    (_swap("metric: validation.g_loss", "metric: physics_score\n  direction: up"), 12,
     "objective.direction: is 'up'"),
    (_swap("evaluations: 5", "evaluations: 0"), 13, "budget.evaluations: is 0"),
    (_swap("evaluations: 5", "wall_time: 2 hours"), 13, "budget.wall_time: is '2 hours'"),
    (_swap("strategy: random", "strategy: bayes"), 14, "strategy: is 'bayes', expected one of grid, random, mbo"),
    (_swap("strategy: random", "strategy: {type: grid, points: 1}"), 14, "strategy.points: is 1"),
    (_swap("strategy: random", "strategy: {type: random, trees: 5}"), 14, "trees is not a setting of the random"),
    (_swap("budget:\n  evaluations: 5\n", ""), 1, "key budget is missing"),
    (_swap("seed: 3", "seed: -1"), 2, "seed: is -1"),
    (_swap("seed: 3", "sead: 3"), 2, "did you mean 'seed'"),
    (GOOD + "parameters: {}\n", 15, "parameters: the key appears twice"),
    ("kit_study: 1\nparameters: [\n", 3, "not valid YAML"),
]


@pytest.mark.parametrize("text, line, words", REFUSALS, ids=[r[2][:40] for r in REFUSALS])
def test_a_bad_study_file_is_one_line_naming_file_line_field_and_fix(tmp_path, text, line, words):
    path = write(tmp_path, text)
    with pytest.raises(KitError) as err:
        load_study(path)
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"{path}:{line}: "), message
    assert words in message and "fix" in message, message


def test_a_study_file_past_the_size_bound_is_refused_before_parsing(tmp_path):
    path = write(tmp_path, GOOD + "#" * 2**20 + "\n")
    with pytest.raises(KitError, match=r"study.yaml: larger than 1 MiB"):
        load_study(path)


def test_a_missing_study_file_is_one_line(tmp_path):
    with pytest.raises(KitError, match=re.escape(f"{tmp_path / 'none.yaml'}: no such study file")):
        load_study(tmp_path / "none.yaml")


def test_loss_weight_parts_join_into_gan3ds_loss_weights(tmp_path):
    text = _swap("  optimizer:", "  loss-weight-ep: {type: float, low: 0.1, high: 1.0}\n  optimizer:")
    text = text.replace("  preset: tiny", "  preset: tiny\n  loss-weights: '4,0.2,0.3'")
    spec = load_study(write(tmp_path, text))
    args = build_parser().parse_args(spec.train_args({"lr": 0.001, "loss-weight-ep": 0.5, "optimizer": "rmsprop"}))
    assert args.loss_weights == "4,0.5,0.3"


def test_reading_a_study_without_numpy_names_the_study_extra_in_one_line():
    """A core install (no numpy: gan3d's parser module needs it) is told which extra to install."""
    code = ("import sys; sys.modules['numpy'] = None\n"
            "from kit.study.spec import load_study\nfrom kit.errors import KitError\n"
            f"try:\n    load_study({str(EXAMPLE)!r})\nexcept KitError as e:\n    print(e)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.count("\n") == 1 and "pip install 'secure-site-kit[study]'" in done.stdout, done.stdout
