"""One 3DGAN training step (D on real, D on fakes, two G steps) compiled with tf.function.

The step follows the reference training loop: fakes are generated in inference mode (the
reference used `generator.predict`), D is trained on the real batch (labels 1, flipped with
probability `flip_prob`, true Ep and cell sum) and then on the fakes (labels 0 flipped,
sampled Ep, fitted cell sum), then G is trained twice through D with fresh noise and target
1. During the G steps D's weights are not updated and its BatchNorm runs in training mode
(batch statistics) as in the Keras-2 reference; D's moving statistics are left unchanged.

Each of the four updates is one gradient computation; with Horovod each tape is wrapped in
`hvd.DistributedGradientTape`, i.e. one all-reduce per update. All randomness of the step
(noise, energies, label flips, dropout masks) comes from seeded `tf.random.Generator`s whose
states are variables (`variables_to_checkpoint()`), so a resumed run reproduces an
uninterrupted one bit for bit when TF op determinism is enabled.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import tensorflow as tf

from gan3d.model import fitted_cellsum, sample_energies, sample_latent

PHASES = ("d_real", "d_fake", "g1", "g2")
PARTS = ("loss", "bce", "ep_mape", "ecal_mape")
OPTIMIZERS = ("rmsprop", "adam")


@dataclass(frozen=True)
class StepConfig:
    """Settings of the training step (defaults: the reference Horovod script)."""

    loss_weights: tuple[float, float, float] = (8.0, 0.2, 0.1)  # BCE, MAPE(Ep), MAPE(cell sum)
    flip_prob: float = 0.05
    learning_rate: float = 1e-3
    optimizer: str = "rmsprop"
    xscale: float = 1.0
    latent_dim: int | None = None  # None: taken from the generator's input
    seed: int = 0
    # gradients on the wire with Horovod: "fp32" or "fp16" (compressed)
    allreduce_dtype: str = "fp32"
    extra: dict = field(default_factory=dict, compare=False)  # optimizer keyword arguments

    def __post_init__(self) -> None:
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"StepConfig.optimizer={self.optimizer!r}: choose one of {OPTIMIZERS}")
        if not 0.0 <= self.flip_prob < 0.5:
            raise ValueError(f"StepConfig.flip_prob={self.flip_prob}: must be in [0, 0.5)")
        if self.allreduce_dtype not in ("fp32", "fp16"):
            raise ValueError(
                f"StepConfig.allreduce_dtype={self.allreduce_dtype!r}: choose fp32 or fp16"
            )
        if len(self.loss_weights) != 3:
            raise ValueError(
                "StepConfig.loss_weights: give three weights [BCE, MAPE(Ep), MAPE(cell sum)]"
            )


def make_optimizer(name: str, learning_rate: float, **kw) -> tf.keras.optimizers.Optimizer:
    """Keras optimizer without XLA (XLA made the 3DGAN step 17x slower on CPU)."""
    cls = {"rmsprop": tf.keras.optimizers.RMSprop, "adam": tf.keras.optimizers.Adam}[name]
    return cls(learning_rate=learning_rate, jit_compile=False, **kw)


def flip_labels(labels: tf.Tensor, prob: float, rng: tf.random.Generator) -> tf.Tensor:
    """Flip 0/1 labels independently with probability `prob` (no smoothing)."""
    flip = rng.uniform(tf.shape(labels), dtype=labels.dtype) < prob
    return tf.where(flip, 1.0 - labels, labels)


def rank_seed(seed: int, rank: int, *keys: int) -> int:
    """A distinct, reproducible generator seed for each Horovod rank (and epoch, stream, ...)."""
    entropy = np.random.SeedSequence([int(seed), int(rank), *map(int, keys)]).generate_state(
        1, dtype=np.uint64
    )
    return int(entropy[0]) >> 1


def _bce(y: tf.Tensor, p: tf.Tensor) -> tf.Tensor:
    return tf.reduce_mean(tf.keras.losses.binary_crossentropy(y, p))


def _mape(y: tf.Tensor, p: tf.Tensor) -> tf.Tensor:
    return tf.reduce_mean(tf.keras.losses.mean_absolute_percentage_error(y, p))


class TrainStep:
    """Callable training step: `losses = step(images, ep, cellsum)`.

    images (B, 25, 25, 25, 1) float32, ep (B,) or (B, 1) in 100 GeV, cellsum (B,) or (B, 1).
    Returns a dict of scalar tensors: `{phase}_{part}` for phase in PHASES and part in PARTS,
    plus `d_loss` (mean of the two D steps) and `g_loss` (mean of the two G steps).
    """

    def __init__(
        self,
        generator: tf.keras.Model,
        discriminator: tf.keras.Model,
        *,
        config: StepConfig = StepConfig(),
        hvd=None,
    ) -> None:
        self.generator = generator
        self.discriminator = discriminator
        self.config = config
        self.hvd = hvd
        self.latent_dim = config.latent_dim or int(generator.input_shape[-1])
        rank = hvd.rank() if hvd is not None else 0
        self.rng = tf.random.Generator.from_seed(rank_seed(config.seed, rank))
        self.dropout_rngs = dropout_generators(discriminator)
        for i, gen in enumerate(self.dropout_rngs, start=1):
            gen.reset_from_seed(rank_seed(config.seed, rank + 7919 * i))
        self.d_optimizer = make_optimizer(config.optimizer, config.learning_rate, **config.extra)
        self.g_optimizer = make_optimizer(config.optimizer, config.learning_rate, **config.extra)
        self.d_optimizer.build(discriminator.trainable_variables)
        self.g_optimizer.build(generator.trainable_variables)
        self._d_moving = [v for v in discriminator.non_trainable_variables if "moving" in v.name]
        # No autograph: the step has no Python control flow on tensors, and converting the source of
        # every layer and of Horovod's gradient code was a third of a run's first step (tracing)
        self._train = tf.function(self._train_impl, autograph=False)
        self._evaluate = tf.function(self._evaluate_impl, autograph=False)

    # -- state the trainer checkpoints and steers -------------------------------------------
    def variables_to_checkpoint(self) -> dict:
        """Trackables whose values define the training state besides the two models."""
        return {
            "rng": self.rng,
            "d_optimizer": self.d_optimizer,
            "g_optimizer": self.g_optimizer,
            "dropout_rngs": self.dropout_rngs,
        }

    def reseed(self, rank: int, *keys: int) -> None:
        """Derive all randomness that follows (noise, energies, label flips, dropout) from
        (seed, rank, *keys): the trainer passes the epoch, so a resumed run draws in epoch e
        exactly what an uninterrupted one did, without gathering every rank's RNG states."""
        for stream, gen in enumerate([self.rng, *self.dropout_rngs]):
            gen.reset_from_seed(rank_seed(self.config.seed, rank, *keys, stream))

    @property
    def learning_rate(self) -> float:
        return float(self.d_optimizer.learning_rate.numpy())

    def set_learning_rate(self, value: float) -> None:
        """Set both optimizers' learning rate (for warm-up and rank scaling)."""
        self.d_optimizer.learning_rate.assign(value)
        self.g_optimizer.learning_rate.assign(value)

    # -- public entry points ----------------------------------------------------------------
    def __call__(self, real_images, real_ep, real_cellsum) -> dict[str, tf.Tensor]:
        return self._train(*self._inputs(real_images, real_ep, real_cellsum))

    def evaluate(
        self, real_images, real_ep, real_cellsum, *, batch_index: int = 0
    ) -> dict[str, tf.Tensor]:
        """Validation losses without any update, in inference mode.

        Noise comes from a stateless RNG keyed by (seed, batch_index), so the training RNG is
        untouched and the same validation batch sees the same fakes every epoch.
        """
        images, ep, cellsum = self._inputs(real_images, real_ep, real_cellsum)
        return self._evaluate(
            images, ep, cellsum, tf.constant([self.config.seed, batch_index], tf.int64)
        )

    def concrete_train_function(self, batch_size: int):
        """The traced graph of one step at a fixed batch size (for FLOP profiling)."""
        shape = (batch_size,) + tuple(self.discriminator.input_shape[1:])
        return self._train.get_concrete_function(
            tf.TensorSpec(shape, tf.float32),
            tf.TensorSpec((batch_size, 1), tf.float32),
            tf.TensorSpec((batch_size, 1), tf.float32),
        )

    # -- the step ---------------------------------------------------------------------------
    @staticmethod
    def _inputs(images, ep, cellsum):
        images = tf.convert_to_tensor(images, tf.float32)
        ep = tf.reshape(tf.convert_to_tensor(ep, tf.float32), (-1, 1))
        cellsum = tf.reshape(tf.convert_to_tensor(cellsum, tf.float32), (-1, 1))
        return images, ep, cellsum

    def _losses(self, outputs, targets) -> dict[str, tf.Tensor]:
        # float32 whatever the model computes in (a bf16 model's heads are float32 layers;
        # the cast is then a no-op, and it keeps a future bf16 head from rounding the losses)
        (p_fake, p_ep, p_ecal) = (tf.cast(o, tf.float32) for o in outputs)
        (y_fake, y_ep, y_ecal) = targets
        w = self.config.loss_weights
        bce, ep_mape, ecal_mape = _bce(y_fake, p_fake), _mape(y_ep, p_ep), _mape(y_ecal, p_ecal)
        return {
            "loss": w[0] * bce + w[1] * ep_mape + w[2] * ecal_mape,
            "bce": bce,
            "ep_mape": ep_mape,
            "ecal_mape": ecal_mape,
        }

    def _tape(self, tape: tf.GradientTape):
        if self.hvd is None:
            return tape
        fp16 = self.config.allreduce_dtype == "fp16"
        return self.hvd.DistributedGradientTape(
            tape, compression=self.hvd.Compression.fp16 if fp16 else self.hvd.Compression.none
        )

    def _update(self, tape, loss, model, optimizer) -> None:
        variables = model.trainable_variables
        grads = self._tape(tape).gradient(loss, variables)
        optimizer.apply_gradients(zip(grads, variables))

    def _d_step(self, images, labels, ep, cellsum) -> dict[str, tf.Tensor]:
        with tf.GradientTape() as tape:
            out = self._losses(self.discriminator(images, training=True), (labels, ep, cellsum))
        self._update(tape, out["loss"], self.discriminator, self.d_optimizer)
        return out

    def _g_step(self, batch) -> dict[str, tf.Tensor]:
        ep = sample_energies(batch, self.rng)
        z = sample_latent(batch, ep, self.latent_dim, rng_or_seed=self.rng)
        saved = [v.read_value() for v in self._d_moving]
        with tf.GradientTape() as tape:
            fakes = self.generator(z, training=True)
            outputs = self.discriminator(fakes, training=True)
            out = self._losses(
                outputs, (tf.ones((batch, 1)), ep, fitted_cellsum(ep, self.config.xscale))
            )
        for v, s in zip(self._d_moving, saved):  # D is frozen: keep its moving statistics
            v.assign(s)
        self._update(tape, out["loss"], self.generator, self.g_optimizer)
        return out

    def _train_impl(self, images, ep, cellsum) -> dict[str, tf.Tensor]:
        batch = images.shape[0] if images.shape[0] is not None else tf.shape(images)[0]
        p = self.config.flip_prob
        fake_ep = sample_energies(batch, self.rng)
        fakes = self.generator(
            sample_latent(batch, fake_ep, self.latent_dim, rng_or_seed=self.rng), training=False
        )
        results = {
            "d_real": self._d_step(
                images, flip_labels(tf.ones((batch, 1)), p, self.rng), ep, cellsum
            ),
            "d_fake": self._d_step(
                fakes,
                flip_labels(tf.zeros((batch, 1)), p, self.rng),
                fake_ep,
                fitted_cellsum(fake_ep, self.config.xscale),
            ),
            "g1": self._g_step(batch),
            "g2": self._g_step(batch),
        }
        return _flatten(results)

    def _evaluate_impl(self, images, ep, cellsum, seed) -> dict[str, tf.Tensor]:
        batch = tf.shape(images)[0]
        seeds = tf.random.experimental.stateless_split(seed, 4)
        lo, hi = 0.1, 5.0
        fake_ep = tf.random.stateless_uniform((batch, 1), seeds[0], lo, hi)
        z = tf.random.stateless_normal((batch, self.latent_dim), seeds[1]) * fake_ep
        fakes = self.generator(z, training=False)
        d_in = tf.concat([images, fakes], 0)
        labels = tf.concat([tf.ones((batch, 1)), tf.zeros((batch, 1))], 0)
        d_ep = tf.concat([ep, fake_ep], 0)
        d_ecal = tf.concat([cellsum, fitted_cellsum(fake_ep, self.config.xscale)], 0)
        d = self._losses(self.discriminator(d_in, training=False), (labels, d_ep, d_ecal))
        g_ep = tf.random.stateless_uniform((batch, 1), seeds[2], lo, hi)
        g_z = tf.random.stateless_normal((batch, self.latent_dim), seeds[3]) * g_ep
        g_out = self.discriminator(self.generator(g_z, training=False), training=False)
        g = self._losses(
            g_out, (tf.ones((batch, 1)), g_ep, fitted_cellsum(g_ep, self.config.xscale))
        )
        return {f"d_{k}": v for k, v in d.items()} | {f"g_{k}": v for k, v in g.items()}


def _flatten(results: dict[str, dict[str, tf.Tensor]]) -> dict[str, tf.Tensor]:
    flat = {
        f"{phase}_{part}": value
        for phase, parts in results.items()
        for part, value in parts.items()
    }
    flat["d_loss"] = 0.5 * (results["d_real"]["loss"] + results["d_fake"]["loss"])
    flat["g_loss"] = 0.5 * (results["g1"]["loss"] + results["g2"]["loss"])
    return flat


def dropout_generators(model: tf.keras.Model) -> list[tf.random.Generator]:
    """The tf.random.Generator of each Dropout layer (their states are training state).

    The layers must be built with `force_generator=True` (gan3d.model does so); Keras keeps
    these generators out of `model.weights`, so the trainer checkpoints them explicitly.
    """
    gens = []
    for layer in model.layers:
        if isinstance(layer, tf.keras.layers.Dropout):
            gen = getattr(getattr(layer, "_random_generator", None), "_generator", None)
            if not isinstance(gen, tf.random.Generator):
                raise ValueError(
                    f"Dropout layer {layer.name!r} has no tf.random.Generator; "
                    "build it with force_generator=True (see gan3d.model)"
                )
            gens.append(gen)
    return gens
