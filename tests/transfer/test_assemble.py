"""The remote script as the kit sends it (kit.transfer.assemble): the rules it shares with `kit image
convert` are the kit's own module's text, not a copy, and nothing is left for the site to import."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from kit import archive_rules
from kit.transfer import assemble


def test_the_script_sent_holds_the_shared_rules_text_and_imports_nothing_of_the_kit():
    sent = assemble.script().decode()
    assert Path(archive_rules.__file__).read_text().rstrip("\n") in sent
    imported = [
        node
        for node in ast.walk(ast.parse(sent))
        if isinstance(node, ast.ImportFrom)
        and (node.module or "").startswith("kit")
        or isinstance(node, ast.Import)
        and any(a.name.split(".")[0] == "kit" for a in node.names)
    ]
    assert imported == []


def test_a_script_name_the_inlined_module_also_defines_is_refused(tmp_path):
    host = tmp_path / "host.py"
    host.write_text(
        "from kit.archive_rules import parse_pax\n\n\ndef member_path(raw):\n    return raw\n"
    )
    with pytest.raises(
        RuntimeError, match="host.py, with the modules it imports inlined, binds member_path twice"
    ):
        assemble.inline(host)


def test_a_relative_import_is_refused(tmp_path):
    host = tmp_path / "host.py"
    host.write_text("from .archive_rules import parse_pax\n")
    with pytest.raises(RuntimeError, match="host.py:1: a relative import cannot be inlined"):
        assemble.inline(host)
