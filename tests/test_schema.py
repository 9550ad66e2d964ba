"""kit.schema: one mechanism for the kit's YAML and JSON files (lines for YAML, key paths for JSON)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kit.errors import KitError
from kit.schema import (
    MAX_PROBLEMS,
    Bad,
    Field,
    Items,
    Names,
    Section,
    about,
    check_value,
    check_yaml,
    record,
    section_of,
)


@dataclass(frozen=True)
class Run:
    name: str
    nodes: int
    note: str | None = None
    tags: tuple[str, ...] = ()


RUN = section_of(Run, fields={"nodes": Field("int", positive=True)})
SWEEP = Section(
    {
        "runs": Field(Items(Field(RUN), min_len=1)),
        "env": Field(Names(Field("str")), required=False, default={}),
        "mode": Field("str", choices=("fast", "slow")),
        "even": Field(
            "int",
            required=False,
            default=0,
            check=lambda v: Bad("is odd", "give 2, 4, ...") if v % 2 else None,
        ),
    },
    check=lambda d: (
        [("mode", Bad("slow needs env", "name one"))]
        if d["mode"] == "slow" and not d["env"]
        else []
    ),
)


@dataclass(frozen=True)
class Limits:
    cores: int = field(metadata=about("cores per node", positive=True))
    spare: int = field(default=0, metadata=about("cores left idle", maximum=8))


@dataclass(frozen=True)
class Host:
    name: str = field(metadata=about("the host's name"))
    limits: Limits = field(
        metadata=about(
            "what the host has",
            section_check=lambda d: (
                [("spare", Bad("leaves no core"))] if d["spare"] >= d["cores"] else []
            ),
        )
    )
    note: str = field(default="", metadata=about("a line on it"))
    env: dict[str, str] = field(
        default_factory=dict, metadata=about("set for the job", kind="map[str,str]")
    )
    backup: Limits | None = None


HOST = section_of(Host, first=("name", "note"))


def test_about_metadata_declares_a_keys_doc_checks_and_kind_where_its_field_is():
    assert list(HOST.fields) == ["name", "note", "limits", "env", "backup"]
    limits = HOST.fields["limits"].kind
    assert isinstance(limits, Section) and limits.check is not None
    assert limits.fields["cores"].positive and limits.fields["cores"].doc == "cores per node"
    assert limits.fields["spare"].maximum == 8 and limits.fields["spare"].default == 0
    assert HOST.fields["env"].kind == "map[str,str]" and HOST.fields["env"].default == {}
    assert HOST.fields["backup"].nullable and not HOST.fields["backup"].required
    with pytest.raises(KitError, match=r"h.yaml:4: limits.spare: leaves no core"):
        check_yaml("name: a\nlimits:\n  cores: 2\n  spare: 2\n", "h.yaml", HOST, what="host")
    with pytest.raises(KitError, match=r"limits.spare: must be at most 8, got 9"):
        check_yaml("name: a\nlimits: {cores: 20, spare: 9}\n", "h.yaml", HOST, what="host")


def test_record_builds_nested_sections_and_a_string_maps_numbers_as_strings():
    text = "name: a\nlimits: {cores: 4}\nenv: {N: 4, X: 1.5, Y: b}\nbackup: null\n"
    host = record(Host, check_yaml(text, "h.yaml", HOST, what="host"))
    assert host == Host("a", Limits(4, 0), "", {"N": "4", "X": "1.5", "Y": "b"}, None)
    text = text.replace("backup: null", "backup: {cores: 2, spare: 1}")
    assert record(Host, check_yaml(text, "h.yaml", HOST, what="host")).backup == Limits(2, 1)


def test_a_section_derived_from_a_dataclass_builds_the_record():
    data = check_yaml("name: a\nnodes: 2\ntags: [x, y]\n", "r.yaml", RUN, what="run")
    assert record(Run, data) == Run("a", 2, None, ("x", "y"))
    assert RUN.fields["note"].nullable and not RUN.fields["note"].required
    assert RUN.fields["name"].required and RUN.fields["nodes"].positive


def test_a_yaml_problem_names_file_line_key_path_and_the_checks_fix():
    text = "mode: fast\neven: 3\nruns:\n  - {name: a, nodes: 1}\n"
    with pytest.raises(KitError) as err:
        check_yaml(text, "s.yaml", SWEEP, what="sweep", fix="see the docs")
    assert str(err.value) == "s.yaml:2: even: is odd; fix: give 2, 4, ..."
    assert err.value.where == "s.yaml:2" and err.value.fix == "give 2, 4, ..."


def test_a_nested_list_entry_is_named_by_its_index_and_line():
    text = "mode: fast\nruns:\n  - {name: a, nodes: 1}\n  - name: b\n    nodes: 0\n"
    with pytest.raises(
        KitError, match=r"^s.yaml:5: runs\[1\]\.nodes: must be greater than 0, got 0; fix: redo$"
    ):
        check_yaml(text, "s.yaml", SWEEP, what="sweep", fix="redo")


def test_a_yaml_merge_key_is_named_with_its_line_and_the_fix():
    """`<<: *x` would copy keys with no line of their own: the kit's files spell their keys out."""
    text = "mode: fast\nbase: &b {name: a, nodes: 1}\nruns:\n  - <<: *b\n    nodes: 2\n"
    with pytest.raises(KitError) as err:
        check_yaml(text, "s.yaml", SWEEP, what="sweep")
    assert "s.yaml:4: runs[0]: a YAML merge key (<<); fix: write the merged keys out" in str(
        err.value
    )


def test_json_problems_are_named_by_key_path_without_a_line():
    doc = {"mode": "fats", "runs": [{"name": "a", "nodes": 1, "nodez": 2}], "env": {"A": 1}}
    with pytest.raises(KitError) as err:
        check_value(doc, "r.json", SWEEP, what="results", fix="rerun")
    text = str(err.value)
    assert text.startswith("r.json: invalid results (3 problem(s)): ") and text.endswith(
        "; fix: rerun"
    )
    assert "r.json: runs[0].nodez: unknown key; did you mean 'nodes'?" in text
    assert "r.json: env.A: expected a string, got int 1" in text
    assert "r.json: mode: 'fats' is not allowed; did you mean 'fast'?" in text


def test_a_cross_field_problem_is_named_by_its_key_line():
    text = "runs: [{name: a, nodes: 1}]\n[1]: 2\nmode: slow\n"
    with pytest.raises(KitError) as err:
        check_yaml(text, "s.yaml", SWEEP, what="sweep")
    assert "s.yaml:2: [1]: keys must be strings" in str(err.value)
    with pytest.raises(KitError, match=r"^s.yaml:2: mode: slow needs env; fix: name one$"):
        check_yaml("runs: [{name: a, nodes: 1}]\nmode: slow\n", "s.yaml", SWEEP, what="sweep")


def test_an_open_section_passes_over_keys_it_does_not_declare():
    sec = Section({"a": Field("int")}, open=True)
    assert check_value({"a": 1, "written_by_a_newer_kit": [1]}, "f.json", sec, what="file") == {
        "a": 1
    }


def test_problems_are_bounded_however_many_the_file_holds():
    text = "mode: fast\nruns:\n" + "".join(f"  - {{name: r{i}, nodes: -1}}\n" for i in range(5000))
    with pytest.raises(KitError) as err:
        check_yaml(text, "s.yaml", SWEEP, what="sweep")
    assert f"({MAX_PROBLEMS}+ problem(s))" in str(err.value) and len(str(err.value)) < 2000


# Any YAML tree: scalars of every kind YAML writes, lists and mappings with any keys.
_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
_trees = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(["runs", "env", "mode", "even", "name", "nodes", "x"]) | _scalars,
            inner,
            max_size=5,
        )
    ),
    max_leaves=25,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_trees)
def test_any_tree_gives_a_record_or_one_bounded_line(tree):
    try:
        text = yaml.safe_dump(tree)
    except yaml.YAMLError:
        return
    for check, doc in ((check_yaml, text), (check_value, tree)):
        try:
            data = check(doc, "t.yaml", SWEEP, what="sweep", fix="fix it")
        except KitError as exc:
            line = str(exc)
            assert "\n" not in line and len(line) < 5000 and line.startswith("t.yaml")
        else:
            assert set(data) == set(SWEEP.fields) and data["runs"]


def test_an_int_field_with_its_own_maximum_takes_counts_past_a_billion_and_names_it_exactly():
    """INT_MAX bounds a count without a maximum; a field that states one (a 32-bit seed, a byte
    count) is bounded by it instead, and its refusal gives the maximum digit for digit."""
    seed = Section({"seed": Field("int", maximum=2**32 - 1)})
    assert (
        check_value({"seed": 3_000_000_000}, "m.json", seed, what="meta")["seed"] == 3_000_000_000
    )
    with pytest.raises(KitError) as exc:
        check_value({"seed": 2**32}, "m.json", seed, what="meta")
    assert str(exc.value) == "m.json: seed: must be at most 4294967295, got 4294967296"
    with pytest.raises(KitError, match="more than 1000000000"):
        check_value({"n": 2 * 10**9}, "m.json", Section({"n": Field("int")}), what="meta")


def test_an_empty_key_is_shown_quoted_in_its_key_path():
    names = Section({"env": Field("map[str,str]"), "vars": Field(Names(Field("int")))})
    with pytest.raises(KitError) as exc:
        check_value({"env": {}, "vars": {"": "x"}}, "f.json", names, what="file")
    assert str(exc.value).startswith("f.json: vars.'': expected an integer, got str 'x'")
