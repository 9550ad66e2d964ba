"""Keras' BatchNormalization and Dropout as the 3DGAN's discriminator uses them, in the forms
TensorFlow's CPU kernels run fastest: same variables, same checkpoints, same statistics.

- TensorFlow's fused batch norm on 5D (NDHWC) tensors is Eigen code, 4 to 5 times slower, forward
  and gradients, than the 4D (NHWC) kernels oneDNN takes. The statistics are per channel, so
  folding H and W into one axis changes nothing but the speed.
- Dropout's mask needs only a comparison with the rate: 16 random bits per value, half the
  Philox work of a float32 uniform; applied as a product (Keras selects), it costs about 0.6x
  Keras' forward and gradient.
"""

from __future__ import annotations

import tensorflow as tf

MASK_LEVELS = 1 << 16  # a dropout mask value is 16 random bits


class FoldedBatchNormalization(tf.keras.layers.BatchNormalization):
    """`BatchNormalization(axis=-1)` that normalizes a 5D tensor as a 4D one (H and W folded)."""

    def build(self, input_shape):
        super().build(input_shape)
        shape = tf.TensorShape(input_shape)
        if shape.rank != 5 or list(self.axis) != [4] or not self.fused:
            raise ValueError(
                f"{self.name}: FoldedBatchNormalization needs a 5D channels-last input, "
                f"got shape {shape} with axis {self.axis}"
            )
        self._data_format = "NHWC"  # what the fused kernels see: (batch, D, H*W, channels)

    def call(self, inputs, training=None, mask=None):
        _, d, h, w, c = inputs.shape
        folded = tf.reshape(inputs, (-1, d, h * w, c))
        out = super().call(folded, training=training, mask=mask)
        return tf.reshape(out, tf.shape(inputs))


class BitsDropout(tf.keras.layers.Dropout):
    """`Dropout(rate, force_generator=True)` whose mask compares 16 random bits with the rate.

    A value is kept when its bits are at least round(rate * 2^16), so the rate is kept to within
    2^-17 (0.2 becomes 0.19999695), and the kept values are scaled by the inverse of the exact
    keeping probability: the output's expectation is the input, as with Keras' own. The bits come
    from the layer's `tf.random.Generator` (its state is training state, in the checkpoint).
    """

    def __init__(self, rate: float, **kwargs):
        if kwargs.get("noise_shape") is not None:
            raise ValueError("BitsDropout draws one mask value per input value (no noise_shape)")
        if not kwargs.pop("force_generator", True):
            raise ValueError("BitsDropout draws its bits from a tf.random.Generator")
        super().__init__(rate, force_generator=True, **kwargs)
        self.threshold = round(float(rate) * MASK_LEVELS)
        if not 0 < self.threshold < MASK_LEVELS:
            raise ValueError(f"BitsDropout needs 2^-17 < rate < 1 - 2^-17, got {rate}")
        self.scale = MASK_LEVELS / (MASK_LEVELS - self.threshold)

    def call(self, inputs, training=None):
        if training is None:
            training = tf.keras.backend.learning_phase()
        return tf.__internal__.smart_cond.smart_cond(
            training, lambda: self._dropped(inputs), lambda: tf.identity(inputs)
        )

    def _dropped(self, inputs: tf.Tensor) -> tf.Tensor:
        self._random_generator._maybe_init()
        shape = tf.shape(inputs, out_type=tf.int64)
        channels = inputs.shape[-1]
        pairs = (channels + 1) // 2  # two 16-bit values per 32-bit draw
        words = self._random_generator._generator.uniform_full_int(
            tf.concat([shape[:-1], [pairs]], axis=0), dtype=tf.uint32
        )
        bits = tf.reshape(
            tf.bitcast(words, tf.uint16), tf.concat([shape[:-1], [2 * pairs]], axis=0)
        )
        if 2 * pairs != channels:
            bits = bits[..., :channels]
        keep = tf.cast(bits >= tf.constant(self.threshold, tf.uint16), inputs.dtype)
        # a product with the scaled mask, not tf.where: its gradient is one multiply, not a select
        return inputs * (keep * tf.constant(self.scale, inputs.dtype))
