"""gan3d.fast_layers: the discriminator's BatchNormalization and Dropout compute what Keras' own
compute (BatchNorm: the same numbers; Dropout: the same distribution), so the models stay the
reference's."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

tf = pytest.importorskip("tensorflow")

from gan3d import model  # noqa: E402
from gan3d.fast_layers import MASK_LEVELS, BitsDropout, FoldedBatchNormalization  # noqa: E402


def _bn_pair(momentum: float):
    kw = dict(momentum=momentum, epsilon=model.BN_EPSILON)
    return tf.keras.layers.BatchNormalization(**kw), FoldedBatchNormalization(**kw)


def _forward_and_grads(layer, x, dy, training: bool):
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x, training=training)
    grads = tape.gradient(y, [x, *layer.trainable_variables], output_gradients=dy)
    return [y.numpy()] + [g.numpy() for g in grads]


@settings(max_examples=12, deadline=None)
@given(
    shape=st.tuples(*[st.integers(1, 5)] * 4, st.integers(1, 6)),
    momentum=st.sampled_from([0.0, 0.5, 0.99]),
    seed=st.integers(0, 2**16),
)
def test_folded_batch_norm_equals_keras_forward_gradients_and_statistics(shape, momentum, seed):
    rng = np.random.default_rng(seed)
    x = tf.constant(rng.normal(3.0, 2.0, shape), tf.float32)
    dy = tf.constant(rng.normal(size=shape), tf.float32)
    keras_bn, folded = _bn_pair(momentum)
    for training in (True, True, False):  # two training steps move the moving statistics
        want = _forward_and_grads(keras_bn, x, dy, training)
        got = _forward_and_grads(folded, x, dy, training)
        for w, g in zip(want, got):
            np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-5)
    for w, g in zip(keras_bn.weights, folded.weights):
        assert w.name.split("/")[-1] == g.name.split("/")[-1]
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-5, atol=1e-6)


def test_folded_batch_norm_refuses_what_it_cannot_fold():
    with pytest.raises(ValueError, match="5D channels-last"):
        FoldedBatchNormalization()(tf.zeros((2, 3, 3, 4)))
    with pytest.raises(ValueError, match="5D channels-last"):
        FoldedBatchNormalization(axis=1)(tf.zeros((2, 3, 3, 3, 4)))


@pytest.mark.parametrize("channels", [1, 2, 7, 32])
def test_bits_dropout_keeps_values_at_the_rate_and_scales_them_exactly(channels):
    rate = 0.2
    layer = BitsDropout(rate, seed=5)
    x = tf.constant(
        np.random.default_rng(channels).uniform(1.0, 2.0, (40, 9, 9, 9, channels)), tf.float32
    )
    y = layer(x, training=True).numpy()
    kept = y != 0
    keep_p = 1 - round(rate * MASK_LEVELS) / MASK_LEVELS
    np.testing.assert_allclose(y[kept], x.numpy()[kept] / keep_p, rtol=1e-6)
    n = kept.size
    assert abs(kept.mean() - keep_p) < 5 * np.sqrt(keep_p * (1 - keep_p) / n)  # 5 sigma
    for axis in range(5):  # no position or channel is favoured: each slice keeps about the rate
        other = tuple(a for a in range(5) if a != axis)
        per_slice = kept.mean(axis=other)
        sigma = np.sqrt(keep_p * (1 - keep_p) / (n / kept.shape[axis]))
        assert np.all(abs(per_slice - keep_p) < 6 * sigma), axis


def test_bits_dropout_gradient_is_the_mask_times_the_scale_and_inference_is_identity():
    layer = BitsDropout(0.3, seed=1)
    x = tf.random.stateless_uniform((4, 6, 6, 6, 3), seed=(1, 2), minval=1.0, maxval=2.0)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x, training=True)
    grad = tape.gradient(y, x).numpy()
    mask = y.numpy() != 0
    np.testing.assert_allclose(grad, np.where(mask, y.numpy() / x.numpy(), 0), rtol=1e-6)
    assert 0 < mask.mean() < 1
    np.testing.assert_array_equal(layer(x, training=False).numpy(), x.numpy())


def test_bits_dropout_masks_follow_the_generator_state_a_checkpoint_holds():
    layer = BitsDropout(0.2, seed=3)
    x = tf.ones((2, 5, 5, 5, 4))
    layer(x, training=True)  # builds the generator
    gen = layer._random_generator._generator
    saved = gen.state.numpy()
    first, second = layer(x, training=True).numpy(), layer(x, training=True).numpy()
    assert not np.array_equal(first, second)  # each call draws new bits
    gen.reset(saved)
    np.testing.assert_array_equal(layer(x, training=True).numpy(), first)


@pytest.mark.parametrize(
    "rate, kw, message",
    [
        (0.0, {}, "rate"),
        (1.0, {}, "rate"),
        (0.2, {"noise_shape": (1, 1, 1, 1, 4)}, "noise_shape"),
        (0.2, {"force_generator": False}, "tf.random.Generator"),
    ],
)
def test_bits_dropout_refuses_what_it_cannot_draw(rate, kw, message):
    with pytest.raises(ValueError, match=message):
        BitsDropout(rate, **kw)


def test_discriminator_uses_the_fast_layers_and_finds_their_generators():
    from gan3d import step

    d = model.discriminator("tiny")
    kinds = {type(layer) for layer in d.layers}
    assert {FoldedBatchNormalization, BitsDropout} <= kinds
    assert len(step.dropout_generators(d)) == sum(isinstance(la, BitsDropout) for la in d.layers)
