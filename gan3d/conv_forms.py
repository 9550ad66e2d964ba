"""Faster but mathematically identical formulations of 3DGAN convolutions on CPU.

oneDNN (TF 2.15's CPU backend) computes the input-gradient of a convolution whose input has
one channel (the discriminator's first layer, 1 -> 32 channels on the 25^3 image) about ten
times slower than the same convolution's forward pass: its backward-data kernel writes a
1-channel output, which leaves the AVX-512 lanes idle. `ImageConv3D` computes that gradient
as one matmul (dy x W^T, 125-wide) followed by a col2im of 125 shifted adds, ~3x faster; the
forward pass and the weight gradient are the usual oneDNN kernels.

The reference pads the discriminator's later layers explicitly (ZeroPadding3D(2) then a VALID
5^3 convolution); that is exactly a SAME convolution of the unpadded input, which oneDNN runs
faster (no 29^3 copy, and its SAME gradient kernels beat VALID-then-slice). `SameConv3D` does
that, computing the forward pass as the transposed convolution of the spatially flipped,
channel-swapped kernel (oneDNN's backward-data kernel, faster than its forward kernel for
32 -> 8 channels) and both gradients as SAME kernels.

Parameters and outputs of both layers are those of `tf.keras.layers.Conv3D` (they subclass
it), so the model is the reference model.
"""
from __future__ import annotations

import tensorflow as tf


def _same_pads(kernel_size: tuple[int, ...]) -> list[int]:
    return [(k - 1) // 2 for k in kernel_size]  # TF's SAME: the odd pad goes after


def col2im_input_grad(dy: tf.Tensor, kernel: tf.Tensor, input_shape) -> tf.Tensor:
    """Gradient wrt the 1-channel input of a stride-1 SAME conv3d, as matmul + col2im.

    y[q] = sum_k x[q + k - pad] W[k]  =>  dx[p] = sum_k T_k[p + pad - k], T = dy . W^T.
    """
    kd, kh, kw, cin, cout = kernel.shape
    assert cin == 1, "col2im_input_grad is for 1-channel inputs"
    d, h, w = (int(input_shape[i]) for i in (1, 2, 3))
    taps = kd * kh * kw
    t = tf.matmul(tf.reshape(dy, (-1, cout)), tf.reshape(kernel, (taps, cout)), transpose_b=True)
    # The 125 shifted adds run in float32 also for bf16 operands: oneDNN's own convolutions
    # accumulate in float32, and 125 roundings to bf16's 8-bit mantissa would not.
    t = tf.transpose(tf.reshape(tf.cast(t, tf.float32), (-1, d, h, w, taps)), (4, 0, 1, 2, 3))  # tap-major
    parts = []
    for i in range(kd):
        for j in range(kh):
            for k in range(kw):
                tap = (i * kh + j) * kw + k
                parts.append(tf.pad(t[tap], [[0, 0], [i, kd - 1 - i], [j, kh - 1 - j], [k, kw - 1 - k]]))
    pd, ph, pw = _same_pads((kd, kh, kw))
    full = tf.add_n(parts)
    return tf.cast(full[:, pd:pd + d, ph:ph + h, pw:pw + w, None], dy.dtype)


def image_conv3d(x: tf.Tensor, kernel: tf.Tensor) -> tf.Tensor:
    """Stride-1 SAME conv3d of a 1-channel volume with the col2im input-gradient."""
    strides = [1, 1, 1, 1, 1]

    @tf.custom_gradient
    def conv(x, kernel):
        y = tf.nn.conv3d(x, kernel, strides, "SAME")

        def grad(dy):
            dw = tf.raw_ops.Conv3DBackpropFilterV2(input=x, filter_sizes=tf.shape(kernel), out_backprop=dy,
                                                   strides=strides, padding="SAME")
            return col2im_input_grad(dy, kernel, x.shape), dw

        return y, grad

    return conv(x, tf.convert_to_tensor(kernel))


def flipped_kernel(kernel: tf.Tensor) -> tf.Tensor:
    """W'[k, o, c] = W[K-1-k, c, o]: conv with W == transposed conv with W' (odd K, SAME)."""
    return tf.transpose(tf.reverse(kernel, [0, 1, 2]), (0, 1, 2, 4, 3))


def same_conv3d(x: tf.Tensor, kernel: tf.Tensor) -> tf.Tensor:
    """Stride-1 SAME conv3d with an odd kernel, forward as a transposed conv of the flipped kernel.

    y[q] = sum_k x[q + k - p] W[k] with p = (K-1)/2; the transposed conv with pads K-1-p = p
    gives sum_k' x[q - k' + p] W'[k']^T, the same sum with k = K-1-k'.
    """
    strides = [1, 1, 1, 1, 1]

    @tf.custom_gradient
    def conv(x, kernel):
        out_shape = tf.concat([tf.shape(x)[:4], tf.shape(kernel)[4:]], 0)
        y = tf.raw_ops.Conv3DBackpropInputV2(input_sizes=out_shape, filter=flipped_kernel(kernel), out_backprop=x,
                                             strides=strides, padding="SAME")
        y = tf.ensure_shape(y, x.shape[:4].concatenate(kernel.shape[4:]))

        def grad(dy):
            dx = tf.raw_ops.Conv3DBackpropInputV2(input_sizes=tf.shape(x), filter=kernel, out_backprop=dy,
                                                  strides=strides, padding="SAME")
            dw = tf.raw_ops.Conv3DBackpropFilterV2(input=x, filter_sizes=tf.shape(kernel), out_backprop=dy,
                                                   strides=strides, padding="SAME")
            return dx, dw

        return y, grad

    return conv(x, tf.convert_to_tensor(kernel))


class SameConv3D(tf.keras.layers.Conv3D):
    """`Conv3D` (stride 1, 'same', odd kernel) run as `same_conv3d`: ZeroPadding3D((K-1)/2) + VALID fused."""

    def build(self, input_shape):
        super().build(input_shape)
        if self.padding != "same" or tuple(self.strides) != (1, 1, 1) or tuple(self.dilation_rate) != (1, 1, 1) \
                or self.data_format != "channels_last" or any(k % 2 == 0 for k in self.kernel_size) or self.groups != 1:
            raise ValueError(f"{self.name}: SameConv3D needs padding='same', an odd kernel, stride 1, "
                             "no dilation, one group and channels_last")

    def convolution_op(self, inputs, kernel):
        return same_conv3d(inputs, kernel)


class ImageConv3D(tf.keras.layers.Conv3D):
    """`Conv3D` (stride 1, 'same') on a 1-channel image with the faster input-gradient."""

    def build(self, input_shape):
        super().build(input_shape)
        if int(input_shape[-1]) != 1 or self.padding != "same" or tuple(self.strides) != (1, 1, 1) \
                or tuple(self.dilation_rate) != (1, 1, 1) or self.data_format != "channels_last":
            raise ValueError(f"{self.name}: ImageConv3D needs a 1-channel channels_last input, "
                             "padding='same', stride 1 and no dilation")

    def convolution_op(self, inputs, kernel):
        return image_conv3d(inputs, kernel)
