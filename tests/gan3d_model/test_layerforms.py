"""`gan3d train --forms`: the choice from the cache, a probe or a fixed table, and the cache's
refusals (another key, a damaged file, forms a layer cannot take, a file that is not the kit's).
The probe is injected (it counts its calls); the real one runs in tests/gan3d_train/test_layer_forms.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from gan3d import formcache, formprobe, layerforms, model  # noqa: E402

SHAPE = layerforms.RunShape("tiny", "fp32", 4, 1, 2, 1)


class CountingProbe:
    """Stands in for the timing only: returns a fixed choice and counts how often it was asked."""

    def __init__(self, forms: dict[str, str]) -> None:
        self.forms, self.calls = forms, 0

    def __call__(self) -> formprobe.Probe:
        self.calls += 1
        seconds = {name: {form: [0.01]} for name, form in self.forms.items()}
        return formprobe.Probe(dict(self.forms), seconds, 1, 0.5)


def _measured() -> dict[str, str]:
    forms = model.fixed_forms("fp32", fft=False)
    forms.update(d_conv3="fft", g_conv4="fft", d_conv4="direct")
    return forms


def _choose(tmp_path: Path, probe: CountingProbe, mode: str = "auto", shape=SHAPE, **kw):
    return layerforms.choose_forms(
        mode, shape, run_probe=probe, cache_directory=tmp_path / "cache", **kw
    )


def _only_file(tmp_path: Path) -> Path:
    (path,) = (tmp_path / "cache").iterdir()
    return path


def test_a_probes_choice_is_cached_and_the_next_run_with_the_same_key_reuses_it(tmp_path):
    probe = CountingProbe(_measured())
    first = _choose(tmp_path, probe)
    assert first.source == "probe" and first.forms == _measured() and probe.calls == 1
    assert first.record()["probe"]["median_ms"]["d_conv3"] == {"fft": 10.0}
    path = _only_file(tmp_path)
    assert first.cache_file == str(path) and formcache.FILE_NAME.fullmatch(path.name)
    doc = json.loads(path.read_text())
    assert doc["key"]["cpu_model"] and doc["key"]["tensorflow"].startswith("2.")
    assert doc["key"]["batch_per_rank"] == 4 and doc["forms"] == _measured()

    again = _choose(tmp_path, probe)
    assert (again.source, again.forms, again.probe, probe.calls) == ("cache", _measured(), None, 1)
    assert not again.warnings
    # --forms probe measures whatever the cache holds
    assert _choose(tmp_path, probe, "probe").source == "probe" and probe.calls == 2


def test_another_batch_threads_or_precision_is_another_key(tmp_path):
    probe = CountingProbe(_measured())
    _choose(tmp_path, probe)
    for other in (
        layerforms.RunShape("tiny", "fp32", 8, 1, 2, 1),
        layerforms.RunShape("tiny", "fp32", 4, 2, 2, 1),
        layerforms.RunShape("tiny", "fp32", 4, 1, 2, 2),
    ):
        assert _choose(tmp_path, probe, shape=other).source == "probe"
    assert probe.calls == 4 and len(list((tmp_path / "cache").iterdir())) == 4
    bf16 = CountingProbe(model.fixed_forms("bf16"))
    got = _choose(tmp_path, bf16, shape=layerforms.RunShape("tiny", "bf16", 4, 1, 2, 1))
    assert got.source == "probe" and bf16.calls == 1 and "fft" not in got.forms.values()


def test_itex_kernels_running_the_model_are_another_key(tmp_path, monkeypatch):
    """ITEX's kernels replace oneDNN's: forms measured without them are not reused with them."""
    from gan3d import itex

    probe = CountingProbe(_measured())
    _choose(tmp_path, probe)
    library = "libitex_cpu_internal_avx512.so"
    seen = itex.ItexState(True, True, "2.15.0.0", "CPU AVX512", library)
    monkeypatch.setattr(itex, "seen_here", lambda: seen)
    assert _choose(tmp_path, probe).source == "probe" and probe.calls == 2
    keys = [json.loads(f.read_text())["key"]["itex"] for f in (tmp_path / "cache").iterdir()]
    assert sorted(keys, key=str) == sorted([None, library], key=str)
    assert _choose(tmp_path, probe).source == "cache" and probe.calls == 2


def test_a_cache_file_with_another_key_is_refused_with_a_warning_and_measured_again(tmp_path):
    probe = CountingProbe(_measured())
    _choose(tmp_path, probe)
    path = _only_file(tmp_path)
    doc = json.loads(path.read_text())
    doc["key"]["cpu_model"] = "Some Other CPU"  # copied from another machine
    doc["forms"] = dict.fromkeys(doc["forms"], "direct")
    path.write_text(json.dumps(doc))
    got = _choose(tmp_path, probe)
    assert got.source == "probe" and got.forms == _measured() and probe.calls == 2
    (warning,) = got.warnings
    assert str(path) in warning and "key differs" in warning and "\n" not in warning
    assert json.loads(path.read_text())["key"]["cpu_model"] != "Some Other CPU"  # replaced


@pytest.mark.parametrize(
    "damage,replaced",
    [
        (lambda doc: '{"format": "gan3d-forms/1", "key": {', False),  # truncated
        (lambda doc: json.dumps({**doc, "forms": {**doc["forms"], "g_conv1": "packed"}}), True),
        (lambda doc: json.dumps({**doc, "forms": {"d_conv1": "fft"}}), True),
        (lambda doc: json.dumps({**doc, "format": "gan3d-forms/9"}), True),
        (lambda doc: "[]", False),
    ],
    ids=["truncated", "a-form-the-layer-cannot-take", "layers-missing", "unknown-format", "array"],
)
def test_a_damaged_cache_file_is_never_trusted(tmp_path, damage, replaced):
    probe = CountingProbe(_measured())
    _choose(tmp_path, probe)
    path = _only_file(tmp_path)
    path.write_text(damage(json.loads(path.read_text())))
    got = _choose(tmp_path, probe)
    assert got.source == "probe" and probe.calls == 2
    assert str(path) in got.warnings[0] and "not used" in got.warnings[0]
    if replaced:  # a forms file of the kit's (its format says so): replaced by this choice
        assert got.cache_file == str(path) and json.loads(path.read_text())["forms"] == got.forms
    else:  # not recognisably the kit's: kept, and said so
        assert got.cache_file is None and "left as it is" in got.warnings[1]


def test_a_file_that_is_not_a_forms_file_is_left_as_it_is(tmp_path):
    probe = CountingProbe(_measured())
    _choose(tmp_path, probe)
    path = _only_file(tmp_path)
    path.write_text("someone's notes\n")
    got = _choose(tmp_path, probe)
    assert got.source == "probe" and got.cache_file is None
    assert path.read_text() == "someone's notes\n"
    assert any("left as it is" in w for w in got.warnings)
    target = tmp_path / "elsewhere.json"
    target.write_text("{}")
    path.unlink()
    path.symlink_to(target)  # a link is not replaced either, nor its target written
    got = _choose(tmp_path, probe)
    assert path.is_symlink() and target.read_text() == "{}" and got.cache_file is None


def test_an_unwritable_cache_costs_a_warning_not_the_run(tmp_path):
    (tmp_path / "cache").write_text("a file where the directory would be")
    got = _choose(tmp_path, CountingProbe(_measured()))
    assert got.source == "probe" and got.forms == _measured() and got.cache_file is None
    assert any("not written" in w for w in got.warnings)


def test_fixed_modes_never_probe_and_give_the_same_forms_everywhere(tmp_path):
    probe = CountingProbe(_measured())
    fft = _choose(tmp_path, probe, "fft")
    assert fft.forms == model.fixed_forms("fp32") and fft.source.startswith("fixed table")
    assert {n for n, f in fft.forms.items() if f == "fft"} == model.FFT_LAYERS
    direct = _choose(tmp_path, probe, "direct")
    assert "fft" not in direct.forms.values() and direct.forms["d_conv2"] == "packed"
    assert probe.calls == 0 and not (tmp_path / "cache").exists()


def test_every_rank_takes_rank_0s_choice(tmp_path):
    """Rank 1 reads no cache and writes none; it builds what rank 0's share hands it."""
    rank0 = _measured()
    probe = CountingProbe(model.fixed_forms("fp32"))  # rank 1's own timings chose otherwise
    shared = []

    def share(value):
        shared.append(value)
        return None if len(shared) == 1 else rank0  # rank 0 had no cache, then probed

    got = _choose(tmp_path, probe, rank=1, share=share)
    assert got.forms == rank0 and probe.calls == 1 and not (tmp_path / "cache").exists()
    assert shared == [None, model.fixed_forms("fp32")]


def test_a_model_is_built_in_the_forms_named_and_refuses_forms_a_layer_cannot_take():
    forms = _measured()
    g = model.generator("tiny", forms=forms)
    d = model.discriminator("tiny", forms=forms)
    for name, form in forms.items():
        net = g if name.startswith("g_") else d
        assert type(net.get_layer(name)) is model.FORM_CLASSES[form], name
    with pytest.raises(ValueError, match="g_conv1 cannot run as 'packed'"):
        model.generator("tiny", forms={**forms, "g_conv1": "packed"})
    with pytest.raises(ValueError, match="g_conv1 cannot run as 'col2im' in bf16"):
        model.generator("tiny", "bf16", forms={**model.fixed_forms("bf16"), "g_conv1": "col2im"})
    with pytest.raises(ValueError, match="expected exactly the layers"):
        model.generator("tiny", forms={"g_conv1": "direct"})


@pytest.mark.parametrize(
    "precision, forms, keras_batch_norm",
    [
        ("fp32", {"g_conv1": "direct", "g_conv2": "direct", "g_conv4": "fft"}, False),
        ("bf16", {"g_conv1": "fft", "g_conv2": "fft", "g_conv3": "fft"}, False),
        ("fp32", {}, True),  # a file saved before BatchNorm was folded (Keras' own class)
    ],
)
def test_a_generator_weights_file_loads_whatever_forms_saved_it(
    tmp_path, precision, forms, keras_batch_norm
):
    """Keras names a .weights.h5 file's weights by layer class, so a run whose probe chose other
    forms than the built-in ones wrote a file the built-in model cannot load; gan3d validate builds
    the generator in the forms the file was saved from (model.generator_for_weights)."""
    tf.keras.utils.set_random_seed(4)
    cls = tf.keras.layers.BatchNormalization if keras_batch_norm else model.BATCH_NORM
    with model.batch_norm_class(cls):
        saved = model.generator("tiny", precision, forms={**model.fixed_forms(precision), **forms})
    path = str(tmp_path / "generator.weights.h5")
    saved.save_weights(path)
    with pytest.raises(ValueError):
        model.generator("tiny", precision).load_weights(path)  # the built-in forms do not fit
    loaded = model.generator_for_weights(path, "tiny", precision)
    loaded.load_weights(path)
    z = tf.random.stateless_normal((2, model.get_preset("tiny").latent_dim), seed=(1, 2))
    np.testing.assert_array_equal(loaded(z).numpy(), saved(z).numpy())
