"""The site config is declared once, in the dataclasses of kit.site.model: SCHEMA is derived from
them, so a key, its doc and its default cannot drift apart, and the shipped configs load to the
Site they always did."""

from __future__ import annotations

import copy
import dataclasses
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml

from kit.schema import ABOUT, Field, Section, type_hints
from kit.site import load_site
from kit.site.model import SCHEMA, Site

REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted((REPO / "site-configs").glob("*.yaml"))
NOT_KEYS = {(Site, "path")}  # where a Site was loaded from: not in the file

# What an absent key was before the keys moved into the dataclasses: recorded here, apart from
# the code, so a changed default is a failing test rather than a silent change for every site.
DEFAULTS: dict[str, Any] = {
    "description": "",
    "modules": [],
    "scheduler": {"partition": None, "account": None, "mpi_plugin": None, "constraint": None},
    "node": {
        "numa_domains_snc": None,
        "clock_ghz_avx": None,
        "clock_ghz_max": None,
        "fp32_flop_per_cycle_per_core": None,
        "fp64_flop_per_cycle_per_core": None,
        "bf16_flop_per_cycle_per_core": None,
    },
    "host_mpi": {
        "library_dirs": [],
        "env": {},
        "soname": None,
        "library_version": None,
        "openmpi": None,
    },
    "container": {
        "binds": [],
        "join": True,
        "mpi_target": "/opt/hostmpi",
        "udocker": None,
        "apptainer": None,
    },
    "transfer": {
        "user": None,
        "port": 22,
        "jump_host": None,
        "keep_versions": 2,
        "direct_io": True,
    },
    "network": {"fabric": None, "islands": None, "island_nodes": None},
}
SUBSECTION_DEFAULTS = {
    ("host_mpi", "openmpi"): {
        "components": None,
        "help_files": None,
        "pmix_components": None,
        "mca": {},
        "allow_run_as_root": False,
    },
    ("container", "udocker"): {
        "mode": "P1",
        "executable": "udocker",
        "proot": "/usr/bin/proot",
        "tarball": None,
        "dir": "~/.udocker",
        "allow_root": False,
    },
    ("container", "apptainer"): {"executable": None, "options": [], "userns": False},
}


def _pairs(cls: type = Site, section: Section = SCHEMA, path: str = "") -> list[tuple]:
    """(key path, dataclass, dataclasses.Field or None, schema Field or None) for every key on
    either side, descending into each dataclass-valued field and its Section."""
    fields = {f.name: f for f in dataclasses.fields(cls) if (cls, f.name) not in NOT_KEYS}
    out = []
    for name in {**fields, **section.fields}:
        dc, spec = fields.get(name), section.fields.get(name)
        out.append((path + name, cls, dc, spec))
        hint = _bare(type_hints(cls)[name]) if dc else None
        if dataclasses.is_dataclass(hint) and spec and isinstance(spec.kind, Section):
            out += _pairs(typing.cast(type, hint), spec.kind, f"{path}{name}.")
    return out


def _bare(hint: Any) -> Any:
    """`X | None` as X."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if type(None) in typing.get_args(hint) and len(args) == 1 else hint


PAIRS = _pairs()


def test_every_dataclass_field_is_a_schema_key_and_every_key_a_field():
    assert len(PAIRS) > 50  # every section was walked, not just the top level
    one_sided = [path for path, _cls, dc, spec in PAIRS if dc is None or spec is None]
    assert not one_sided


@pytest.mark.parametrize("path,cls,dc,spec", PAIRS, ids=[p[0] for p in PAIRS])
def test_each_key_is_documented_and_declared_in_its_dataclass_field(path, cls, dc, spec: Field):
    about = dc.metadata.get(ABOUT)
    assert about is not None, f"{cls.__name__}.{dc.name} has no about(...) metadata"
    assert spec.doc == about.doc and spec.doc.strip() and "\n" not in spec.doc
    assert spec.check is about.check and spec.choices == about.choices
    assert (spec.positive, spec.minimum, spec.maximum) == (
        about.positive,
        about.minimum,
        about.maximum,
    )
    if about.section_check is not None:
        assert isinstance(spec.kind, Section) and spec.kind.check is about.section_check


@pytest.mark.parametrize("path,cls,dc,spec", PAIRS, ids=[p[0] for p in PAIRS])
def test_a_keys_default_is_its_dataclass_default(path, cls, dc, spec: Field):
    if dc.default is not dataclasses.MISSING:
        default = dc.default
    elif dc.default_factory is not dataclasses.MISSING:
        default = dc.default_factory()
    else:
        assert spec.required and spec.default is None
        return
    assert not spec.required and spec.default == default
    nullable = type(None) in typing.get_args(type_hints(cls)[dc.name])
    assert spec.nullable == nullable


def _expected(doc: dict[str, Any]) -> dict[str, Any]:
    """The Site a shipped config gave before: the file's values over the defaults above."""
    out = copy.deepcopy({k: v for k, v in DEFAULTS.items() if not isinstance(v, dict)})
    out |= {k: v for k, v in doc.items() if not isinstance(v, dict)}
    for section, defaults in DEFAULTS.items():
        if isinstance(defaults, dict):
            out[section] = {**copy.deepcopy(defaults), **doc[section]}
    for (section, key), defaults in SUBSECTION_DEFAULTS.items():
        if out[section][key] is not None:
            out[section][key] = {**defaults, **out[section][key]}
    return out


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_shipped_configs_load_to_the_site_they_always_did(path):
    site = load_site(path)
    got = dataclasses.asdict(site)
    assert got.pop("path") == path
    assert got == _expected(yaml.safe_load(path.read_text()))
    # equal is not the same type: a count stays an int, a figure written 96 becomes 96.0
    for _key, cls, dc, _spec in PAIRS:
        hint = _bare(type_hints(cls)[dc.name])
        value = _value_of(site, cls, dc.name)
        if value is not None and hint in (int, float, str, bool):
            assert type(value) is hint, (cls.__name__, dc.name, value)


def _value_of(site: Site, cls: type, name: str) -> Any:
    """The value of field ``name`` of the part of ``site`` that is a ``cls`` (None: no such part)."""
    parts: list[Any] = [site]
    while parts:
        part = parts.pop()
        if type(part) is cls:
            return getattr(part, name)
        parts += [v for v in vars(part).values() if dataclasses.is_dataclass(v)]
    return None


def test_numbers_in_a_string_map_become_strings_and_absent_sections_their_defaults(tmp_path):
    doc = yaml.safe_load((REPO / "site-configs" / "laptop.yaml").read_text())
    doc["host_mpi"] |= {"vendor": "openmpi", "env": {"OMP_NUM_THREADS": 4}}
    doc["host_mpi"]["openmpi"] = {"mca": {"btl_tcp_links": 2}}
    path = tmp_path / "numbers.yaml"
    path.write_text(yaml.safe_dump(doc))
    site = load_site(path)
    assert site.host_mpi.env == {"OMP_NUM_THREADS": "4"}
    assert site.host_mpi.openmpi is not None and site.host_mpi.openmpi.mca == {"btl_tcp_links": "2"}
    assert site.host_mpi.openmpi.allow_run_as_root is False and site.container.udocker is None
