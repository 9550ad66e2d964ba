"""`gan3d validate` on damaged checkpoints, FIFOs, bad data events and a NaN generator: exit 1 with one
line naming the file, nothing written that looks valid, never a hang. Real tiny generator, real files."""

import json
import os
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest

from gan3d.results import SCHEMA
from gan3d.validate import main
from kit.errors import KitError


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> Path:
    """A checkpoint directory with one real epoch checkpoint of a tiny generator."""
    import tensorflow as tf

    from gan3d.checkpoint import EpochCheckpoints
    from gan3d.model import generator

    tf.keras.utils.set_random_seed(3)
    model = generator("tiny")
    out = tmp_path_factory.mktemp("ckpt")
    EpochCheckpoints(out).save(
        tf.train.Checkpoint(generator=model), model, 1, meta={"preset": "tiny"}
    )
    return out


@pytest.fixture(scope="module")
def data(sim_dir: Path, tmp_path_factory) -> Path:
    """One simulator file whose event 5 holds an Inf cell."""
    path = tmp_path_factory.mktemp("bad") / "EleEscan_1_0.h5"
    shutil.copy(sim_dir / "EleEscan_1_2.h5", path)
    with h5py.File(path, "r+") as h5:
        h5["ECAL"][5, 12, 12, 4] = np.inf
    return path


def _args(data: Path, tmp_path: Path, *extra: str) -> list[str]:
    return ["--data", str(data), "--out", str(tmp_path / "plots"), "--events", "50", *extra]


def _fails(args: list[str], capsys, *words: str) -> str:
    assert main(args) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("gan3d validate: error:"), err
    for word in words:
        assert word in err, (word, err)
    return err


def test_bad_data_events_are_refused_or_skipped_and_counted(data, ckpt, tmp_path, capsys):
    _fails(
        _args(data, tmp_path, "--checkpoint", str(ckpt)),
        capsys,
        f"data file {data}: dataset ECAL event 5",
    )
    results = tmp_path / "r.json"
    results.write_text(json.dumps({"schema": SCHEMA, "ranks": 1}))
    assert (
        main(
            _args(
                data,
                tmp_path,
                "--checkpoint",
                str(ckpt),
                "--skip-bad-events",
                "--results",
                str(results),
            )
        )
        == 0
    )
    physics = json.loads(results.read_text())["physics"]
    assert (
        physics["skip_bad_events"] is True
        and physics["bad_events_skipped"] == 1
        and physics["events"] == 50
    )


@pytest.mark.timeout(60, method="thread")
def test_a_fifo_as_results_is_refused_without_blocking(sim_dir, ckpt, tmp_path, capsys):
    os.mkfifo(tmp_path / "r.json")
    _fails(
        _args(
            sim_dir / "EleEscan_1_2.h5",
            tmp_path,
            "--checkpoint",
            str(ckpt),
            "--results",
            str(tmp_path / "r.json"),
        ),
        capsys,
        "r.json: is a FIFO",
    )


@pytest.mark.timeout(60, method="thread")
def test_a_fifo_as_generator_weights_is_refused_without_blocking(sim_dir, tmp_path, capsys):
    os.mkfifo(tmp_path / "generator.weights.h5")
    _fails(
        _args(
            sim_dir / "EleEscan_1_2.h5",
            tmp_path,
            "--generator-weights",
            str(tmp_path / "generator.weights.h5"),
            "--preset",
            "tiny",
        ),
        capsys,
        "generator.weights.h5 is a FIFO",
    )


def test_a_damaged_checkpoint_meta_json_is_refused(sim_dir, ckpt, tmp_path, capsys):
    damaged = tmp_path / "ckpt"
    shutil.copytree(ckpt, damaged)
    (damaged / "epoch-0001" / "meta.json").write_text('{"epoch": "1", "preset": "tiny"}')
    _fails(
        _args(sim_dir / "EleEscan_1_2.h5", tmp_path, "--checkpoint", str(damaged)),
        capsys,
        str(damaged / "epoch-0001" / "meta.json"),
        "meta.json: epoch: expected an integer, got str '1'",
    )


def test_a_nan_generator_writes_no_score(sim_dir, ckpt, tmp_path, capsys):
    weights = tmp_path / "generator.weights.h5"
    shutil.copy(ckpt / "epoch-0001" / "generator.weights.h5", weights)
    with h5py.File(weights, "r+") as h5:
        h5.visititems(
            lambda name, obj: (
                obj.__setitem__(..., np.nan) if isinstance(obj, h5py.Dataset) else None
            )
        )
    results = tmp_path / "r.json"
    results.write_text(json.dumps({"schema": SCHEMA, "ranks": 2}))
    before = results.read_text()
    _fails(
        _args(
            sim_dir / "EleEscan_1_2.h5",
            tmp_path,
            "--generator-weights",
            str(weights),
            "--preset",
            "tiny",
            "--results",
            str(results),
        ),
        capsys,
        "NaN or Inf showers",
    )
    assert results.read_text() == before


def _tree(root: Path) -> dict[str, bytes | str]:
    """Every entry under ROOT: a file's bytes, a link's target (never followed)."""
    return {
        str(p.relative_to(root)): os.readlink(p) if p.is_symlink() else p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_symlink() or p.is_file()
    }


def _user_png(path: Path) -> None:
    """A PNG another program made with matplotlib (its own Software text): same format, not
    validate's.
    """
    from matplotlib.figure import Figure

    fig = Figure(figsize=(2, 2))
    fig.subplots().plot([0, 1], [1, 0])
    fig.savefig(path, format="png")


@pytest.fixture(scope="module")
def own_plots(sim_dir, ckpt, tmp_path_factory) -> Path:
    """A --out holding the plots of one earlier gan3d validate run."""
    out = tmp_path_factory.mktemp("own") / "plots"
    assert (
        main(
            [
                "--data",
                str(sim_dir / "EleEscan_1_2.h5"),
                "--out",
                str(out),
                "--events",
                "50",
                "--checkpoint",
                str(ckpt),
            ]
        )
        == 0
    )
    return out


@pytest.mark.parametrize(
    "planted", ["user's plot", "user's notes", "link to validate's plot", "directory"]
)
def test_files_at_its_plot_names_that_validate_did_not_write_are_never_replaced(
    sim_dir, ckpt, own_plots, tmp_path, capsys, planted
):
    """A --out shared with other files: one line naming the file, before anything is written (plots and
    results alike); the files stay as they were."""
    results = tmp_path / "r.json"
    results.write_text(json.dumps({"schema": SCHEMA, "ranks": 1}))
    out = tmp_path / "plots"
    out.mkdir()
    target = out / "physics_cellsum_vs_energy.png"
    if planted == "user's plot":
        _user_png(target)
    elif planted == "user's notes":
        target.write_text("my notes\n")
    elif (
        planted == "link to validate's plot"
    ):  # the link is the user's, even to a file validate wrote
        target.symlink_to(own_plots / target.name)
    else:
        target.mkdir()
    (out / "mine.png").write_bytes(b"kept")
    before, before_results, before_own = _tree(out), results.read_text(), _tree(own_plots)
    _fails(
        _args(
            sim_dir / "EleEscan_1_2.h5",
            tmp_path,
            "--checkpoint",
            str(ckpt),
            "--results",
            str(results),
        ),
        capsys,
        f"{target}: already there and not a plot gan3d validate wrote",
        "fix: give --out a new or empty",
    )
    assert (
        _tree(out) == before
        and results.read_text() == before_results
        and _tree(own_plots) == before_own
    )


def test_its_own_plots_are_replaced_by_the_next_run(sim_dir, ckpt, own_plots, tmp_path):
    """Each plot carries validate's mark, so a later run into the same --out replaces them (atomically:
    no temporary file left)."""
    from gan3d.validate import PLOT_SOFTWARE, plot_names, png_software

    before = _tree(own_plots)
    assert before and all(png_software(own_plots / name) == PLOT_SOFTWARE for name in before)
    results = tmp_path / "r.json"
    results.write_text(json.dumps({"schema": SCHEMA, "ranks": 1}))
    assert (
        main(
            [
                "--data",
                str(sim_dir / "EleEscan_1_2.h5"),
                "--out",
                str(own_plots),
                "--events",
                "50",
                "--checkpoint",
                str(ckpt),
                "--seed",
                "1",
                "--results",
                str(results),
            ]
        )
        == 0
    )
    written = {Path(p).name for p in json.loads(results.read_text())["physics"]["plots"]}
    assert written <= set(plot_names()) and set(_tree(own_plots)) == set(before) | written
    assert all(png_software(own_plots / name) == PLOT_SOFTWARE for name in written)
    assert all(
        _tree(own_plots)[name] != before[name] for name in written & set(before)
    )  # another seed, new plots


NOT_TRAIN_RESULTS = {  # what is there, and how the one line names it
    "a JSON object of another program": (
        '{"name": "my settings", "threads": 4}\n',
        "schema: missing required key (one of gan3d-run/1, gan3d-run/2)",
    ),
    "another kit file's schema": (
        '{"schema": "kit-scale-collect/1", "runs": []}\n',
        "schema: 'kit-scale-collect/1' is not allowed",
    ),
    "a JSON list": (
        '[{"schema": "gan3d-run/2"}]\n',
        "(top level): expected a mapping with keys schema",
    ),
    "no file": (None, "no such results file"),
    "a link to a results file": ("link", "is a symlink, not a regular file"),
}


@pytest.mark.parametrize("what", NOT_TRAIN_RESULTS)
def test_results_that_gan3d_train_did_not_write_get_no_physics(
    sim_dir, ckpt, tmp_path, capsys, what
):
    """--results takes gan3d train's results JSON only (its schema): anything else is one line, nothing
    written (no plots either): no physics key added to another JSON object, no missing file created,
    no link replaced with a file."""
    results = tmp_path / "settings.json"
    content, words = NOT_TRAIN_RESULTS[what]
    if content == "link":
        real = tmp_path / "run.json"
        real.write_text(json.dumps({"schema": SCHEMA, "ranks": 1}))
        results.symlink_to(real)
    elif content is not None:
        results.write_text(content)
    before = _tree(tmp_path)
    _fails(
        _args(
            sim_dir / "EleEscan_1_2.h5",
            tmp_path,
            "--checkpoint",
            str(ckpt),
            "--results",
            str(results),
        ),
        capsys,
        f"{results}: {words}",
        "fix: point --results at the results JSON gan3d train wrote",
    )
    assert _tree(tmp_path) == before and not (tmp_path / "plots").exists()


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_a_results_file_holding_nan_or_infinity_gets_no_physics_in_one_line(tmp_path, constant):
    """gan3d train writes no NaN or Infinity (and validate writes the record back without them): a file
    edited to hold one is refused as it is read, the file left as it was."""
    from gan3d.validate import read_results

    path = tmp_path / "run.json"
    path.write_text(f'{{"schema": "{SCHEMA}", "showers_per_second": {constant}}}')
    with pytest.raises(
        KitError, match=f"not valid JSON .{constant} is not a number JSON holds"
    ) as caught:
        read_results(path)
    assert "\n" not in str(caught.value) and constant in path.read_text()
