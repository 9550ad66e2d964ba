"""gan3d.formcache reads a forms file through kit.schema: every defect of a damaged or edited file
is named by its key path in the one warning that says the file is not used."""

from __future__ import annotations

import json

from gan3d import formcache

ALLOWED = {"g_conv1": ("direct", "fft"), "d_conv2": ("direct", "packed")}
KEY = {"cpu_model": "Some CPU", "preset": "tiny"}


def _write(tmp_path, **doc):
    path = tmp_path / "a.json"
    path.write_text(json.dumps({"format": formcache.FORMAT, "key": KEY, "probe": {}, **doc}))
    return path


def test_a_forms_file_is_read_back_as_written(tmp_path):
    path = tmp_path / "b.json"
    forms = {"g_conv1": "fft", "d_conv2": "packed"}
    assert formcache.write(path, KEY, forms, probe={"rounds": 3}) == ""
    assert formcache.read(path, KEY, ALLOWED) == (forms, "")
    assert formcache.read(path, {**KEY, "preset": "full"}, ALLOWED)[1].endswith(
        "made for another machine or run (its key differs); not used, it is measured again"
    )


def test_every_defect_of_a_forms_file_is_named_in_one_warning(tmp_path):
    path = _write(tmp_path, format="gan3d-forms/9", forms={"g_conv1": "packed", "x_conv": "fft"})
    forms, warning = formcache.read(path, KEY, ALLOWED)
    assert forms is None and "\n" not in warning
    assert warning.startswith(f"layer forms cache {path} not used: {path}: invalid layer forms ")
    for named in (
        "format: 'gan3d-forms/9' is not allowed",
        "forms.g_conv1: 'packed' is not allowed (allowed: direct, fft)",
        "forms.x_conv: unknown key",
        "forms.d_conv2: missing required key",
    ):
        assert f"{path}: {named}" in warning
    assert warning.endswith("; fix: none needed, it is measured again")
