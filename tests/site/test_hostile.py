"""Hostile site configs: every one ends in one SiteError line naming file, line and key, quickly,
without a traceback, a hang or a blown-up value in the message."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kit.cli import main
from kit.site import SiteError, load_site

REPO = Path(__file__).resolve().parents[2]
LAPTOP = (REPO / "site-configs" / "laptop.yaml").read_text()
CORPUS = REPO / "tests" / "corpus" / "config"


def refused(path: Path, *words: str) -> str:
    """The one-line SiteError for ``path``, which must hold ``words``."""
    with pytest.raises(SiteError) as err:
        load_site(path)
    message = str(err.value)
    assert "\n" not in message and len(message) < 1500 + 6 * len(str(path)), message
    for word in words:
        assert word in message, message
    return message


def write(tmp_path: Path, text: str | bytes, name: str = "hostile.yaml") -> Path:
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


def laughs(levels: int = 9) -> str:
    lines = [
        "name: laptop",
        'a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]',
    ]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, levels + 1)]
    return "\n".join(lines) + f"\nmodules: *a{levels}\n"


@pytest.mark.timeout(20)
def test_billion_laughs_is_refused_before_it_is_expanded(tmp_path):
    path = write(tmp_path, laughs())
    # 10 x 10 x 10 expansions cross the bound at a3 already: the line of the node that does
    refused(path, f"{path}:5: YAML refused: aliases expand the document past")
    # and the bound is no ban: aliases a config can use in earnest still load
    text = LAPTOP.replace(
        "  library_dirs: [/usr/lib/x86_64-linux-gnu]",
        "  library_dirs: &libs [/usr/lib/x86_64-linux-gnu]",
    )
    text = text.replace("  binds: []", "  binds: []\n  mpi_target: *dir").replace(
        "  prefix: /usr", "  prefix: &dir /usr"
    )
    assert load_site(write(tmp_path, text, "aliased.yaml")).container.mpi_target == "/usr"


@pytest.mark.timeout(20)
@pytest.mark.parametrize("opening,closing", [("[", "]"), ("{a: ", "}")])
def test_ten_thousand_deep_nesting_is_refused_without_recursion_error(tmp_path, opening, closing):
    path = write(tmp_path, LAPTOP + "extra: " + opening * 10_000 + "1" + closing * 10_000 + "\n")
    refused(path, "YAML refused: nested deeper than 50 levels")


@pytest.mark.parametrize(
    "value, words",
    [
        (
            "!!python/object/apply:os.system [echo pwned]",
            ("!!python/object/apply:os.system is not allowed",),
        ),
        ("!!python/name:os.system ''", ("!!python/name:os.system is not allowed",)),
        ("!local 3", ("tag !local is not allowed",)),
    ],
)
def test_python_and_unknown_tags_are_refused(tmp_path, value, words):
    path = write(tmp_path, LAPTOP.replace("  sockets: 1", f"  sockets: {value}"))
    refused(path, f"{path}:12: YAML refused: tag", *words)


def test_a_tag_on_a_mapping_is_not_silently_ignored(tmp_path):
    path = write(tmp_path, LAPTOP.replace("node:\n", "node: !!python/object:kit.site.model.Node\n"))
    refused(path, "python/object:kit.site.model.Node is not allowed")


@pytest.mark.timeout(20)
def test_a_fifo_as_site_file_is_refused_without_blocking(tmp_path, monkeypatch):
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    refused(fifo, f"{fifo}: is a FIFO, not the regular file a site config is")
    (tmp_path / "sites").mkdir()
    os.mkfifo(tmp_path / "sites" / "piped.yaml")
    monkeypatch.setenv("KIT_SITE_PATH", str(tmp_path / "sites"))
    refused("piped", "piped.yaml: is a FIFO")  # found by name: a FIFO is no site either


@pytest.mark.timeout(20)
def test_dev_zero_behind_a_link_is_refused_without_reading(tmp_path):
    link = tmp_path / "zero.yaml"
    link.symlink_to("/dev/zero")
    refused(link, "is a character device, not the regular file a site config is")


def test_a_huge_file_is_refused_by_its_size(tmp_path):
    path = write(tmp_path, LAPTOP + ("# padding\n" * 120_000))
    refused(path, "larger than 1 MiB")


def test_non_utf8_names_the_line(tmp_path):
    path = write(
        tmp_path, LAPTOP.replace("cpu_model: x86_64", "cpu_model: \xe9x86_64").encode("latin-1")
    )
    refused(path, f"{path}:11: the site config is not UTF-8 (byte 0xe9)")


def test_a_raw_control_character_names_the_line(tmp_path):
    path = write(tmp_path, LAPTOP.replace("cpu_model: x86_64", "cpu_model: \x01x86_64"))
    refused(path, f"{path}:11: not valid YAML: character #x0001 is not allowed")


@pytest.mark.parametrize(
    "value, key",
    [
        ('"debug\\n"', "scheduler.partition"),
        ('"debug\\n#SBATCH --uid=0"', "scheduler.partition"),
        ('"a\\u2028b"', "scheduler.partition"),
        ('"laptop\\n"', "name"),
        ('"mpiexec\\n"', "host_mpi.launcher"),
        ('"Local\\rsite"', "description"),
        ('["mod\\n"]', "modules"),
        ('{A: "x\\ny"}', "host_mpi.env"),
    ],
)
def test_escaped_line_breaks_in_any_string_are_refused(tmp_path, value, key):
    target = {
        "scheduler.partition": "  partition: debug",
        "name": "name: laptop",
        "description": "description: Local 2-core x86_64 workstation / CI runner (no real cluster)",
        "modules": "modules: []",
        "host_mpi.launcher": "  launcher: mpiexec",
        "host_mpi.env": "  env: {}",
    }[key]
    path = write(tmp_path, LAPTOP.replace(target, target.split(":")[0] + ": " + value))
    refused(path, f": {key}: ", "contains a control character")


def test_a_5000_digit_integer_is_a_problem_of_its_line(tmp_path):
    path = write(tmp_path, LAPTOP.replace("  sockets: 1", "  sockets: " + "9" * 5000))
    message = refused(path, f"{path}:12: node.sockets: a value YAML cannot build")
    assert "9" * 100 not in message


@pytest.mark.parametrize(
    "value, words",
    [
        ("''", "host_mpi.launcher: is empty"),
        (
            "\"mpiexec -genv 'X 1\"",
            "host_mpi.launcher: \"mpiexec -genv 'X 1\" is not shell words (No closing quotation)",
        ),
    ],
)
def test_an_empty_or_unbalanced_launcher_is_refused_at_load(tmp_path, value, words):
    refused(write(tmp_path, LAPTOP.replace("  launcher: mpiexec", f"  launcher: {value}")), words)


@pytest.mark.parametrize(
    "old, new, words",
    [
        ("  memory_gb: 24", "  memory_gb: .nan", "node.memory_gb: nan is not a finite number"),
        ("  max_nodes: 1", "  max_nodes: 1" + "0" * 30, "is more than 1000000000"),
        ("scheduler:\n", "scheduler: [1, 2]\nx:\n", "scheduler: expected a mapping"),
        ("name: laptop", "name: {a: 1}", "name: expected a string, got dict {'a': 1}"),
        (
            "name: laptop",
            "name: [" + ", ".join(["abcdefghij"] * 5000) + "]",
            "name: expected a string, got list ['abcd",
        ),
        ("name: laptop", '"a\\nb": 1\nname: laptop', r": 'a\nb': unknown key"),
    ],
)
def test_wrong_values_stay_one_short_line(tmp_path, old, new, words):
    refused(write(tmp_path, LAPTOP.replace(old, new)), words)


def test_many_problems_are_one_line_listing_the_first_five(tmp_path):
    text = LAPTOP
    for key in (
        "sockets",
        "cores_per_socket",
        "threads_per_core",
        "numa_domains",
        "memory_gb",
        "clock_ghz_avx",
    ):
        text = text.replace(f"  {key}: ", f"  {key}: x")
    refused(write(tmp_path, text), "(6 problem(s))", "; and 1 more")


def test_top_level_that_is_no_mapping(tmp_path):
    refused(
        write(tmp_path, "- a\n- b\n"), "(top level): expected a mapping with keys name, description"
    )


@pytest.mark.parametrize("path", sorted(CORPUS.glob("*.yaml")), ids=lambda p: p.name)
def test_corpus_of_found_examples_is_refused_cleanly(path):
    refused(path)


def test_validate_cli_reports_a_hostile_file_in_one_line_and_goes_on(tmp_path, capsys):
    bad = write(tmp_path, laughs())
    assert main(["site", "validate", str(bad), "laptop"]) == 1
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and "aliases expand" in captured.err
    assert ": ok (laptop)" in captured.out
