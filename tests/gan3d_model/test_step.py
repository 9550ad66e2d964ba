"""The training step: updates, finite losses, label flips, bit-identical reruns."""

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from gan3d import model, step  # noqa: E402


def _batch(batch: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    images = rng.gamma(0.3, 0.02, (batch, 25, 25, 25, 1)) * (
        rng.random((batch, 25, 25, 25, 1)) < 0.2
    )
    images = images.astype(np.float32)
    ep = rng.uniform(0.1, 5.0, batch).astype(np.float32)
    return images, ep, images.sum(axis=(1, 2, 3, 4))


def _fresh_step(seed: int = 1, **cfg) -> step.TrainStep:
    tf.keras.utils.set_random_seed(seed)
    return step.TrainStep(
        model.generator("tiny"),
        model.discriminator("tiny"),
        config=step.StepConfig(seed=seed, **cfg),
    )


def _weights(s: step.TrainStep) -> list[np.ndarray]:
    return [v.numpy() for v in s.generator.variables + s.discriminator.variables]


def test_one_step_updates_both_models_and_returns_finite_losses():
    s = _fresh_step()
    g0 = [v.numpy() for v in s.generator.trainable_variables]
    d0 = [v.numpy() for v in s.discriminator.trainable_variables]
    d_moving = [v.numpy() for v in s.discriminator.non_trainable_variables]
    losses = s(*_batch(4))
    expected = {f"{p}_{q}" for p in step.PHASES for q in step.PARTS} | {"d_loss", "g_loss"}
    assert set(losses) == expected
    assert all(np.isfinite(v.numpy()) for v in losses.values())
    assert all(
        not np.array_equal(a, v.numpy()) for a, v in zip(g0, s.generator.trainable_variables)
    )
    assert all(
        not np.array_equal(a, v.numpy()) for a, v in zip(d0, s.discriminator.trainable_variables)
    )
    # D steps on real and fake batches move D's BatchNorm statistics
    assert any(
        not np.array_equal(a, v.numpy())
        for a, v in zip(d_moving, s.discriminator.non_trainable_variables)
    )
    assert s.d_optimizer.iterations.numpy() == 2 and s.g_optimizer.iterations.numpy() == 2
    # the real cell sum is the target of the ecal head and equals the input's sum
    assert float(losses["d_real_ecal_mape"]) < 1e-3


def test_g_steps_leave_discriminator_untouched(monkeypatch):
    s = _fresh_step()
    before = [v.numpy() for v in s.discriminator.variables]
    out = tf.function(lambda: s._g_step(4))()
    assert np.isfinite(out["loss"].numpy())
    for a, v in zip(before, s.discriminator.variables):
        np.testing.assert_array_equal(a, v.numpy(), err_msg=v.name)


def test_evaluate_changes_nothing_and_is_repeatable():
    s = _fresh_step()
    before = _weights(s)
    rng_state = s.rng.state.numpy()
    a = s.evaluate(*_batch(3), batch_index=2)
    b = s.evaluate(*_batch(3), batch_index=2)
    assert {k: float(v) for k, v in a.items()} == {k: float(v) for k, v in b.items()}
    assert all(np.isfinite(float(v)) for v in a.values())
    for x, y in zip(before, _weights(s)):
        np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(rng_state, s.rng.state.numpy())


def test_learning_rate_is_settable_for_warmup():
    s = _fresh_step(learning_rate=0.002)
    assert np.isclose(s.learning_rate, 0.002)
    s.set_learning_rate(0.0005)
    assert np.isclose(s.d_optimizer.learning_rate.numpy(), 0.0005)
    assert np.isclose(s.g_optimizer.learning_rate.numpy(), 0.0005)


def test_label_flip_rate_is_plausible():
    rng = tf.random.Generator.from_seed(11)
    n, p = 200_000, 0.05
    flipped_ones = 1.0 - step.flip_labels(tf.ones((n, 1)), p, rng).numpy()
    flipped_zeros = step.flip_labels(tf.zeros((n, 1)), p, rng).numpy()
    sigma = np.sqrt(p * (1 - p) / n)
    for f in (flipped_ones, flipped_zeros):
        assert set(np.unique(f)) == {0.0, 1.0}  # flips, no smoothing
        assert abs(f.mean() - p) < 5 * sigma


def test_bad_config_is_a_clear_error():
    with pytest.raises(ValueError, match="optimizer='sgd'"):
        step.StepConfig(optimizer="sgd")
    with pytest.raises(ValueError, match="loss_weights"):
        step.StepConfig(loss_weights=(1.0, 2.0))


def test_same_seed_gives_bit_identical_weights_and_checkpoint_resume_matches(tmp_path):
    tf.config.experimental.enable_op_determinism()
    batches = [_batch(3, seed=i) for i in range(3)]

    def state(s):
        return tf.train.Checkpoint(
            generator=s.generator, discriminator=s.discriminator, **s.variables_to_checkpoint()
        )

    a = _fresh_step(seed=5, optimizer="adam")
    a(*batches[0])
    path = state(a).write(str(tmp_path / "after-step-1"))
    for bt in batches[1:]:
        a(*bt)
    b = _fresh_step(seed=5, optimizer="adam")
    for bt in batches:
        b(*bt)
    for x, y in zip(_weights(a), _weights(b)):
        np.testing.assert_array_equal(x, y)

    # resume: objects built from another seed; every bit of state must come from the checkpoint
    resumed = _fresh_step(seed=9, optimizer="adam")
    assert any(not np.array_equal(x, y) for x, y in zip(_weights(a), _weights(resumed)))
    state(resumed).read(path).assert_consumed()
    for bt in batches[1:]:
        resumed(*bt)
    for x, y in zip(_weights(a), _weights(resumed)):
        np.testing.assert_array_equal(x, y)
