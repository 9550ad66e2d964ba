"""The dataclass-derived sections read the same annotations on the kit core's Python 3.9 floor,
where `X | None` cannot be evaluated, as on newer Pythons (the 3.9 path run here, compared)."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from kit.mpi import pair_reader
from kit.scale import plan
from kit.schema import evaluated_hints, section_of
from kit.site import model
from kit.slurm import spec
from kit.study import ledger


def _dataclasses() -> list[type]:
    found = []
    for module in (plan, spec, pair_reader, ledger, model):
        for value in vars(module).values():
            if (
                dataclasses.is_dataclass(value)
                and isinstance(value, type)
                and value.__module__ == module.__name__
            ):
                found.append(value)
    return found


@pytest.mark.parametrize("cls", _dataclasses(), ids=lambda c: f"{c.__module__}.{c.__name__}")
def test_annotations_evaluate_alike_without_the_union_operator(cls):
    assert evaluated_hints(cls) == typing.get_type_hints(cls)


def test_a_plan_section_derives_the_same_from_either_evaluation(monkeypatch):
    from kit import schema

    want = section_of(plan.RunSpec)
    monkeypatch.setattr(schema, "type_hints", evaluated_hints)
    assert section_of(plan.RunSpec) == want


def test_the_site_schema_derives_the_same_from_either_evaluation(monkeypatch):
    from kit import schema

    want = section_of(model.Site, skip=("path",), first=("name", "description"))
    assert want == model.SCHEMA
    monkeypatch.setattr(schema, "type_hints", evaluated_hints)
    assert section_of(model.Site, skip=("path",), first=("name", "description")) == want
