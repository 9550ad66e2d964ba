"""The core runs without any extra; a command whose extra is missing says which to install, in
one line, exit 1 (never an ImportError traceback or the crash handler's exit 70)."""

from __future__ import annotations

import sys

import pytest

from tests.support.installs import OPTIONAL, kit_without, outside_env, run


@pytest.mark.parametrize(
    "args, extra",
    [
        (["image", "convert", "in.tar", "out.sqfs"], "convert"),
        (["image", "inspect", "in.tar"], "convert"),
        (["transfer", "push", "x.sqfs", "--site", "laptop"], "transfer"),
        (["transfer", "versions", "x", "--site", "laptop"], "transfer"),
        (["scale", "report", "--results", "none.json"], None),
        (
            ["scale", "predict", "--reference", "table4"],
            "report",
        ),  # the model's numpy  # a bad result is reported before plotting
    ],
    ids=lambda v: v if isinstance(v, str) else " ".join(v[:2]) if isinstance(v, list) else str(v),
)
def test_a_command_without_its_extra_names_the_extra_in_one_line(args, extra, tmp_path):
    code, out, err = kit_without(args, OPTIONAL, tmp_path)
    assert code == 1 and err.count("\n") == 1 and "Traceback" not in err, err
    if extra:
        assert f"pip install 'secure-site-kit[{extra}]'" in err, err


def test_scale_report_without_matplotlib_names_report(tmp_path):
    from tests.support.installs import results_json

    result = results_json(tmp_path / "n1.json", 1, 100.0)
    code, out, err = kit_without(
        ["scale", "report", "--results", str(result), "--out", str(tmp_path / "r")],
        ("matplotlib",),
        tmp_path,
    )
    assert (code, err.count("\n")) == (1, 1) and "secure-site-kit[report]" in err, err


def test_help_lists_every_group_even_without_the_extras(tmp_path):
    code, out, err = kit_without(["--help"], OPTIONAL, tmp_path)
    assert code == 0, err
    for group in ("site", "mpi", "image", "transfer", "slurm", "scale"):
        assert group in out
    assert "secure-site-kit[convert]" in out


def test_the_core_commands_run_with_no_extra_installed(tmp_path):
    for args in (
        ["--version"],
        ["site", "show", "supermuc-ng"],
        ["site", "validate", "laptop"],
        [
            "slurm",
            "render",
            "--dry-run",
            "--site",
            "supermuc-ng",
            "--no-container",
            "--nodes",
            "2",
            "--ranks-per-node",
            "4",
            "--dir",
            str(tmp_path / "runs"),
            "--",
            "--data",
            "/x",
        ],
        [
            "scale",
            "plan",
            "--site",
            "supermuc-ng",
            "--no-container",
            "--nodes",
            "1,2",
            "--ranks-per-node",
            "4",
            "--dir",
            str(tmp_path / "sweep"),
            "--",
            "--data",
            "/x",
        ],
        ["scale", "submit", str(tmp_path / "sweep"), "--dry-run"],
        ["transfer", "verify", str(tmp_path / "no-bundle")],
    ):
        code, out, err = kit_without(args, OPTIONAL, tmp_path)
        expected = 1 if args[:2] == ["transfer", "verify"] else 0  # no bundle there: a clean error
        assert code == expected and "Traceback" not in err and "not installed" not in err, (
            args,
            err,
        )


def test_version_is_the_installed_distributions(tmp_path):
    """kit --version and kit.__version__ (for results records) name the package metadata's
    version.
    """
    from importlib import metadata

    code, out, err = kit_without(["--version"], (), tmp_path)
    assert (
        code == 0
        and out.splitlines()[0] == f"kit (secure-site-kit) {metadata.version('secure-site-kit')}"
    ), err
    import kit as package

    assert package.__version__ == metadata.version("secure-site-kit")


@pytest.mark.parametrize(
    "command, args",
    [
        ("train", ["--synthetic", "8", "--preset", "tiny", "--epochs", "1", "--threads", "1"]),
        ("flops", ["--preset", "tiny", "--batch-size", "2"]),
    ],
)
def test_gan3d_without_the_train_extra_names_it_in_one_line(command, args, tmp_path):
    code = (
        "import sys\nfor m in sys.argv[1].split(','): sys.modules[m] = None\n"
        "from gan3d.__main__ import main\nsys.exit(main(sys.argv[2:]))"
    )
    done = run(
        [sys.executable, "-c", code, "tensorflow,h5py,keras", command, *args],
        cwd=tmp_path,
        env=outside_env(
            PYTHONPATH=sys.path[0] if sys.path[0] else ".", KIT_CRASH_DIR=str(tmp_path)
        ),
    )
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert f"gan3d {command}: error:" in done.stderr and "secure-site-kit[train]" in done.stderr
    assert not list(tmp_path.glob("*crash*"))
