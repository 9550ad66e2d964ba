"""The probe weighs each convolution's forms by the passes one training step runs of it
(gan3d.formprobe.step_passes): counted here in the step's own traced graph, where the gradients
no update needs are left out as TensorFlow's graph pruning leaves them out; and the whole steps
that settle the frequency domain, built and timed for real."""

from __future__ import annotations

import collections

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from gan3d import formprobe, model, step  # noqa: E402

KINDS = {"Conv3D": None, "Conv3DBackpropInputV2": "input", "Conv3DBackpropFilterV2": "kernel"}


def _live_ops(graph) -> list:
    """The ops the step's outputs or its variable updates depend on (what runs)."""
    roots = [t.op for t in graph.outputs] + [
        op for op in graph.get_operations() if op.type.startswith(("Assign", "ResourceApply"))
    ]
    seen, stack = set(), list(roots)
    while stack:
        op = stack.pop()
        if op.name in seen:
            continue
        seen.add(op.name)
        stack += [t.op for t in op.inputs] + list(op.control_inputs)
    return [op for op in graph.get_operations() if op.name in seen]


def test_step_passes_count_the_convolutions_one_step_runs():
    direct = dict.fromkeys(model.LAYER_FORMS, "direct")  # TensorFlow's own gradients: named ops
    s = step.TrainStep(
        model.generator("tiny", forms=direct),
        model.discriminator("tiny", forms=direct),
        config=step.StepConfig(seed=1),
    )
    counted: collections.Counter = collections.Counter()
    for op in _live_ops(s.concrete_train_function(2).graph):
        if op.type in KINDS:
            layer = next(part for part in op.name.split("/") if "_conv" in part)
            counted[layer, KINDS[op.type]] += 1
    for layer in model.LAYER_FORMS:
        passes = formprobe.step_passes(layer)
        times = formprobe.step_share_times(layer)
        assert times == (2 if layer.startswith("d_") else 1)  # D's passes are the step's halved
        want = {
            None: times * len(passes),
            "input": times * sum("input" in p for p in passes),
            "kernel": times * sum("kernel" in p for p in passes),
        }
        assert {kind: counted[layer, kind] for kind in want} == want, layer


def test_whole_steps_run_and_are_timed_for_real_with_the_folded_first_layer():
    """`tf_steps` builds real training steps (tiny preset) for each set of forms, one of them with
    the depth-folded first layer; `check_by_steps` times them when the layer probe's saving is
    small, and keeps one of the two sets."""
    fft = {**model.fixed_forms("fp32"), "d_conv1": "fft"}
    folded = {**fft, "d_conv1": "folded"}
    # a layer probe whose frequency domain saves 1% of the convolutions: the steps decide
    seconds = {layer: {form: [0.010]} for layer, form in fft.items()}
    seconds["d_conv1"]["folded"] = [0.0101]
    probed = formprobe.Probe(fft, seconds, 1, 0.5)
    assert formprobe.without_frequency_domain(probed) == folded
    steps, built = formprobe.tf_steps("tiny", "fp32", 2), {}

    def keeping(sets):
        built.update(steps(sets))
        return built

    checked = formprobe.check_by_steps(probed, keeping)
    losses = {name: fn() for name, fn in built.items()}  # each set's step trains: a finite loss
    assert len(losses) == 2 and all(np.isfinite(v) for v in losses.values()), losses
    assert checked.steps is not None and checked.steps["kept"] in (
        formprobe.CHOSEN,
        formprobe.WITHOUT_FFT,
    )
    for name in (formprobe.CHOSEN, formprobe.WITHOUT_FFT):
        assert len(checked.steps[name]) == formprobe.STEP_ROUNDS
        assert all(t > 0 for t in checked.steps[name])
    assert checked.forms == (fft if checked.steps["kept"] == formprobe.CHOSEN else folded)
