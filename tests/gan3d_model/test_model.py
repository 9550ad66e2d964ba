"""The 3DGAN models match the reference architecture (3dgan.md) exactly."""

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from gan3d import model  # noqa: E402

G_SHAPES = {  # layer name -> output shape (without batch) and parameter count, from 3dgan.md
    "g_dense": ((3136,), 630_336),
    "g_reshape": ((7, 7, 8, 8), 0),
    "g_conv1": ((7, 7, 8, 64), 147_520),
    "g_bn1": ((7, 7, 8, 64), 256),
    "g_up1": ((14, 14, 16, 64), 0),
    "g_pad1": ((18, 18, 16, 64), 0),
    "g_conv2": ((13, 14, 9, 6), 92_166),
    "g_bn2": ((13, 14, 9, 6), 24),
    "g_up2": ((26, 28, 27, 6), 0),
    "g_pad2": ((28, 28, 33, 6), 0),
    "g_conv3": ((26, 26, 26, 6), 2_598),
    "g_conv4": ((25, 25, 25, 1), 48),
}
D_SHAPES = {  # the reference's d_pad2 (29^3 x 32) and d_pad3 (29^3 x 8) are fused into
    # d_conv2 and d_conv3 (ZeroPadding3D(2) + VALID 5^3 == SAME 5^3; test_conv_forms.py checks it)
    "d_conv1": ((25, 25, 25, 32), 4_032),
    "d_conv2": ((25, 25, 25, 8), 32_008),
    "d_conv3": ((25, 25, 25, 8), 8_008),
    "d_pad4": ((27, 27, 27, 8), 0),
    "d_conv4": ((23, 23, 23, 8), 8_008),
    "d_pool": ((11, 11, 11, 8), 0),
    "d_flatten": ((10_648,), 0),
    "generation": ((1,), 10_649),
    "auxiliary": ((1,), 10_649),
}


def _non_trainable(m) -> int:
    return sum(int(np.prod(v.shape)) for v in m.non_trainable_variables)


@pytest.mark.parametrize(
    "build,total,frozen,table",
    [
        (model.generator, 872_948, 140, G_SHAPES),
        (model.discriminator, 73_450, 48, D_SHAPES),
    ],
)
def test_full_models_match_reference(build, total, frozen, table):
    m = build("full")
    assert m.count_params() == total
    assert _non_trainable(m) == frozen
    for name, (shape, params) in table.items():
        layer = m.get_layer(name)
        assert tuple(layer.output_shape[1:]) == shape, name
        assert layer.count_params() == params, name


def test_layer_settings_follow_keras2_reference():
    d = model.discriminator("full")
    for layer in model.generator("full").layers + d.layers:
        if isinstance(layer, tf.keras.layers.LeakyReLU):
            assert np.isclose(layer.alpha, 0.3)
        if isinstance(layer, tf.keras.layers.BatchNormalization):
            assert layer.axis == [4] and layer.momentum == 0.99 and layer.epsilon == 1e-3
        if isinstance(layer, tf.keras.layers.Conv3D):
            assert layer.data_format == "channels_last"
    assert [type(o).__name__ for o in d.outputs] and len(d.outputs) == 3


def test_tiny_runs_same_code_and_is_much_cheaper():
    g, d = model.generator("tiny"), model.discriminator("tiny")
    assert g.input_shape[-1] == model.PRESETS["tiny"].latent_dim
    z = model.sample_latent(3, tf.fill((3, 1), 2.0), g.input_shape[-1], rng_or_seed=5)
    images = g(z, training=False)
    assert images.shape == (3, 25, 25, 25, 1)
    assert float(tf.reduce_min(images)) >= 0.0  # ReLU output
    fake, aux, ecal = d(images, training=False)
    assert fake.shape == aux.shape == ecal.shape == (3, 1)
    np.testing.assert_allclose(ecal.numpy()[:, 0], images.numpy().sum(axis=(1, 2, 3, 4)), rtol=1e-5)
    assert g.count_params() * 10 < model.generator("full").count_params()
    assert [type(x).__name__ for x in g.layers] == [
        type(x).__name__ for x in model.generator("full").layers
    ]


def test_unknown_preset_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown model preset 'huge'.*full"):
        model.generator("huge")


def test_latent_and_energy_sampling():
    rng = tf.random.Generator.from_seed(3)
    ep = model.sample_energies(20_000, rng).numpy()
    assert ep.shape == (20_000, 1) and ep.min() >= 0.1 and ep.max() <= 5.0
    assert abs(ep.mean() - 2.55) < 0.05
    z = model.sample_latent(
        4, np.array([[1.0], [2.0], [3.0], [4.0]], np.float32), 200, rng_or_seed=7
    ).numpy()
    z1 = model.sample_latent(4, None, 200, rng_or_seed=7).numpy()  # same seed: same N(0,1) draws
    np.testing.assert_allclose(z, z1 * np.arange(1, 5)[:, None], rtol=1e-6)


def test_fitted_cellsum_is_two_percent_sampling_fraction():
    # At 100 GeV (Ep=1) the fit gives 2.0188 GeV, i.e. ~2% of the primary energy.
    assert np.isclose(model.fitted_cellsum(1.0), 2.0188)
    assert np.isclose(model.fitted_cellsum(1.0, xscale=100.0), 201.88)
    ep = tf.constant([[0.5], [4.0]])
    np.testing.assert_allclose(
        model.fitted_cellsum(ep, 2.0).numpy(), model.fitted_cellsum(ep.numpy(), 2.0), rtol=1e-6
    )
