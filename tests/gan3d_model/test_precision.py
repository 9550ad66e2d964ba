"""bf16 models: float32 master weights, heads and elementwise layers, bfloat16 convolutions and
the layers that only move data (gan3d.model, gan3d.precision)."""

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from gan3d import model, precision  # noqa: E402
from gan3d.runtime import SettingsError  # noqa: E402

FP32_HEADS = {"generation", "auxiliary", "ecal", "g_relu", "latent", "image"}
# faster in float32 than in TensorFlow's bf16 kernels (docs/benchmarks.md)
FP32_ELEMENTWISE = (
    tf.keras.layers.LeakyReLU,
    tf.keras.layers.BatchNormalization,
    tf.keras.layers.Dropout,
)


@pytest.mark.parametrize("build", [model.generator, model.discriminator])
def test_bf16_model_keeps_fp32_variables_heads_and_parameters(build):
    tf.keras.utils.set_random_seed(3)
    fp32 = build("tiny")
    tf.keras.utils.set_random_seed(3)
    bf16 = build("tiny", "bf16")
    assert bf16.count_params() == fp32.count_params()
    assert all(
        v.dtype == tf.float32 for v in bf16.variables
    )  # master weights, BatchNorm statistics
    assert all(o.dtype == tf.float32 for o in tf.nest.flatten(bf16.outputs))
    for layer in bf16.layers:
        want = (
            "float32"
            if layer.name in FP32_HEADS or isinstance(layer, FP32_ELEMENTWISE)
            else "bfloat16"
        )
        assert layer.compute_dtype == want, layer.name
        if isinstance(layer, tf.keras.layers.BatchNormalization):
            assert all(v.dtype == tf.float32 for v in layer.weights)
    # the process-wide policy is left as it was
    assert tf.keras.mixed_precision.global_policy().name == "float32"
    # same weights, same maths, to bf16's 8-bit mantissa
    bf16.set_weights(fp32.get_weights())
    x = tf.random.stateless_normal((2,) + tuple(fp32.input_shape[1:]), [1, 2])
    if build is model.discriminator:
        x = tf.nn.relu(x) * 0.1
    outs = list(
        zip(tf.nest.flatten(fp32(x, training=False)), tf.nest.flatten(bf16(x, training=False)))
    )
    if build is model.discriminator:  # the cell sum reads the float32 input: exact
        np.testing.assert_array_equal(outs[2][0].numpy(), outs[2][1].numpy())
        outs = outs[:2]
    for a, b in outs:
        a, b = a.numpy(), b.numpy()
        assert not np.array_equal(a, b)  # it really computed in bf16
        np.testing.assert_allclose(b, a, rtol=0.05, atol=0.05 * np.abs(a).max())


def test_unknown_precision_is_refused():
    with pytest.raises(ValueError, match="unknown precision 'fp16'"):
        model.generator("tiny", "fp16")
    with pytest.raises(SettingsError, match="--precision 'int8'"):
        precision.model_precision("int8")


def test_bf16_needs_a_bf16_unit_unless_emulated():
    avx2 = frozenset({"avx2", "fma"})
    with pytest.raises(
        SettingsError,
        match="no bfloat16 unit.*fix: use --precision fp32, or --precision bf16-emulated",
    ):
        precision.check_supported("bf16", avx2)
    assert precision.check_supported("bf16-emulated", avx2) is None
    assert precision.check_supported("fp32", avx2) is None
    assert precision.check_supported("bf16", frozenset({"avx512_bf16"})) == "avx512_bf16"
    assert precision.check_supported("bf16", frozenset({"amx_bf16", "amx_tile"})) == "amx"
    assert precision.model_precision("bf16-emulated") == "bf16"


def test_a_bf16_models_frequency_domain_layer_computes_in_float32():
    """`fft` in a bf16 model (what a probe may choose where it beats bf16 convolutions): the layer
    computes in float32 (within float32 rounding of the float32 convolution, which bfloat16 is not)
    and hands float32 on; the model's other convolutions stay bfloat16."""
    tf.keras.utils.set_random_seed(3)
    forms = {**model.fixed_forms("bf16"), "d_conv2": "fft"}
    d = model.discriminator("tiny", "bf16", forms=forms)
    fft, direct = d.get_layer("d_conv2"), d.get_layer("d_conv3")
    assert (fft.compute_dtype, fft.kernel.dtype) == ("float32", tf.float32)
    assert direct.compute_dtype == "bfloat16"
    x = tf.random.stateless_normal((2, *fft.input_shape[1:]), seed=(4, 5))
    y = fft(x)
    want = tf.nn.conv3d(x, fft.kernel, [1] * 5, "SAME") + fft.bias
    assert y.dtype == tf.float32
    np.testing.assert_allclose(y.numpy(), want.numpy(), rtol=1e-4, atol=1e-4)
    fake, aux, _ = d(tf.random.stateless_uniform((2, 25, 25, 25, 1), seed=(6, 7)), training=True)
    assert np.isfinite(fake.numpy()).all() and np.isfinite(aux.numpy()).all()


def test_the_bf16_probe_times_the_frequency_domain_in_float32():
    """`--forms auto` in bf16 measures each layer's frequency-domain form as the model runs it:
    float32 kernel and compute (its kernel gradient is float32), beside the bfloat16 forms."""
    from gan3d import formprobe

    candidates = formprobe.tf_candidates("tiny", "bf16", 2)
    assert all("fft" in forms and len(forms) > 1 for forms in candidates.values())
    for layer in ("g_conv2", "d_conv2"):
        assert candidates[layer]["fft"]().dtype == np.float32
        assert candidates[layer]["direct"]().dtype.name == "bfloat16"
