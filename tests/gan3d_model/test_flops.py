"""FLOP accounting: the analytic count agrees with TensorFlow's profiler on the same step."""

import json

import pytest

tf = pytest.importorskip("tensorflow")

from gan3d import flops, model, step  # noqa: E402


def _profile(preset: str, batch: int):
    # direct convolutions (fft=False): the profiler counts those, not an FFT's arithmetic
    s = step.TrainStep(
        model.generator(preset, fft=False),
        model.discriminator(preset, fft=False),
        config=step.StepConfig(),
    )
    graph = s.concrete_train_function(batch).graph
    return graph, flops.profiler_flops(graph)


@pytest.mark.parametrize("preset,batch", [("tiny", 3), ("full", 2)])
def test_analytic_count_agrees_with_tf_profiler(preset, batch):
    graph, by_type = _profile(preset, batch)
    ours = flops.step_flops(preset, batch)
    conv_matmul = sum(v for k, v in by_type.items() if k in flops.MATMUL_CONV_OPS)
    assert set(flops.MATMUL_CONV_OPS) <= set(by_type)
    # the layers' MACs, plus the zeros packed forwards multiply: exactly what the graph's ops do
    executed = flops.executed_step_flops(preset, batch)
    assert executed > ours["total"]  # the packed layers are there, and their overhead is counted
    assert abs(conv_matmul - executed) <= 1e-3 * executed
    # everything TF counts (plus elementwise work) within 2%
    assert abs(sum(by_type.values()) - executed) <= 0.02 * executed
    # gradient functions also build ops that never run (input-gradient of D's first layer in
    # the D steps, D's weight gradients in the G steps): they must not be counted, and they
    # are exactly what the analytic model leaves out
    everything = flops.profiler_flops(graph, executed_only=False)
    dead = sum(v for k, v in everything.items() if k in flops.MATMUL_CONV_OPS) - conv_matmul
    d_layers = flops.model_forward_flops(model.discriminator(preset, fft=False))
    first = sum(r.forward for r in d_layers if r.takes_model_input)
    assert dead == 2 * batch * first + 2 * batch * sum(r.forward for r in d_layers)


def test_step_phases_add_up_and_scale_with_batch():
    one, sixteen = flops.step_flops("full", 1), flops.step_flops("full", 16)
    assert sum(one[p] for p in flops.PHASES) == one["total"] == one["forward"] + one["backward"]
    assert all(sixteen[k] == 16 * one[k] for k in one)
    # 3dgan.md: forward cost 255.7 M MAC (G) and 784.9 M MAC (D) per shower; ~19 GFLOP a step
    layers = {
        m.name: sum(r.forward for r in flops.model_forward_flops(m))
        for m in (model.generator("full"), model.discriminator("full"))
    }
    assert round(layers["generator"] / 2e6, 1) == 255.7
    assert round(layers["discriminator"] / 2e6, 1) == 784.9
    assert 18e9 < one["total"] < 20e9
    assert one["generate_fakes"] == layers["generator"]


def test_cli_prints_json(capsys):
    assert flops.main(["--preset", "tiny", "--batch-size", "4"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == flops.step_flops("tiny", 4)
    with pytest.raises(SystemExit):
        flops.main(["--preset", "huge"])
    assert "choose one of" in capsys.readouterr().err
