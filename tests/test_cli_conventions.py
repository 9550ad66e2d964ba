"""What every `kit` command shares: -q/--quiet and -v/--verbose, shell completion generated from
the parser tree, and TensorFlow's log level in the jobs and the demo."""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from kit.cli import GROUPS, build_parser, leaves, main
from kit.site.load import available_sites
from kit.verbosity import quiet, verbose
from tests.image.builders import busybox_root, oci_layout
from tests.support.sites import slurm_site_dict, write_site

REPO = Path(__file__).resolve().parents[1]


def kit(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kit", *args], capture_output=True, text=True, timeout=300, env=env
    )


# --- -q / -v -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def noisy_src(tmp_path_factory) -> Path:
    """An image whose conversion drops device nodes and changes setuid files: notes to print."""
    extra = [("junk", "d", None, 0o755)] + [(f"junk/dev{i}", "c", None, 0o644) for i in range(3)]
    extra += [(f"junk/suid{i}", "f", b"", 0o4755) for i in range(2)]
    return oci_layout(tmp_path_factory.mktemp("src") / "oci", [busybox_root(*extra)])


def test_quiet_convert_prints_only_what_it_wrote(noisy_src, tmp_path):
    for argv in (["-q", "image", "convert"], ["image", "convert", "--quiet"]):
        out = tmp_path / f"img{len(argv[0])}.tar.gz"
        done = kit(*argv, str(noisy_src), str(out))
        assert done.returncode == 0 and done.stderr == "", done.stderr
        lines = done.stdout.splitlines()
        assert len(lines) == 2 and lines[0].startswith(f"wrote {out} (tar.gz, "), done.stdout
        assert lines[1].startswith("sha256 ") and out.is_file()
    dry = kit("-q", "image", "convert", str(noisy_src), str(tmp_path / "dry"), "--dry-run")
    assert dry.returncode == 0 and dry.stdout.startswith("dry run: would write ")
    assert len(dry.stdout.splitlines()) == 1 and not (tmp_path / "dry").exists()


def test_global_verbose_means_the_convert_option(noisy_src, tmp_path):
    """`kit -v image convert` lists every path, as `kit image convert -v` always did."""
    outputs = []
    for argv in (
        ["-v", "image", "convert"],
        ["image", "convert", "-v"],
        ["--verbose", "image", "convert"],
    ):
        done = kit(*argv, str(noisy_src), str(tmp_path / "img"), "--dry-run")
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout)
    assert outputs[0] == outputs[1] == outputs[2]
    for i in range(3):
        assert f"  dropped /junk/dev{i} (layer 0): device node or FIFO\n" in outputs[0]
    normal = kit("image", "convert", str(noisy_src), str(tmp_path / "img"), "--dry-run").stdout
    assert "/junk/dev0" not in normal and "  dropped 3 paths: device node or FIFO\n" in normal


def test_quiet_and_verbose_together_are_one_clean_error(noisy_src, tmp_path):
    for argv in (["-q", "-v"], ["-q", "image", "convert", "-v"]):
        words = argv if "image" in argv else [*argv, "image", "convert"]
        done = kit(*words, str(noisy_src), str(tmp_path / "img"))
        assert done.returncode == 1 and done.stdout == "" and not (tmp_path / "img").exists()
        assert done.stderr == (
            "kit: error: -q/--quiet and -v/--verbose contradict each other; fix: give one of them\n"
        )


def test_quiet_slurm_dry_run_prints_the_script_and_no_note(tmp_path, capsys):
    site = write_site(tmp_path, slurm_site_dict())
    argv = [
        "slurm",
        "render",
        "--site",
        str(site),
        "--no-container",
        "--dir",
        str(tmp_path / "d"),
        "--dry-run",
    ]
    assert main(["-q", *argv]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("#!/bin/bash\n") and err == ""
    assert not quiet() and not verbose()  # the level lasts one command
    assert main(argv) == 0 and "dry run: nothing written" in capsys.readouterr().err


def test_every_command_takes_q_and_v_before_and_after_its_name():
    parser = build_parser()
    for leaf in leaves(parser):
        flags = {s for a in leaf._actions for s in a.option_strings}
        assert {"-q", "--quiet", "-v", "--verbose"} <= flags, leaf.prog
    args = parser.parse_args(["-v", "site", "show", "laptop"])
    assert args.verbose and not args.quiet  # the leaf's own default does not undo the top's


# --- shell completion ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bash_completion(tmp_path_factory) -> Path:
    done = kit("completion", "bash")
    assert done.returncode == 0 and done.stderr == "", done.stderr
    path = tmp_path_factory.mktemp("completion") / "kit.bash"
    path.write_text(done.stdout)
    return path


def complete(script: Path, words: list[str], cwd: Path | None = None) -> list[str]:
    """COMPREPLY of the real completion function for `words` (the last is the one being typed)."""
    driver = (
        f"source {shlex.quote(str(script))} || exit 9\n"
        f"COMP_WORDS=({' '.join(shlex.quote(w) for w in words)})\n"
        "COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))\nCOMPREPLY=()\n_kit_complete || exit 8\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    done = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", driver],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr
    return [w for w in done.stdout.split("\n") if w]


def test_completion_script_registers_for_kit(bash_completion):
    done = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", f"source {bash_completion}; complete -p kit"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout == "complete -o default -F _kit_complete kit\n", done.stderr


@pytest.mark.parametrize(
    "words, offered",
    [
        (["kit", ""], GROUPS),
        (["kit", "scale", "report", "--reference", "t"], [f"table{i}" for i in range(1, 10)]),
        (["kit", "scale", "predict", "--reference", ""], [f"table{i}" for i in range(1, 7)]),
        (["kit", "scale", "tune", "--precision", ""], ["fp32", "bf16"]),
        (["kit", "im"], ["image"]),
        (["kit", "image", ""], ["convert", "build", "inspect"]),
        (["kit", "-q", "image", "co"], ["convert"]),
        (["kit", "image", "convert", "--si"], ["--site"]),
        (["kit", "image", "convert", "--format", "t"], ["tar.gz", "tar"]),
        (["kit", "mpi", "pair", "IMG", "--mode", ""], ["major", "full", "strict"]),
        (["kit", "completion", ""], ["bash", "zsh"]),
        (
            ["kit", "-"],
            ["-h", "--help", "--debug", "--version", "-q", "--quiet", "-v", "--verbose"],
        ),
        (
            ["kit", "image", "convert", ""],
            [],
        ),  # SRC: nothing from kit, bash then completes file names
    ],
)
def test_completion_offers_the_parser_words(bash_completion, words, offered):
    assert complete(bash_completion, words) == offered


def test_completion_offers_known_sites_after_site(bash_completion):
    sites = available_sites()
    assert "laptop" in sites
    for words in (
        ["kit", "image", "convert", "SRC", "OUT", "--site", ""],
        ["kit", "slurm", "render", "--site", ""],
    ):
        assert complete(bash_completion, words) == sites
    assert complete(bash_completion, ["kit", "mpi", "check", "--site", "la"]) == ["laptop"]


def test_completion_covers_every_command_and_option(bash_completion):
    """The script is generated from the tree: each leaf's options are offered after a '-'."""
    for name, group in children(build_parser()).items():
        subs = children(group)
        if not subs:
            continue
        assert complete(bash_completion, ["kit", name, ""]) == list(subs)
        for sub, leaf in subs.items():
            flags = [s for a in leaf._actions for s in a.option_strings if s.startswith("--")]
            assert complete(bash_completion, ["kit", name, sub, "--"]) == flags, (name, sub)


def children(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return {
        name: p
        for a in parser._actions
        if isinstance(a, argparse._SubParsersAction)
        for name, p in a.choices.items()
    }


def tree_words(parser: argparse.ArgumentParser) -> set[str]:
    """Every word a completion may offer: subcommands, options, choices, site names."""
    words = set(available_sites())
    for action in parser._actions:
        words.update(action.option_strings)
        words.update(str(c) for c in action.choices or ())
    for child in children(parser).values():
        words |= tree_words(child)
    return words


WORD = st.text(st.sampled_from("ab-$`'\"\\(); *?[]~=:/\n\t" + "imageconvert"), max_size=12)


@pytest.fixture(scope="module")
def known_words() -> set[str]:
    return tree_words(build_parser())


@given(typed=st.lists(WORD, max_size=5), cur=WORD)
@example(typed=["$(touch pwned)", "`touch pwned`"], cur="$(touch pwned)")
@example(typed=["image", "convert", "--format"], cur="*")
@example(typed=[], cur="'")  # bash dequotes an open quote: every group is offered
def test_completion_of_any_words_runs_nothing_and_offers_only_kit_words(
    bash_completion, known_words, tmp_path_factory, typed, cur
):
    """Whatever is on the command line, the function only matches it: no expansion, no
    command substitution, and every offer is a word of the parser tree that starts with `cur`
    (as bash dequotes it: compgen removes the quotes of the word being typed)."""
    cwd = tmp_path_factory.mktemp("cwd")
    offered = complete(bash_completion, ["kit", *typed, cur], cwd=cwd)
    assert list(cwd.iterdir()) == []
    assert set(offered) <= known_words, offered
    if not set("'\"\\$`") & set(cur):
        assert all(word.startswith(cur) for word in offered), offered


def test_zsh_script_loads_bash_completion_layer():
    done = kit("completion", "zsh")
    assert done.returncode == 0 and done.stdout.startswith(
        "autoload -U +X bashcompinit && bashcompinit\n"
    )
    assert "complete -o default -F _kit_complete kit\n" in done.stdout


# --- TensorFlow's log level ----------------------------------------------------------------------


def _job_environment(script: str, env: dict[str, str]) -> str:
    """TF_CPP_MIN_LOG_LEVEL as the batch script leaves it, run by bash up to its launch line."""
    head = script[: script.index('echo "kit: run')]
    done = subprocess.run(
        ["bash", "-c", head + 'printf %s "${TF_CPP_MIN_LOG_LEVEL-unset}"'],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": os.environ["PATH"], "SLURM_JOB_NUM_NODES": "1", **env},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_batch_job_quiets_tensorflow_unless_the_user_or_site_chose(tmp_path, capsys):
    site = slurm_site_dict()
    argv = ["slurm", "render", "--no-container", "--dir", str(tmp_path / "d"), "--dry-run"]
    assert main([*argv, "--site", str(write_site(tmp_path, site))]) == 0
    script = capsys.readouterr().out
    assert _job_environment(script, {}) == "2"  # C++ INFO and WARNING hidden, errors kept
    assert (
        _job_environment(script, {"TF_CPP_MIN_LOG_LEVEL": "0"}) == "0"
    )  # the submitter's value wins
    site["name"] = "chatty"
    site["host_mpi"]["env"] = {"TF_CPP_MIN_LOG_LEVEL": "1"}
    assert main([*argv, "--site", str(write_site(tmp_path, site))]) == 0
    assert _job_environment(capsys.readouterr().out, {}) == "1"  # the site's value wins


def test_demo_runs_its_job_with_tensorflow_quieted(tmp_path, monkeypatch):
    """The environment the demo's training job starts with (the job itself is not run here)."""
    import gan3d.demo as demo

    data = tmp_path / "build" / "data"
    data.mkdir(parents=True)
    for name in ("a.h5", "b.h5", "c.h5", demo.MARKER):
        (data / name).write_text("")
    seen = []

    def training(cmd, *args, **kwargs):
        seen.append(os.environ.get("TF_CPP_MIN_LOG_LEVEL"))
        return subprocess.CompletedProcess(cmd, 3)

    monkeypatch.setattr(demo.subprocess, "run", training)
    monkeypatch.setattr(demo, "find_mpiexec", lambda: "mpiexec")
    argv = ["--build", str(tmp_path / "build"), "--results", str(tmp_path / "r.json")]
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    assert demo.main(argv) == 3
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "0")
    assert demo.main(argv) == 3
    assert seen == ["2", "0"]
