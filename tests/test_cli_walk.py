"""Every `kit` command follows the CLI's conventions (kit.commands.common): these tests walk the whole
parser tree, every group, so that a new command or option that breaks a rule fails here; old
spellings keep working with their one note; `kit GROUP --help` works without the group's extra."""

from __future__ import annotations

import argparse
import json
import re

import pytest

from kit.cli import GROUPS, build_parser, leaves, main, parsers
from kit.commands.common import HelpFormatter, add_group, shown_default
from kit.jsonout import JsonFlag
from tests.support.installs import OPTIONAL, kit_without

TREE = build_parser()

# The convention for work directories (kit.commands.common.CONVENTIONS): a command that reads a
# directory an earlier one made takes it as DIR; one that makes or writes into it, as --dir DIR.
READS = {
    "kit scale submit",
    "kit scale collect",
    "kit scale cancel",
    "kit scale report",
    "kit scale predict",
    "kit study run",
    "kit study status",
    "kit study cancel",
    "kit study report",
    "kit vcluster down",
    "kit vcluster status",
    "kit transfer verify",
}
MAKES = {
    "kit scale plan",
    "kit scale tune",
    "kit study plan",
    "kit vcluster up",
    "kit transfer bundle",
    "kit slurm render",
    "kit slurm submit",
}


def arguments() -> list[tuple[str, argparse.Action]]:
    """(command, argument) for every argument of every command, -h aside."""
    return [
        (leaf.prog, a)
        for leaf in leaves(TREE)
        for a in leaf._actions
        if not isinstance(a, argparse._HelpAction)
    ]


def shown(action: argparse.Action) -> bool:
    return action.help is not argparse.SUPPRESS


def texts(parser: argparse.ArgumentParser) -> list[str]:
    """Every text --help shows for this parser."""
    return [parser.description or "", parser.epilog or ""] + [
        str(a.help) for a in parser._actions if a.help and shown(a)
    ]


def flat(text: str) -> str:
    return " ".join(text.split())


def test_the_walk_sees_every_group_and_command():
    progs = {p.prog for p in parsers(TREE)}
    assert {f"kit {g}" for g in GROUPS} <= progs
    assert READS | MAKES <= {leaf.prog for leaf in leaves(TREE)}


def test_every_argument_has_help_and_only_old_spellings_are_hidden():
    missing = [f"{prog} {a.option_strings or a.dest}" for prog, a in arguments() if not a.help]
    assert missing == []
    hidden = [(prog, a.dest) for prog, a in arguments() if not shown(a)]
    assert hidden and all(dest.startswith("old_") for _, dest in hidden), hidden


def test_positional_metavars_are_capitals():
    bad = [
        (prog, a.metavar or a.dest)
        for prog, a in arguments()
        if not a.option_strings and shown(a)
        if not re.fullmatch(r"[A-Z][A-Z0-9_]*", str(a.metavar or a.dest))
    ]
    assert bad == []


def test_every_json_flag_is_declared_by_add_json_with_its_schema():
    flags = [(prog, a) for prog, a in arguments() if "--json" in a.option_strings]
    assert len(flags) >= 8
    for prog, a in flags:
        assert isinstance(a, JsonFlag), f"{prog}: --json not from kit.jsonout.add_json"
        assert re.fullmatch(r"kit-[a-z]+(-[a-z]+)*/[0-9]+", a.schema), (prog, a.schema)
        assert a.schema in a.help


def test_image_inspect_json_carries_its_schema(tmp_path, capsys):
    from tests.image.builders import busybox_root, oci_layout

    src = oci_layout(tmp_path / "oci", [busybox_root()])
    assert main(["image", "inspect", str(src), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    flag = next(a for prog, a in arguments() if prog == "kit image inspect" and a.dest == "json")
    assert isinstance(flag, JsonFlag) and doc["schema"] == flag.schema and doc["layers"], doc


def test_defaults_are_shown_by_the_formatter_and_never_written_by_hand():
    for leaf in leaves(TREE):
        assert leaf.formatter_class is HelpFormatter, leaf.prog
        page = flat(leaf.format_help())
        for a in leaf._actions:
            value = shown_default(a.default)
            if value is None or not shown(a):
                continue
            assert not re.search(r"\bdefault\b", str(a.help), re.I), (leaf.prog, a.help)
            assert f"(default: {value})" in page, (leaf.prog, a.dest, value)


def test_the_formatter_shows_what_argparse_would_use():
    p = argparse.ArgumentParser(formatter_class=HelpFormatter)
    p.add_argument("--poll", type=float, default=2.5, help="seconds")
    p.add_argument("--list", type=str, default=["a", "b"], help="words")
    p.add_argument("--off", action="store_true", help="a flag")
    p.add_argument("--unset", help="none")
    page = flat(p.format_help())
    assert "seconds (default: 2.5)" in page and "words (default: a,b)" in page
    assert "a flag (default" not in page and "none (default" not in page


ALTERNATIVES = re.compile(
    r"\b[a-z][\w.-]*\|[a-z][\w.-]*\b|\b([a-z]+)[0-9]+\.\.\1[0-9]+\b|\bone of\b"
)


def test_a_closed_set_of_values_has_choices():
    """An option that lists its values in its help (a|b, table1..table6, one of) or that has
    choices in another command has choices here too, so --help and completion offer them."""
    with_choices = {
        s
        for _, a in arguments()
        if a.choices and isinstance([*a.choices][0], str)
        for s in a.option_strings
    }
    for prog, a in arguments():
        if a.nargs == 0 or not shown(a):
            continue
        listed = ALTERNATIVES.search(str(a.help)) or set(a.option_strings) & with_choices
        assert not listed or a.choices, f"{prog} {a.option_strings}: give it choices"


def test_a_group_lists_every_verb_in_its_help():
    top = next(a for a in TREE._actions if isinstance(a, argparse._SubParsersAction))
    listing = {a.dest: a.help for a in top._choices_actions}
    for name, group in top.choices.items():
        verbs = [leaf.prog.split()[-1] for leaf in leaves(group) if leaf is not group]
        for verb in verbs:
            assert re.search(rf"\b{verb}\b", listing[name]), (name, verb, listing[name])
            assert re.search(rf"\b{verb}\b", group.description or ""), (name, verb)


def test_a_verb_added_to_a_group_is_listed_without_editing_the_group():
    top = argparse.ArgumentParser(prog="kit").add_subparsers()
    verbs = add_group(top, "demo", "things to try")
    verbs.add_parser("one", help="the first")
    assert top._choices_actions[-1].help == "things to try: one"
    verbs.add_parser("two", help="the second", extra="convert")
    assert top._choices_actions[-1].help.startswith("things to try: one, two")
    assert verbs.group.description == "Things to try: one, two."
    assert "two needs the [convert] extra" in str(verbs.group.epilog)


def test_help_names_kit_docs_topics_not_repository_paths():
    found = [
        (p.prog, t) for p in parsers(TREE) for t in texts(p) if re.search(r"docs/[\w/.-]*\.md", t)
    ]
    assert found == []


def test_work_directories_are_dir_when_read_and_dash_dash_dir_when_made():
    for leaf in leaves(TREE):
        dirs = [a for a in leaf._actions if a.dest == "dir" and shown(a)]
        if not dirs:
            continue
        [a] = dirs
        if leaf.prog in READS:
            assert not a.option_strings and a.metavar == "DIR", leaf.prog
        else:
            assert leaf.prog in MAKES, f"{leaf.prog}: add it to READS or MAKES"
            assert a.option_strings == ["--dir"] and a.metavar == "DIR", leaf.prog


def test_node_counts_are_nodes_n_or_a_comma_list():
    counts = [(prog, a) for prog, a in arguments() if "--nodes" in a.option_strings]
    assert len(counts) >= 6
    for prog, a in counts:
        kind = getattr(a.type, "__qualname__", "")
        expected = {"number.<locals>.parse": "N", "numbers.<locals>.parse": "N[,N...]"}
        assert a.metavar == expected.get(kind), (prog, kind, a.metavar)
    others = [
        (prog, a.option_strings)
        for prog, a in arguments()
        if "node" in a.dest.replace("per_node", "") and shown(a)
    ]
    assert all(options == ["--nodes"] for _, options in others), others


def test_kit_help_is_written_for_users():
    page = TREE.format_help()
    assert "kit docs" in page and "kit/commands" not in page
    examples = page[page.index("examples:") :].splitlines()
    assert 4 <= sum(line.startswith("  kit ") for line in examples) <= 6


# --- old spellings ------------------------------------------------------------------------------

NOTE = "kit: note: `{}` is now `{}`; the old spelling will go\n"


def test_study_plan_spec_dir_still_works_with_a_note(tmp_path, capsys):
    from tests.support.showers import tiny_showers
    from tests.support.studies import study_yaml

    params = {"lr": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True}}
    spec = study_yaml(tmp_path, tiny_showers(tmp_path / "data"), "random", 2, params)
    old, new = tmp_path / "old", tmp_path / "new"
    assert main(["study", "plan", str(spec), str(old), "--site", "laptop", "-q"]) == 0
    out, err = capsys.readouterr()
    assert err == NOTE.format("kit study plan SPEC DIR", "kit study plan SPEC --dir DIR")
    assert main(["study", "plan", str(spec), "--dir", str(new), "--site", "laptop", "-q"]) == 0
    assert capsys.readouterr().err == ""
    assert sorted(p.name for p in old.iterdir()) == sorted(p.name for p in new.iterdir()) != []
    assert main(["study", "plan", str(spec), "--site", "laptop"]) == 1
    assert "give --dir DIR" in capsys.readouterr().err


def test_transfer_bundle_images_dir_still_works_with_a_note(tmp_path, capsys):
    from tests.support.transfer import random_image

    image = random_image(tmp_path / "one.tar", 4096)
    assert main(["transfer", "bundle", str(image), str(tmp_path / "old")]) == 0
    err = capsys.readouterr().err
    assert err == NOTE.format(
        "kit transfer bundle IMAGE... DIR", "kit transfer bundle IMAGE... --dir DIR"
    )
    assert main(["transfer", "verify", str(tmp_path / "old")]) == 0
    assert main(["transfer", "bundle", str(image), "--dir", str(tmp_path / "new")]) == 0
    assert capsys.readouterr().err == "" and (tmp_path / "new" / "SHA256SUMS").is_file()
    assert main(["transfer", "bundle", str(image)]) == 1
    assert "give --dir DIR" in capsys.readouterr().err


@pytest.mark.parametrize("verb", ["down", "status"])
def test_vcluster_down_and_status_dash_dash_dir_still_work_with_a_note(verb, tmp_path, capsys):
    where = tmp_path / "none"
    extra = ["--dry-run"] if verb == "down" else ["--json"]
    new = main(["vcluster", verb, str(where), *extra])
    new_out, new_err = capsys.readouterr()
    assert new_err == ""
    assert main(["vcluster", verb, "--dir", str(where), *extra]) == new
    out, err = capsys.readouterr()
    assert out == new_out
    assert err == NOTE.format(f"kit vcluster {verb} --dir DIR", f"kit vcluster {verb} DIR")
    assert main(["vcluster", verb, str(where), "--dir", str(tmp_path / "other")]) == 1
    assert "both given" in capsys.readouterr().err


def test_vcluster_up_n_still_works_with_a_note(tmp_path, capsys, monkeypatch):
    import kit.commands.vcluster as command

    asked = []
    monkeypatch.setattr(command, "default_intel_mpi", lambda: None)
    monkeypatch.setattr(
        command, "preview", lambda name, nodes, *a, **k: asked.append(nodes) or ("10.9.9.0/24", [])
    )
    argv = ["vcluster", "up", "--dir", str(tmp_path / "vc"), "--dry-run"]
    assert main([*argv, "--nodes", "3"]) == 0 and capsys.readouterr().err == ""
    assert main([*argv, "3"]) == 0 and asked == [3, 3]
    assert capsys.readouterr().err == NOTE.format("kit vcluster up N", "kit vcluster up --nodes N")
    assert main(argv) == 1 and "give --nodes N" in capsys.readouterr().err


# --- help without the extras --------------------------------------------------------------------


@pytest.mark.parametrize("group", GROUPS)
def test_group_help_works_without_any_extra(group, tmp_path):
    code, out, err = kit_without([group, "--help"], OPTIONAL, tmp_path)
    assert (code, err) == (0, ""), err
    assert out.startswith(f"usage: kit {group}")
    group_parser = next(p for p in parsers(TREE) if p.prog == f"kit {group}")
    for leaf in leaves(group_parser):
        assert leaf.prog.split()[-1] in out


def test_image_help_without_the_convert_extra_names_it(tmp_path):
    code, out, err = kit_without(["image", "--help"], OPTIONAL, tmp_path)
    assert code == 0 and "convert, inspect need the [convert] extra" in flat(out)
    assert "pip install 'secure-site-kit[convert]'" in flat(out)
    code, out, err = kit_without(["image", "convert", "--help"], OPTIONAL, tmp_path)
    assert code == 0 and "Needs the [convert] extra" in out
    code, out, err = kit_without(["--help"], OPTIONAL, tmp_path)
    assert code == 0 and "secure-site-kit[convert]" in out and "secure-site-kit[transfer]" in out


def test_image_help_with_the_extra_says_nothing_is_missing(tmp_path):
    code, out, err = kit_without(["image", "--help"], (), tmp_path)
    assert code == 0 and "need the [convert] extra" in flat(out) and "not installed" not in out
