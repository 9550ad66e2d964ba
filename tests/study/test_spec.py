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
from hypothesis import example, given, settings
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
  synthetic: 640
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
    assert {"lr", "optimizer", "ranks-per-node", "flip-prob"} <= set(spec.space.names)


@given(st.integers(0, 2**32 - 1))
def test_every_config_of_the_example_is_a_command_line_gan3d_accepts_with_its_values(seed):
    spec = load_study(EXAMPLE)
    config = spec.space.sample(random.Random(seed))
    words = spec.train_args(config)
    assert not {"--threads", "--oversubscribe", f"--{LAYOUT}"} & set(
        words
    )  # the layout is the runner's
    args = build_parser().parse_args(words)
    for name, value in config.items():
        if name in (LAYOUT, "threads"):
            continue
        if name.startswith("loss-weight-"):
            index = ("loss-weight-bce", "loss-weight-ep", "loss-weight-ecal").index(name)
            assert float(args.loss_weights.split(",")[index]) == value
            continue
        assert getattr(args, name.replace("-", "_")) == value, name
    for name, value in spec.fixed.items():
        assert getattr(args, name.replace("-", "_")) == value, name
    assert spec.layout(config) == (config[LAYOUT], config.get("threads"))  # threads: when 1 rank


def test_defaults_and_conditions_of_a_small_file(tmp_path):
    spec = load_study(write(tmp_path, GOOD))
    assert (spec.objective.metric, spec.objective.direction) == ("validation.g_loss", "minimize")
    assert spec.objective.loss(2.0) == 2.0 and spec.seed == 3 and spec.budget.evaluations == 5
    assert spec.space.by_name["warmup-epochs"].when == {"optimizer": ("adam",)}
    assert spec.train_args({"lr": 0.001, "optimizer": "rmsprop"}) == [
        "--preset",
        "tiny",
        "--synthetic",
        "640",
        "--lr",
        "0.001",
        "--optimizer",
        "rmsprop",
    ]


def _swap(old: str, new: str) -> str:
    assert old in GOOD, old
    return GOOD.replace(old, new)


# (the file's text, the line the error must name, words the message must hold)
REFUSALS = [
    (_swap("kit_study: 1", "kit_study: 2"), 1, "kit_study: 2 is not 1, the study file format"),
    (_swap("  lr:", "  learning-rate:"), 4, "'learning-rate' is not an option of gan3d train"),
    (_swap("  lr:", "  lrr:"), 4, "did you mean 'lr'"),
    (_swap("rmsprop, adam", "rmsprop, sgd"), 5, "'sgd' is not one of gan3d's rmsprop, adam"),
    (_swap("low: 1.0e-4", "low: 1.0e-1"), 4, "low 0.1 must be below high 0.01"),
    (
        _swap("log: true}", "log: yes please}"),
        4,
        "parameters.lr.log: expected true or false, got str 'yes please'",
    ),
    (
        _swap("float, low: 1.0e-4, high: 1.0e-2", "int, low: 1.5, high: 8"),
        4,
        "parameters.lr.low: 1.5 is not a whole number (type: int)",
    ),
    (
        _swap("{optimizer: [adam]}", "{optimizer: [sgd]}"),
        6,
        "'sgd' is not one of optimizer's values",
    ),
    (
        _swap("{optimizer: [adam]}", "{optimizer: []}"),
        6,
        "parameters.warmup-epochs.when.optimizer: lists no value",
    ),
    (
        _swap("{optimizer: [adam]}", "{precision: [fp32]}"),
        6,
        "'precision' is not a choice parameter listed above",
    ),
    (
        _swap("  synthetic: 640", "  data: /x\n  synthetic: 640"),
        7,
        "exactly one of data and synthetic",
    ),
    (
        _swap("  preset: tiny", "  preset: huge"),
        8,
        "fixed.preset: 'huge' is not one of gan3d's full, tiny",
    ),
    (
        _swap("  preset: tiny", "  results: r.json"),
        8,
        "fixed.results: 'results' is set by the study runner",
    ),
    (
        _swap("  preset: tiny", "  oversubscribe: true"),
        8,
        "fixed.oversubscribe: the runner gives gan3d --oversubscribe",
    ),
    (_swap("  preset: tiny", "  lr: 0.1"), 8, "fixed.lr: lr is also a parameter"),
    (
        _swap("  preset: tiny", "  batch-size: 0"),
        8,
        "fixed.batch-size: 0 is refused by gan3d train (--batch-size 0: must be at least 1)",
    ),
    (_swap("  preset: tiny", "  batch-size: '16'"), 8, "expected a number"),
    (_swap("  preset: tiny", "  deterministic: 1"), 8, "on/off flag"),
    (
        _swap("  preset: tiny", "  preset: tiny\n  batch-size: 128"),
        9,
        "fixed.batch-size: "
        "with batch-size 128 and 1 rank(s) per node a step needs 128 showers (ranks x batch size), "
        "but synthetic 640 with test-fraction 0.1 has 64 held out",
    ),
    (
        _swap("  preset: tiny", "  preset: tiny\n  test-fraction: 0.99"),
        10,
        "fixed.synthetic: "
        "with batch-size 16 and 1 rank(s) per node a step needs 16 showers (ranks x batch size), "
        "but synthetic 640 with test-fraction 0.99 has 6 left to train on",
    ),
    (
        _swap("  lr:", "  ranks-per-node: {type: int, low: 1, high: 8}\n  lr:"),
        4,
        "parameters.ranks-per-node: "
        "with batch-size 16 and 8 rank(s) per node a step needs 128 showers (ranks x batch size), "
        "but synthetic 640 with test-fraction 0.1 has 64 held out",
    ),
    (
        _swap("metric: validation.g_loss", "metric: accuracy"),
        11,
        "objective.metric: 'accuracy' is not physics_score, showers_per_second or validation.",
    ),
    (
        _swap("metric: validation.g_loss", "metric: physics_score\n  direction: up"),
        12,
        "objective.direction: 'up' is not allowed (allowed: minimize, maximize)",
    ),
    (
        _swap("evaluations: 5", "evaluations: 0"),
        13,
        "budget.evaluations: must be at least 1, got 0",
    ),
    (
        _swap("evaluations: 5", "wall_time: 2 hours"),
        13,
        "budget.wall_time: '2 hours' is not a duration",
    ),
    (
        _swap("strategy: random", "strategy: bayes"),
        14,
        "strategy.type: 'bayes' is not allowed (allowed: grid, random, mbo)",
    ),
    (
        _swap("strategy: random", "strategy: {type: grid, points: 1}"),
        14,
        "strategy.points: must be at least 2, got 1",
    ),
    (
        _swap("strategy: random", "strategy: {type: random, trees: 5}"),
        14,
        "strategy.trees: not a setting of the random strategy; fix: settings of random: none",
    ),
    (
        _swap("budget:\n  evaluations: 5\n", ""),
        1,
        "budget: the random strategy needs a budget; fix: give budget: {evaluations: N}",
    ),
    (_swap("seed: 3", "seed: -1"), 2, "seed: must be at least 0, got -1"),
    (
        re.sub(r"parameters:\n(  .*\n)+", "parameters: {}\n", GOOD),
        3,
        "parameters: 0 given, expected 1 to 64",
    ),
    (
        _swap("high: 1.0e-2, log: true}", "log: true}"),
        4,
        "parameters.lr.high: type float needs high",
    ),
    (
        _swap("values: [rmsprop, adam]}", "values: [rmsprop, adam], log: true}"),
        5,
        "parameters.optimizer.log: a choice takes values: [..], not low, high or log",
    ),
    (_swap("seed: 3", "sead: 3"), 2, "did you mean 'seed'"),
    (GOOD + "parameters: {}\n", 15, "parameters: duplicate key (first given on line 3)"),
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


# Values gan3d train refuses (gan3d/train.py's checks) that a study file could plan: each evaluation drawing
# one failed at run time. (study edit, line, field, gan3d train's flag and the value it is given)
GAN3D_REFUSES = [
    (
        _swap("  lr:", "  flip-prob: {type: float, low: 0.0, high: 0.9}\n  lr:"),
        4,
        "parameters.flip-prob.high",
        ["--flip-prob", "0.9"],
    ),
    (
        _swap("  lr:", "  flip-prob: {type: choice, values: [0.1, 0.5]}\n  lr:"),
        4,
        "parameters.flip-prob.values[1]",
        ["--flip-prob", "0.5"],
    ),
    (
        _swap("  lr:", "  xscale: {type: float, low: 0, high: 100}\n  lr:"),
        4,
        "parameters.xscale.low",
        ["--xscale", "0"],
    ),
    (
        _swap("high: 2,", "high: 2.0e+6,"),
        6,
        "parameters.warmup-epochs.high",
        ["--warmup-epochs", "2e6"],
    ),
    (
        _swap("  lr:", "  seed: {type: int, low: 0, high: 8589934592}\n  lr:"),
        4,
        "parameters.seed.high",
        ["--seed", "8589934592"],
    ),
    (
        _swap("  lr:", "  test-fraction: {type: choice, values: [0.0, 0.2]}\n  lr:"),
        4,
        "parameters.test-fraction.values[0]",
        ["--test-fraction", "0"],
    ),
    (
        _swap("  preset: tiny", "  preset: tiny\n  measure-peak: 700"),
        9,
        "fixed.measure-peak",
        ["--measure-peak", "700"],
    ),
    (
        _swap("  preset: tiny", "  preset: tiny\n  loss-weights: '8,1e400,0.1'"),
        9,
        "fixed.loss-weights",
        ["--loss-weights", "8,1e400,0.1"],
    ),
]


@pytest.mark.parametrize(
    "text, line, field, argv", GAN3D_REFUSES, ids=[c[2] for c in GAN3D_REFUSES]
)
def test_a_value_gan3d_train_refuses_is_refused_when_the_study_is_read(
    tmp_path, capsys, text, line, field, argv
):
    """One line naming file:line, the field and gan3d's own rule, before any evaluation is planned with the
    value; the real gan3d train CLI refuses the same value."""
    from gan3d.train import main as train

    path = write(tmp_path, text)
    with pytest.raises(KitError) as err:
        load_study(path)
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"{path}:{line}: {field}: "), message
    assert (
        f"is refused by gan3d train ({argv[0]} " in message
        and "; fix: keep every range end" in message
    ), message
    assert (
        train(["--synthetic", "16", *argv]) == 1
    )  # the rule is gan3d train's: it refuses the value itself
    assert capsys.readouterr().err.startswith(f"gan3d train: error: {argv[0]} ")


def test_a_study_file_past_the_size_bound_is_refused_before_parsing(tmp_path):
    path = write(tmp_path, GOOD + "#" * 2**20 + "\n")
    with pytest.raises(KitError, match=r"study.yaml: larger than 1 MiB"):
        load_study(path)


def test_a_missing_study_file_is_one_line(tmp_path):
    with pytest.raises(KitError, match=re.escape(f"{tmp_path / 'none.yaml'}: no such study file")):
        load_study(tmp_path / "none.yaml")


def test_loss_weight_parts_join_into_gan3ds_loss_weights(tmp_path):
    text = _swap(
        "  optimizer:", "  loss-weight-ep: {type: float, low: 0.1, high: 1.0}\n  optimizer:"
    )
    text = text.replace("  preset: tiny", "  preset: tiny\n  loss-weights: '4,0.2,0.3'")
    spec = load_study(write(tmp_path, text))
    args = build_parser().parse_args(
        spec.train_args({"lr": 0.001, "loss-weight-ep": 0.5, "optimizer": "rmsprop"})
    )
    assert args.loss_weights == "4,0.5,0.3"


def test_reading_a_study_without_numpy_names_the_study_extra_in_one_line():
    """A core install (no numpy: gan3d's parser module needs it) is told which extra to install."""
    code = (
        "import sys; sys.modules['numpy'] = None\n"
        "from kit.study.spec import load_study\nfrom kit.errors import KitError\n"
        f"try:\n    load_study({str(EXAMPLE)!r})\nexcept KitError as e:\n    print(e)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.count("\n") == 1 and "pip install 'secure-site-kit[study]'" in done.stdout, (
        done.stdout
    )


@pytest.mark.slow
def test_a_config_of_the_example_trains_for_real_with_its_settings(tmp_path):
    """The shipped example's arguments for one config, run by `python -m gan3d train` (one rank, the
    tiny preset, nothing mocked): the results record the config's settings, and the objective's
    neighbour showers_per_second is there for the runner to read."""
    import json
    import os

    from kit.site import load_site
    from kit.study.evaluate import eval_run

    spec = load_study(EXAMPLE)
    config = next(
        c for c in (spec.space.sample(random.Random(s)) for s in range(100)) if c[LAYOUT] == 1
    )
    threads = eval_run("e0001", config, spec, site=load_site("laptop")).threads  # the runner's
    results = tmp_path / "r.json"
    env = dict(
        os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(Path(__file__).resolve().parents[2])
    )
    for key in [k for k in env if k.startswith(("SLURM_", "OMPI_", "PMI_"))]:
        del env[key]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "gan3d",
            "train",
            *spec.train_args(config),
            *("--epochs", "1", "--steps-per-epoch", "16"),  # the example's 500 steps: minutes
            "--threads",
            str(threads),
            "--results",
            str(results),
            "--synthetic-dir",
            str(tmp_path / "showers"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    record = json.loads(results.read_text())
    assert record["status"] == "ok" and record["showers_per_second"] > 0
    assert record["optimizer"] == config["optimizer"]
    assert record["batch_per_rank"] == config.get("batch-size", spec.fixed["batch-size"])
    assert record["learning_rate"]["per_rank"] == config["lr"]
    assert record["loss_weights"][0] == config["loss-weight-bce"]
    assert record["learning_rate"]["warmup_epochs"] == config.get("warmup-epochs", 0.0)
    assert record["threads_per_rank"] == threads and record["preset"] == "tiny"


_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=True),
    st.sampled_from(
        [
            "",
            "tiny",
            "adam",
            "sgd",
            "2h",
            "x" * 50,
            "physics_score",
            "validation.g_loss",
            "float",
            "int",
            "choice",
            "grid",
            "mbo",
            "random",
            "lr",
            "optimizer",
            "8,0.2",
        ]
    ),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(
            st.sampled_from(
                [
                    "type",
                    "low",
                    "high",
                    "log",
                    "values",
                    "when",
                    "lr",
                    "optimizer",
                    "batch-size",
                    "metric",
                    "direction",
                    "evaluations",
                    "wall_time",
                    "points",
                    "initial",
                    "trees",
                    "lambda",
                    "synthetic",
                    "data",
                    "preset",
                    "flip-prob",
                ]
            ),
            inner,
            max_size=5,
        ),
    ),
    max_leaves=12,
)


@st.composite
def mutated(draw):
    """The small good file (or the shipped example) with a few values replaced, keys dropped or added,
    anywhere in its tree: documents that get past the first checks and reach the deep ones."""
    import yaml

    document = yaml.safe_load(draw(st.sampled_from([GOOD, EXAMPLE.read_text()])))
    for _ in range(draw(st.integers(1, 3))):
        node = document
        while True:
            keys = (
                list(node)
                if isinstance(node, dict)
                else list(range(len(node)))
                if isinstance(node, list)
                else []
            )
            if not keys:
                break
            key = draw(st.sampled_from(keys))
            if not isinstance(node[key], (dict, list)) or draw(st.integers(0, 4)) == 0:
                action = draw(st.sampled_from(["replace", "drop", "add"]))
                if action == "replace":
                    node[key] = draw(_VALUES)
                elif action == "drop" and isinstance(node, dict):
                    del node[key]
                elif isinstance(node, dict):
                    node[
                        draw(st.sampled_from(["low", "when", "values", "type", "x", "lr", "k"]))
                    ] = draw(_VALUES)
                break
            node = node[key]
    return document


@given(mutated())
def test_any_document_loads_or_is_refused_in_one_line_naming_its_file_and_line(
    tmp_path_factory, document
):
    """Whatever the file holds: a StudySpec, or one KitError line FILE:LINE: ..., never a
    traceback.
    """
    import yaml

    path = tmp_path_factory.mktemp("fuzz") / "study.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    _loads_or_one_line(path)


def _loads_or_one_line(path: Path) -> None:
    """A StudySpec whose space can be drawn from, or one KitError line naming the file and the line
    of each problem: FILE:LINE: ..., or FILE: invalid study file (N problem(s)): FILE:LINE: ..."""
    try:
        spec = load_study(path)
    except KitError as exc:
        message, file = str(exc), re.escape(str(path))
        listed = rf"{file}: invalid study file \(\d+\+? problem\(s\)\): {file}:\d+: "
        assert "\n" not in message and re.match(rf"{file}:\d+: |{listed}", message), message
        assert "Traceback" not in message and "; fix: " in message, message
    else:
        spec.space.grid(2) if spec.strategy.kind == "grid" else spec.space.sample(random.Random(0))


_TOP_KEYS = ["kit_study", "parameters", "fixed", "objective", "budget", "strategy", "seed"]


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.sampled_from([*_TOP_KEYS, "sead"]), _VALUES, max_size=8))
def test_any_yaml_tree_under_the_study_keys_loads_or_is_one_line(tmp_path_factory, document):
    """Any tree of YAML values under the study file's keys (and a misspelt one): never a
    traceback, whatever type sits where a mapping, a list or a number belongs."""
    import yaml

    path = tmp_path_factory.mktemp("tree") / "study.yaml"
    path.write_text(yaml.safe_dump({"kit_study": 1, **document}, sort_keys=False))
    _loads_or_one_line(path)


def test_every_structural_problem_of_a_study_file_is_in_its_one_line(tmp_path):
    """A misspelt top key, an unknown gan3d option, a key given twice, a bad metric and a setting
    of another strategy: one refusal listing each with its line, field and fix."""
    text = (
        _swap("seed: 3", "sead: 3")
        .replace("  lr:", "  lrr:")
        .replace("  synthetic: 640", "  synthetic: 640\n  preset: full")
        .replace("validation.g_loss", "accuracy")
        .replace("strategy: random", "strategy: {type: random, trees: 5}")
    )
    path = write(tmp_path, text)
    with pytest.raises(KitError) as err:
        load_study(path)
    message = str(err.value)
    assert "\n" not in message and message.startswith(
        f"{path}: invalid study file (5 problem(s)): "
    )
    for line, words in (
        (2, "sead: unknown key; did you mean 'seed'?"),
        (4, "parameters.lrr: 'lrr' is not an option of gan3d train; fix: did you mean 'lr'?"),
        (10, "fixed.preset: duplicate key (first given on line 8)"),
        (12, "objective.metric: 'accuracy' is not physics_score"),
        (15, "strategy.trees: not a setting of the random strategy; fix: settings of random: none"),
    ):
        assert f"{path}:{line}: {words}" in message, (line, message)
    assert message.endswith("; fix: fix the study file (`kit docs study` describes it)"), message


def test_the_showers_check_tries_only_configs_the_conditions_allow(tmp_path):
    """4 ranks x batch 16 = 64 = the 64 showers held out of 640 (gan3d takes it: one batch a rank);
    batch 64 only with one rank: every config fits. Without the condition, 4 x 64 is refused."""
    layout = (
        "  ranks-per-node: {type: choice, values: [1, 4]}\n"
        "  batch-size: {type: choice, values: [16, 64], when: {ranks-per-node: 1}}\n  lr:"
    )
    spec = load_study(write(tmp_path, _swap("  lr:", layout)))
    assert (
        spec.layout({"ranks-per-node": 4, "lr": 0.001, "optimizer": "adam", "warmup-epochs": 1.0})[
            0
        ]
        == 4
    )
    with pytest.raises(
        KitError,
        match=r"study.yaml:5: parameters.batch-size: "
        r"with batch-size 64 and 4 rank\(s\) per node a step needs 256 showers",
    ):
        load_study(
            write(tmp_path, _swap("  lr:", layout.replace(", when: {ranks-per-node: 1}", "")))
        )


@settings(max_examples=40, deadline=None)
@given(
    ranks=st.integers(1, 4),
    low=st.integers(1, 40),
    span=st.integers(1, 40),
    events=st.integers(8, 400),
    fraction=st.sampled_from([0.05, 0.1, 0.25, 0.5, 0.9]),
    as_choice=st.booleans(),
)
@example(
    ranks=1, low=1, span=31, events=640, fraction=0.1, as_choice=False
)  # 2 x 32 = the 64 held out: runs
@example(ranks=1, low=1, span=32, events=640, fraction=0.1, as_choice=False)  # 2 x 33 > 64: refused
@example(ranks=2, low=1, span=20, events=640, fraction=0.1, as_choice=True)  # 3 x 21 = 63: runs
def test_the_showers_check_refuses_exactly_the_spaces_with_a_config_gan3d_would_stop(
    tmp_path_factory, ranks, low, span, events, fraction, as_choice
):
    """Against every config of the space, tried one by one: refused iff one of them needs more showers
    per step (ranks x batch size) than the held-out or the training share of gan3d's split."""
    from kit.study.showers import synthetic_split

    batch = (
        f"{{type: choice, values: [{low}, {low + span}]}}"
        if as_choice
        else f"{{type: int, low: {low}, high: {low + span}}}"
    )
    text = GOOD.replace(
        "  lr:",
        f"  ranks-per-node: {{type: int, low: 1, high: {ranks + 1}}}\n  batch-size: {batch}\n  lr:",
    ).replace("synthetic: 640", f"synthetic: {events}\n  test-fraction: {fraction}")
    held_out, training = synthetic_split(events, fraction)
    batches = [low, low + span] if as_choice else range(low, low + span + 1)
    fails = any(r * b > min(held_out, training) for r in range(1, ranks + 2) for b in batches)
    path = write(tmp_path_factory.mktemp("s"), text)
    if fails:
        with pytest.raises(
            KitError, match=r"study.yaml:[45]: parameters\.(ranks-per-node|batch-size): with "
        ):
            load_study(path)
    else:
        load_study(path)
