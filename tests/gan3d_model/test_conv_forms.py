"""The faster convolutions are the reference convolutions: values and gradients."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

tf = pytest.importorskip("tensorflow")

from gan3d import conv_forms, model  # noqa: E402
from gan3d.fft_conv import FFTConv3D  # noqa: E402
from tests.support.convs import value_and_grads  # noqa: E402


@pytest.mark.parametrize("ksize,cout", [((5, 5, 5), 4), ((3, 4, 5), 3)])
def test_image_conv3d_matches_tf_conv3d_and_its_gradients(ksize, cout):
    x = tf.random.stateless_normal((2, 9, 8, 7, 1), [1, 2])
    w = tf.random.stateless_normal(ksize + (1, cout), [3, 4])
    upstream = tf.random.stateless_normal((2, 9, 8, 7, cout), [5, 6])

    ours = value_and_grads(conv_forms.image_conv3d, x, w, upstream)
    ref = value_and_grads(lambda a, b: tf.nn.conv3d(a, b, [1] * 5, "SAME"), x, w, upstream)
    for a, b in zip(ours, ref):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("fft", [True, False])
def test_discriminator_first_layer_is_a_plain_conv3d_with_same_parameters(fft):
    d = model.discriminator("full", fft=fft)
    layer = d.get_layer("d_conv1")
    assert isinstance(layer, tf.keras.layers.Conv3D)
    assert isinstance(layer, FFTConv3D if fft else conv_forms.ImageConv3D)
    assert layer.count_params() == 4_032
    ref = tf.keras.layers.Conv3D(32, (5, 5, 5), padding="same")
    x = tf.random.stateless_uniform((2, 25, 25, 25, 1), [7, 8])
    ref(x)
    ref.set_weights(layer.get_weights())
    np.testing.assert_allclose(layer(x).numpy(), ref(x).numpy(), rtol=1e-5, atol=1e-6)


def test_image_conv3d_rejects_what_it_does_not_implement():
    with pytest.raises(ValueError, match="1-channel"):
        conv_forms.ImageConv3D(4, 3, padding="same")(tf.zeros((1, 5, 5, 5, 2)))


_KERNEL = st.tuples(*[st.integers(1, 4)] * 3)


@settings(max_examples=25, deadline=None)
@given(
    ksize=_KERNEL,
    cin=st.integers(1, 5),
    cout=st.integers(1, 9),
    extra=st.tuples(*[st.integers(0, 4)] * 3),
    batch=st.integers(1, 2),
    same=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_packed_conv3d_is_tf_conv3d_with_its_gradients(ksize, cin, cout, extra, batch, same, seed):
    """Any stride-1 VALID conv, or SAME with an odd kernel, of any width (odd or even output widths,
    1 output position, 1 channel): the packed forward and the gradients equal tf.nn.conv3d's."""
    if same:
        ksize = tuple(k | 1 for k in ksize)  # SAME needs an odd kernel
    shape = (batch,) + tuple(k + e for k, e in zip(ksize, extra)) + (cin,)
    padding = "SAME" if same else "VALID"
    x = tf.random.stateless_normal(shape, [seed, 1])
    w = tf.random.stateless_normal(ksize + (cin, cout), [seed, 2])
    out_shape = tf.nn.conv3d(x, w, [1] * 5, padding).shape
    upstream = tf.random.stateless_normal(out_shape, [seed, 3])

    ours = value_and_grads(lambda a, b: conv_forms.packed_conv3d(a, b, padding), x, w, upstream)
    ref = value_and_grads(lambda a, b: tf.nn.conv3d(a, b, [1] * 5, padding), x, w, upstream)
    assert ours[0].shape == out_shape
    for a, b in zip(ours, ref):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("ksize,cin,cout", [((5, 5, 5), 6, 3), ((3, 5, 1), 2, 4)])
def test_packed_same_conv3d_is_zero_padding_then_valid_conv_with_its_gradients(ksize, cin, cout):
    x = tf.random.stateless_normal((2, 9, 8, 7, cin), [1, 2])
    w = tf.random.stateless_normal(ksize + (cin, cout), [3, 4])
    upstream = tf.random.stateless_normal((2, 9, 8, 7, cout), [5, 6])
    pads = [[0, 0]] + [[(k - 1) // 2] * 2 for k in ksize] + [[0, 0]]

    ours = value_and_grads(lambda a, b: conv_forms.packed_conv3d(a, b, "SAME"), x, w, upstream)
    ref = value_and_grads(
        lambda a, b: tf.nn.conv3d(tf.pad(a, pads), b, [1] * 5, "VALID"), x, w, upstream
    )
    for a, b in zip(ours, ref):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "pre,padding,kernel",
    [(1, "VALID", (5, 5, 5)), (None, "SAME", (5, 5, 5)), ((2, 2, 0), "VALID", (6, 5, 8))],
)
def test_packed_conv3d_after_a_zero_padding_in_a_traced_graph(pre, padding, kernel):
    """As the step runs it (tf.function, a ZeroPadding3D before d_conv4 and g_conv2): TF 2.15's
    oneDNN rewrite folded a second Pad into the conv wrongly (a shape error; concat avoids it)."""
    x = tf.random.stateless_normal((2, 14, 14, 16, 3), [1, 2])
    w = tf.random.stateless_normal(kernel + (3, 6), [3, 4])
    pad = (lambda t: tf.keras.layers.ZeroPadding3D(pre)(t)) if pre else (lambda t: t)
    got = tf.function(lambda a, b: conv_forms.packed_conv3d(pad(a), b, padding))(x, w)
    np.testing.assert_allclose(
        got.numpy(), tf.nn.conv3d(pad(x), w, [1] * 5, padding).numpy(), rtol=1e-4, atol=1e-4
    )


def test_packed_forward_runs_one_conv_with_twice_the_output_channels():
    """What makes it fast: the graph holds one stride-2 conv with 2 x cout channels, no plain
    one.
    """
    x, w = tf.zeros((1, 9, 9, 9, 8)), tf.zeros((5, 5, 5, 8, 8))
    graph = (
        tf.function(lambda a, b: conv_forms.packed_forward(a, b, "SAME"))
        .get_concrete_function(x, w)
        .graph
    )
    convs = [op for op in graph.get_operations() if op.type == "Conv3D"]
    assert len(convs) == 1
    assert convs[0].get_attr("strides") == [1, 1, 1, 2, 1] and convs[0].inputs[1].shape[-1] == 16


@pytest.mark.parametrize("precision,form", [("fp32", FFTConv3D), ("bf16", conv_forms.PackedConv3D)])
def test_discriminator_fused_layers_equal_reference_padding_plus_valid_conv(precision, form):
    d = model.discriminator("tiny", precision)
    x = tf.random.stateless_uniform((2, 25, 25, 25, d.get_layer("d_conv2").input_shape[-1]), [7, 8])
    for name in ("d_conv2", "d_conv3"):
        layer = d.get_layer(name)
        assert isinstance(layer, form) and layer.padding == "same"
        assert layer.input_shape[1:4] == (
            25,
            25,
            25,
        )  # the reference's ZeroPadding3D(2) is fused in
    if precision != "fp32":
        return
    layer = d.get_layer("d_conv2")
    ref = tf.keras.Sequential(
        [
            tf.keras.layers.ZeroPadding3D(2),
            tf.keras.layers.Conv3D(layer.filters, (5, 5, 5), padding="valid"),
        ]
    )
    ref(x)
    ref.layers[1].set_weights(layer.get_weights())
    np.testing.assert_allclose(layer(x).numpy(), ref(x).numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "build,names",
    [
        (model.discriminator, ("d_conv2", "d_conv3", "d_conv4")),
        (model.generator, ("g_conv2", "g_conv3")),
    ],
)
@pytest.mark.parametrize("fft", [True, False])
def test_fast_layers_of_the_full_models_equal_plain_conv3d(build, names, fft):
    """Same parameters and outputs as the plain Keras Conv3D the reference has at that place;
    in a float32 model the FFT_LAYERS compute in the frequency domain, the others packed."""
    m = build("full", fft=fft)
    for name in names:
        layer = m.get_layer(name)
        assert isinstance(
            layer, FFTConv3D if fft and name in model.FFT_LAYERS else conv_forms.PackedConv3D
        )
        ref = tf.keras.layers.Conv3D(layer.filters, layer.kernel_size, padding=layer.padding)
        x = tf.random.stateless_normal((2,) + tuple(layer.input_shape[1:]), [7, 8])
        ref(x)
        ref.set_weights(layer.get_weights())
        want = ref(x).numpy()  # float32 sums in another order: 1e-5 of the largest value
        np.testing.assert_allclose(
            layer(x).numpy(), want, rtol=1e-5, atol=1e-5 * max(1.0, np.abs(want).max())
        )


def test_bf16_models_pack_every_few_channel_layer():
    d, g = model.discriminator("full", "bf16"), model.generator("full", "bf16")
    for m, names in ((d, ("d_conv2", "d_conv3", "d_conv4")), (g, ("g_conv2", "g_conv3"))):
        assert all(type(m.get_layer(n)) is conv_forms.PackedConv3D for n in names)


def test_packed_conv3d_rejects_what_it_does_not_implement():
    with pytest.raises(ValueError, match="odd kernel"):
        conv_forms.PackedConv3D(4, 4, padding="same")(tf.zeros((1, 5, 5, 5, 2)))
    with pytest.raises(ValueError, match="stride 1"):
        conv_forms.PackedConv3D(4, 3, strides=2)(tf.zeros((1, 5, 5, 5, 2)))


@pytest.mark.parametrize(
    "unit,dtype,col2im",
    [
        (None, tf.float32, True),
        ("amx", tf.float32, True),
        ("avx512_bf16", tf.bfloat16, True),
        ("amx", tf.bfloat16, False),
    ],
)
def test_image_conv3d_input_gradient_is_col2im_except_bf16_on_amx(monkeypatch, unit, dtype, col2im):
    """Which input-gradient the traced graph holds (a MatMul for the col2im, else oneDNN's
    backward-data kernel), and that either one equals the float32 convolution of the same inputs
    to the dtype's precision (bfloat16: 3% of the largest value: TensorFlow's own bfloat16 kernels,
    which run where oneDNN has no bf16 (no avx512f), are off by up to 2.5% of it themselves)."""
    monkeypatch.setattr(conv_forms.cpu, "bf16_support", lambda flags=None: unit)
    x = tf.cast(tf.random.stateless_normal((2, 9, 8, 7, 1), [1, 2]), dtype)
    w = tf.cast(tf.random.stateless_normal((5, 5, 5, 1, 4), [3, 4]), dtype)
    upstream = tf.cast(tf.random.stateless_normal((2, 9, 8, 7, 4), [5, 6]), dtype)
    fn = tf.function(lambda a, b: value_and_grads(conv_forms.image_conv3d, a, b, upstream))
    ops = {op.type for op in fn.get_concrete_function(x, w).graph.get_operations()}
    assert ("MatMul" in ops or "BatchMatMulV2" in ops) == col2im
    assert ("Conv3DBackpropInputV2" in ops) == (not col2im)
    ours = fn(x, w)
    f32 = [tf.cast(t, tf.float32) for t in (x, w, upstream)]
    truth = value_and_grads(
        lambda a, b: tf.nn.conv3d(a, b, [1] * 5, "SAME"), f32[0], f32[1], f32[2]
    )
    share = 1e-5 if dtype == tf.float32 else 0.03
    for a, b in zip(ours, truth):
        scale = float(tf.reduce_max(tf.abs(b)))
        np.testing.assert_allclose(
            tf.cast(a, tf.float32).numpy(), b.numpy(), rtol=0, atol=share * scale
        )


@pytest.mark.parametrize("unit,backprop_input_ops", [("amx", 4), ("avx512_bf16", 3)])
def test_bf16_discriminator_takes_the_first_layers_input_gradient_from_onednn_on_amx(
    monkeypatch, unit, backprop_input_ops
):
    """In the model, where the kernel is a Keras AutoCastVariable (float32 until read): with AMX
    all four D convs' input-gradients are oneDNN's, without it d_conv1's is the col2im."""
    monkeypatch.setattr(conv_forms.cpu, "bf16_support", lambda flags=None: unit)
    d = model.discriminator("tiny", "bf16")

    @tf.function
    def input_grad(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            p = d(x, training=True)[0]
        return tape.gradient(p, x)

    ops = [
        op.type
        for op in input_grad.get_concrete_function(
            tf.zeros((2, 25, 25, 25, 1))
        ).graph.get_operations()
    ]
    assert ops.count("Conv3DBackpropInputV2") == backprop_input_ops


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
    assert np.sqrt((err**2).mean() / (magnitude**2).mean()) < 2.0**-12


@settings(max_examples=20, deadline=None)
@given(
    ksize=_KERNEL,
    cout=st.integers(1, 9),
    extra=st.tuples(*[st.integers(0, 4)] * 3),
    batch=st.integers(1, 2),
    seed=st.integers(0, 2**16),
)
def test_folded_image_conv3d_is_tf_conv3d_with_its_gradients(ksize, cout, extra, batch, seed):
    """Any kernel (even depths pad as TensorFlow's SAME does: the odd pad after), any volume
    down to one cell per axis: values and both gradients equal tf.nn.conv3d's."""
    shape = (batch,) + tuple(1 + e for e in extra) + (1,)
    x = tf.random.stateless_normal(shape, [seed, 1])
    w = tf.random.stateless_normal(ksize + (1, cout), [seed, 2])
    upstream = tf.random.stateless_normal(shape[:-1] + (cout,), [seed, 3])

    ours = value_and_grads(conv_forms.folded_image_conv3d, x, w, upstream)
    ref = value_and_grads(lambda a, b: tf.nn.conv3d(a, b, [1] * 5, "SAME"), x, w, upstream)
    for a, b in zip(ours, ref):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-4)


def test_folded_forward_runs_one_conv_with_the_depth_taps_as_channels():
    """What makes it fast: one convolution with 5 input channels and a depth-1 kernel."""
    x, w = tf.zeros((1, 9, 9, 9, 1)), tf.zeros((5, 5, 5, 1, 32))
    graph = tf.function(conv_forms.folded_image_conv3d).get_concrete_function(x, w).graph
    convs = [op for op in graph.get_operations() if op.type == "Conv3D"]
    assert len(convs) == 1
    assert convs[0].inputs[0].shape[-1] == 5 and convs[0].inputs[1].shape[:4] == (1, 5, 5, 5)


@pytest.mark.parametrize("form", sorted(set(model.FORM_CLASSES) - {"fft"}))
def test_a_bf16_convolution_adds_its_bias_in_float32(form):
    """In a bf16 model every form hands its output on in float32 with the bias added there: a
    bias that bfloat16 cannot hold (1 + 2^-12) comes out whole, where a bfloat16 add gives 1."""
    name = "d_conv1" if form in ("col2im", "folded") else "d_conv2"  # a layer that has the form
    forms = {**model.fixed_forms("bf16"), name: form}
    layer = model.discriminator("tiny", "bf16", forms=forms).get_layer(name)
    assert type(layer) is model.FORM_CLASSES[form]
    layer.bias.assign(tf.fill(layer.bias.shape, 1 + 2**-12))
    out = layer(tf.zeros((1, *layer.input_shape[1:])))
    assert out.dtype == tf.float32 and layer.compute_dtype == "bfloat16"
    np.testing.assert_array_equal(out.numpy(), np.float32(1 + 2**-12))
