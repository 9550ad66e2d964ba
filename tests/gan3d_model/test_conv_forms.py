"""The faster convolutions are the reference convolutions: values and gradients."""
import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from gan3d import conv_forms, model  # noqa: E402


def _value_and_grads(conv, x, w, upstream):
    """Output and both gradients of sum(conv(x, w) * upstream): what a layer's backprop sees."""
    with tf.GradientTape() as tape:
        tape.watch([x, w])
        y = conv(x, w)
        loss = tf.reduce_sum(y * upstream)
    return (y,) + tuple(tape.gradient(loss, [x, w]))


@pytest.mark.parametrize("ksize,cout", [((5, 5, 5), 4), ((3, 4, 5), 3)])
def test_image_conv3d_matches_tf_conv3d_and_its_gradients(ksize, cout):
    x = tf.random.stateless_normal((2, 9, 8, 7, 1), [1, 2])
    w = tf.random.stateless_normal(ksize + (1, cout), [3, 4])
    upstream = tf.random.stateless_normal((2, 9, 8, 7, cout), [5, 6])

    ours = _value_and_grads(conv_forms.image_conv3d, x, w, upstream)
    ref = _value_and_grads(lambda a, b: tf.nn.conv3d(a, b, [1] * 5, "SAME"), x, w, upstream)
    for a, b in zip(ours, ref):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-4)


def test_discriminator_first_layer_is_a_plain_conv3d_with_same_parameters():
    d = model.discriminator("full")
    layer = d.get_layer("d_conv1")
    assert isinstance(layer, tf.keras.layers.Conv3D) and isinstance(layer, conv_forms.ImageConv3D)
    assert layer.count_params() == 4_032
    ref = tf.keras.layers.Conv3D(32, (5, 5, 5), padding="same")
    x = tf.random.stateless_uniform((2, 25, 25, 25, 1), [7, 8])
    ref(x)
    ref.set_weights(layer.get_weights())
    np.testing.assert_allclose(layer(x).numpy(), ref(x).numpy(), rtol=1e-5, atol=1e-6)


def test_image_conv3d_rejects_what_it_does_not_implement():
    with pytest.raises(ValueError, match="1-channel"):
        conv_forms.ImageConv3D(4, 3, padding="same")(tf.zeros((1, 5, 5, 5, 2)))


@pytest.mark.parametrize("ksize,cin,cout", [((5, 5, 5), 6, 3), ((3, 5, 1), 2, 4)])
def test_same_conv3d_is_zero_padding_then_valid_conv_with_its_gradients(ksize, cin, cout):
    x = tf.random.stateless_normal((2, 9, 8, 7, cin), [1, 2])
    w = tf.random.stateless_normal(ksize + (cin, cout), [3, 4])
    upstream = tf.random.stateless_normal((2, 9, 8, 7, cout), [5, 6])
    pads = [[0, 0]] + [[(k - 1) // 2] * 2 for k in ksize] + [[0, 0]]

    ours = _value_and_grads(conv_forms.same_conv3d, x, w, upstream)
    ref = _value_and_grads(lambda a, b: tf.nn.conv3d(tf.pad(a, pads), b, [1] * 5, "VALID"),
                           x, w, upstream)
    for a, b in zip(ours, ref):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-4)


def test_discriminator_fused_layers_equal_reference_padding_plus_valid_conv():
    d = model.discriminator("tiny")
    x = tf.random.stateless_uniform((2, 25, 25, 25, d.get_layer("d_conv2").input_shape[-1]), [7, 8])
    for name in ("d_conv2", "d_conv3"):
        layer = d.get_layer(name)
        assert isinstance(layer, conv_forms.SameConv3D)
        assert layer.input_shape[1:4] == (25, 25, 25)  # the reference's ZeroPadding3D(2) is fused in
    layer = d.get_layer("d_conv2")
    ref = tf.keras.Sequential([tf.keras.layers.ZeroPadding3D(2),
                               tf.keras.layers.Conv3D(layer.filters, (5, 5, 5), padding="valid")])
    ref(x)
    ref.layers[1].set_weights(layer.get_weights())
    np.testing.assert_allclose(layer(x).numpy(), ref(x).numpy(), rtol=1e-5, atol=1e-5)


def test_same_conv3d_rejects_what_it_does_not_implement():
    with pytest.raises(ValueError, match="odd kernel"):
        conv_forms.SameConv3D(4, 4, padding="same")(tf.zeros((1, 5, 5, 5, 2)))
    with pytest.raises(ValueError, match="odd kernel"):
        conv_forms.SameConv3D(4, 3, padding="valid")(tf.zeros((1, 5, 5, 5, 2)))


def test_col2im_input_grad_of_bf16_operands_accumulates_in_float32():
    """bf16 dy and kernel: against the float32 sum of the same bf16 values, the error is that of
    rounding each of the 125 terms once (rms 1.4e-4 of the terms' magnitude here), not that of
    125 roundings of a bf16 running sum (3.4e-4 when the adds ran in bf16)."""
    dy = tf.random.stateless_normal((2, 9, 9, 9, 8), [5, 6])
    w = tf.random.stateless_normal((5, 5, 5, 1, 8), [7, 8])
    dy16, w16 = tf.cast(dy, tf.bfloat16), tf.cast(w, tf.bfloat16)

    def col2im(a, b):
        return tf.cast(conv_forms.col2im_input_grad(a, b, (2, 9, 9, 9, 1)), tf.float32).numpy()

    up = lambda t: tf.cast(t, tf.float32)  # noqa: E731
    exact = col2im(up(dy16), up(w16))
    magnitude = col2im(tf.abs(up(dy16)), tf.abs(up(w16)))  # sum of |terms| per element
    got = conv_forms.col2im_input_grad(dy16, w16, (2, 9, 9, 9, 1))
    assert got.dtype == tf.bfloat16
    err = np.abs(up(got).numpy() - exact)
    assert np.sqrt((err ** 2).mean() / (magnitude ** 2).mean()) < 2.0 ** -12
