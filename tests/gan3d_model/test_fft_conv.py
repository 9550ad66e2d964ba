"""Convolutions in the frequency domain are the reference convolutions: values and both
gradients.
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

tf = pytest.importorskip("tensorflow")

from gan3d import fft_conv, model  # noqa: E402
from tests.support.convs import value_and_grads  # noqa: E402


def _assert_same_as_tf_conv3d(x, w, padding):
    out_shape = tf.nn.conv3d(x, w, [1] * 5, padding).shape
    upstream = tf.random.stateless_normal(out_shape, [5, 6])
    ours = value_and_grads(lambda a, b: fft_conv.fft_conv3d(a, b, padding), x, w, upstream)
    ref = value_and_grads(lambda a, b: tf.nn.conv3d(a, b, [1] * 5, padding), x, w, upstream)
    for name, a, b in zip(("output", "input-gradient", "weight-gradient"), ours, ref):
        assert a.shape == b.shape, name
        scale = float(tf.reduce_max(tf.abs(b))) or 1.0
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=0, atol=2e-5 * scale, err_msg=name)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    spatial=st.tuples(*[st.integers(1, 9)] * 3),
    ksize=st.tuples(*[st.integers(1, 6)] * 3),
    channels=st.tuples(st.integers(1, 5), st.integers(1, 5)),
    batch=st.integers(1, 3),
    padding=st.sampled_from(["SAME", "VALID"]),
    seed=st.integers(0, 2**16),
)
def test_fft_conv3d_equals_tf_conv3d_and_its_gradients(
    spatial, ksize, channels, batch, padding, seed
):
    """Any sizes, odd and even kernels, SAME and VALID (a VALID kernel no larger than the input)."""
    if padding == "VALID":
        ksize = tuple(min(k, s) for k, s in zip(ksize, spatial))
    x = tf.random.stateless_normal((batch,) + spatial + (channels[0],), [seed, 1])
    w = tf.random.stateless_normal(ksize + channels, [seed, 2])
    _assert_same_as_tf_conv3d(x, w, padding)


@pytest.mark.parametrize("name", sorted(model.FFT_LAYERS))
def test_fft_layers_of_the_full_models_at_their_own_sizes(name):
    """The full model's own layer shapes (25^3 SAME, 27^3 VALID, the generator's 18x18x16)."""
    m = model.discriminator("full") if name.startswith("d_") else model.generator("full")
    layer = m.get_layer(name)
    assert isinstance(layer, fft_conv.FFTConv3D)
    x = tf.random.stateless_normal((2,) + tuple(layer.input_shape[1:]), [3, 4])
    _assert_same_as_tf_conv3d(x, layer.kernel, layer.padding.upper())


def test_the_layer_runs_transforms_not_a_convolution():
    layer = fft_conv.FFTConv3D(4, 5, padding="same")
    x = tf.zeros((1, 9, 9, 9, 3))
    graph = tf.function(lambda t: layer(t)).get_concrete_function(x).graph
    types = [op.type for op in graph.get_operations()]
    assert (
        types.count("BatchMatMulV2") + types.count("MatMul") >= 8
    )  # 3 + 3 axes of DFTs, the mixing
    assert not set(types) & {"Conv3D", "Conv3DV2", "Pad"}  # the zero padding is in the DFTs


def test_fft_conv3d_layer_rejects_what_it_does_not_implement():
    with pytest.raises(ValueError, match="stride 1"):
        fft_conv.FFTConv3D(4, 3, strides=2)(tf.zeros((1, 5, 5, 5, 2)))
    with pytest.raises(ValueError, match="float32"):
        fft_conv.FFTConv3D(4, 3, dtype="mixed_bfloat16")(tf.zeros((1, 5, 5, 5, 2)))
