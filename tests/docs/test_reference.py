"""docs/reference/*.md are what the code makes of them now (`python -m kit.reference` rewrites
them), every environment variable the code reads is described, and the parts the pages are made
with do what they say: the environment walk, the schema rows, the wrapped tables."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
import textwrap

import pytest

from kit.reference import directory, generate, keys, stale
from kit.reference.__main__ import main as reference_main
from kit.reference.environment import MEANINGS, found_in_code, scan
from kit.reference.markdown import COMMAND, MAX_LINE, table
from kit.schema import Field, Items, Names, Section
from tests.support.paths import REPO


@pytest.fixture(scope="module")
def pages() -> dict[str, str]:
    if importlib.util.find_spec("numpy") is None:  # gan3d's parsers: python -m gan3d's modules
        pytest.skip("the gan3d commands' page needs numpy: pip install -e '.[report]'")
    return generate()


def test_the_committed_reference_pages_are_what_the_code_generates(pages):
    assert directory() == REPO / "docs" / "reference"
    assert stale(pages, directory()) == [], f"regenerate them: {COMMAND}"


def test_no_line_of_a_reference_page_is_too_wide(pages):
    wide = [
        f"{name}:{n}"
        for name, text in pages.items()
        for n, line in enumerate(text.splitlines(), 1)
        if len(line) > MAX_LINE
    ]
    assert wide == []


def test_the_command_page_has_every_kit_and_gan3d_command(pages):
    from kit.cli import build_parser, leaves

    headings = {
        line.lstrip("#").strip() for line in pages["cli.md"].splitlines() if line[:1] == "#"
    }
    commands = {leaf.prog for leaf in leaves(build_parser())}
    gan3d = {
        f"python -m gan3d {c}" for c in ("train", "validate", "simulate", "flops", "peak", "demo")
    }
    assert len(commands) > 30 and commands | gan3d <= headings


def test_the_gan3d_parsers_are_built_without_tensorflow():
    probe = (
        "import sys; from kit.reference.cli import _gan3d_parsers; "
        "print(len(_gan3d_parsers()), 'tensorflow' in sys.modules)"
    )
    if importlib.util.find_spec("numpy") is None:
        pytest.skip("python -m gan3d's modules need numpy: pip install -e '.[report]'")
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["6", "False"]


def test_check_names_a_page_that_differs_and_writes_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("kit.reference.__main__.generate", lambda: {"a.md": "new\n", "b.md": "b\n"})
    (tmp_path / "a.md").write_text("old\n")
    (tmp_path / "b.md").write_text("b\n")
    assert reference_main(["--check", "--dir", str(tmp_path)]) == 1
    assert capsys.readouterr().err == (
        f"{tmp_path / 'a.md'}: differs from the code; fix: run {COMMAND}\n"
    )
    assert (tmp_path / "a.md").read_text() == "old\n"
    assert reference_main(["--dir", str(tmp_path)]) == 0
    assert (tmp_path / "a.md").read_text() == "new\n"
    assert reference_main(["--check", "--dir", str(tmp_path)]) == 0


def test_every_environment_variable_the_code_reads_is_described():
    found = found_in_code()
    assert found.unresolved == [], "reads whose variable the walk cannot name"
    undescribed = sorted(set(found.readers) - set(MEANINGS))
    assert undescribed == [], "describe them in kit.reference.environment.MEANINGS"
    assert sorted(set(MEANINGS) - set(found.readers)) == [], "no longer read: remove them"
    assert {"KIT_SITE_PATH", "GAN3D_FORMS", "PMI_SIZE", "PAGER"} <= set(found.readers)


def test_the_environment_walk_finds_every_spelling_of_a_read():
    main = textwrap.dedent(
        """
        import os
        from os import environ
        from pkg.names import KEYS
        NAME = "E_CONST"
        PAIRS = {"E_DICT": "1"}

        def f(environ=None):
            a = os.environ.get("E_GET")
            b = os.environ["E_ITEM"]
            c = os.getenv("E_GETENV")
            d = "E_IN" in os.environ
            os.environ.setdefault("E_DEFAULT", "2")
            e = os.environ.get(NAME)
            env = os.environ if environ is None else environ
            g = [env.get(k) for k in KEYS]
            for key, value in PAIRS.items():
                env.get(key, value)

            def inner(name):
                return env.get(name)

            h = {name: inner(name) for name in ("E_NESTED",)}
            copy = dict(os.environ)
            copy["E_WRITTEN"] = "x"
            other = {"E_NOT": 1}
            other.get("E_NOT")
            os.environ.get(key_from_elsewhere)
        """
    )
    names = 'KEYS = ("E_IMPORTED_1",) + ("E_IMPORTED_2",)\n'
    found = scan({"pkg.main": ast.parse(main), "pkg.names": ast.parse(names)})
    assert sorted(found.readers) == [
        "E_CONST",
        "E_DEFAULT",
        "E_DICT",
        "E_GET",
        "E_GETENV",
        "E_IMPORTED_1",
        "E_IMPORTED_2",
        "E_IN",
        "E_ITEM",
        "E_NESTED",
    ]
    assert found.readers["E_GET"] == {"pkg.main"}
    line = next(n for n, text in enumerate(main.splitlines(), 1) if "key_from_elsewhere" in text)
    assert found.unresolved == [f"pkg.main:{line}"]


def test_schema_rows_name_nested_keys_list_entries_and_free_names():
    inner = Section({"port": Field("int", required=False, default=22, minimum=1, maximum=65535)})
    schema = Section(
        {
            "name": Field("str", doc="what it is called"),
            "mode": Field(
                "str", choices=tuple(f"m{i}" for i in range(14)), nullable=True, required=False
            ),
            "hosts": Field(Items(Field(inner), min_len=1)),
            "env": Field(Names(Field("str")), required=False, default={}),
            "sub": Field(Section({"on": Field("bool", required=False, default=False)}, open=True)),
        }
    )
    assert keys.rows(schema) == [
        ["`name`", "string", "required", "", "what it is called"],
        [
            "`mode`",
            "string or null",
            "default `null`",
            ", ".join(f"`m{i}`" for i in range(12)) + " and 2 more",
            "",
        ],
        ["`hosts`", "list of mappings", "required", "at least 1 entries", ""],
        ["`hosts[].port`", "integer", "default `22`", ">= 1; <= 65535", ""],
        ["`env`", "mapping of names to strings", "default `{}`", "", ""],
        ["`sub`", "mapping (open)", "required", "", ""],
        ["`sub.on`", "boolean", "default `false`", "", ""],
    ]


def test_a_long_cell_wraps_onto_rows_below_without_breaking_a_code_span():
    text = table(["a", "b"], [["x", "one two `three four` five | six"]], widths=(5, 12))
    assert text.splitlines() == [
        "| a | b |",
        "| --- | --- |",
        "| x | one two |",
        "|  | `three four` |",
        "|  | five \\| six |",
    ]
