"""Faster but mathematically identical formulations of 3DGAN convolutions on CPU.

oneDNN (TF 2.15's CPU backend) computes the input-gradient of a convolution whose input has
one channel (the discriminator's first layer, 1 -> 32 channels on the 25^3 image) about ten
times slower than the same convolution's forward pass: its backward-data kernel writes a
1-channel output, which leaves the AVX-512 lanes idle. `ImageConv3D` computes that gradient
as one matmul (dy x W^T, 125-wide) followed by a col2im of 125 shifted adds, ~3x faster; the
forward pass and the weight gradient are the usual oneDNN kernels. (With AMX, oneDNN's bf16
backward-data kernel is the faster one; `col2im_pays` decides.)

The reference pads the discriminator's later layers explicitly (ZeroPadding3D(2) then a VALID
5^3 convolution); that is exactly a SAME convolution of the unpadded input, which needs no
29^3 copy. Most layers have 6 or 8 output channels, which leave half of oneDNN's 16-wide
channel blocks idle; `PackedConv3D` computes their forward pass with two neighbouring output
positions side by side in 16 (or 12) channels (`packed_forward`): forward passes 1.1-2.5x
faster in fp32 and up to 2.7x in bf16 on an Intel AMX machine (the bf16 32 -> 8 layer a tie;
docs/benchmarks.md), and both gradients with TensorFlow's own kernels.

Parameters and outputs of these layers are those of `tf.keras.layers.Conv3D` (they subclass
it), so the model is the reference model.
"""

from __future__ import annotations

import tensorflow as tf

from gan3d import cpu


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
    t = tf.transpose(
        tf.reshape(tf.cast(t, tf.float32), (-1, d, h, w, taps)), (4, 0, 1, 2, 3)
    )  # tap-major
    parts = []
    for i in range(kd):
        for j in range(kh):
            for k in range(kw):
                tap = (i * kh + j) * kw + k
                parts.append(
                    tf.pad(t[tap], [[0, 0], [i, kd - 1 - i], [j, kh - 1 - j], [k, kw - 1 - k]])
                )
    pd, ph, pw = _same_pads((kd, kh, kw))
    full = tf.add_n(parts)
    return tf.cast(full[:, pd : pd + d, ph : ph + h, pw : pw + w, None], dy.dtype)


@tf.autograph.experimental.do_not_convert  # plain Python, decided while tracing
def col2im_pays(dtype: tf.DType) -> bool:
    """Whether the col2im input-gradient beats oneDNN's own: not for bf16 on AMX, where oneDNN's
    backward-data kernel ran 3.5x faster (docs/benchmarks.md). In fp32 the col2im measured 2.5x
    faster on the same machine; bf16 without AMX keeps it as measured before (as part of the kit's
    kernels, faster than the reference structure on a Zen 4), not measured alone."""
    return not (dtype == tf.bfloat16 and cpu.bf16_support() == "amx")


def image_conv3d(x: tf.Tensor, kernel: tf.Tensor) -> tf.Tensor:
    """Stride-1 SAME conv3d of a 1-channel volume with the col2im input-gradient (where it pays)."""
    strides = [1, 1, 1, 1, 1]
    col2im = col2im_pays(
        x.dtype
    )  # the input: a Keras kernel is an AutoCastVariable, float32 until read

    @tf.custom_gradient
    def conv(x, kernel):
        y = tf.nn.conv3d(x, kernel, strides, "SAME")

        def grad(dy):
            dw = tf.raw_ops.Conv3DBackpropFilterV2(
                input=x,
                filter_sizes=tf.shape(kernel),
                out_backprop=dy,
                strides=strides,
                padding="SAME",
            )
            if col2im:
                return col2im_input_grad(dy, kernel, x.shape), dw
            dx = tf.raw_ops.Conv3DBackpropInputV2(
                input_sizes=tf.shape(x),
                filter=kernel,
                out_backprop=dy,
                strides=strides,
                padding="SAME",
            )
            return dx, dw

        return y, grad

    return conv(x, tf.convert_to_tensor(kernel))


def paired_kernel(kernel: tf.Tensor) -> tf.Tensor:
    """(kd, kh, kw, ci, co) -> (kd, kh, kw+1, ci, 2co): W at w-offset 0 in the first co output
    channels, W at w-offset 1 in the next co, so one stride-2 step along w computes 2 outputs."""
    return tf.concat(
        [
            tf.pad(kernel, [[0, 0], [0, 0], [0, 1], [0, 0], [0, 0]]),
            tf.pad(kernel, [[0, 0], [0, 0], [1, 0], [0, 0], [0, 0]]),
        ],
        axis=-1,
    )


def packed_forward(x: tf.Tensor, kernel: tf.Tensor, padding: str) -> tf.Tensor:
    """conv3d(x, kernel, stride 1, padding) computed with the output channels doubled.

    oneDNN's AVX-512/AMX kernels block output channels by 16: a conv with 6 or 8 of them
    leaves half the lanes idle. Computing output positions w=2j and w=2j+1 as the two channel
    halves of one stride-2 conv with the paired kernel fills them; channels-last, the
    (…, j, 2, co) result is the (…, 2j + s, co) output, so the reshape is free. The same
    products are summed in the same order, so the result equals tf.nn.conv3d's."""
    kd, kh, kw, _, co = kernel.shape
    width = int(x.shape[3]) - (kw - 1 if padding == "VALID" else 0)
    if padding == "VALID" and width % 2:  # one zero column more, for the last pair's second half
        # tf.concat, not tf.pad: TF 2.15's oneDNN graph rewrite folds a Pad into the convolution
        # after it, and gets the shape wrong when another Pad (a ZeroPadding3D) comes before it
        x = tf.concat([x, tf.zeros_like(x[:, :, :, :1])], axis=3)
    # SAME with stride 2 along w pads (kw-1)/2 before, as the stride-1 SAME conv does
    y = tf.nn.conv3d(x, paired_kernel(kernel), [1, 1, 1, 2, 1], padding)
    return tf.reshape(y, (-1, y.shape[1], y.shape[2], 2 * y.shape[3], co))[:, :, :, :width]


def packed_conv3d(x: tf.Tensor, kernel: tf.Tensor, padding: str) -> tf.Tensor:
    """Stride-1 conv3d ("SAME" with an odd kernel, or "VALID"): forward as `packed_forward`,
    input- and weight-gradient as TensorFlow's own backprop kernels for that padding."""
    strides = [1, 1, 1, 1, 1]

    @tf.custom_gradient
    def conv(x, kernel):
        def grad(dy):
            dx = tf.raw_ops.Conv3DBackpropInputV2(
                input_sizes=tf.shape(x),
                filter=kernel,
                out_backprop=dy,
                strides=strides,
                padding=padding,
            )
            dw = tf.raw_ops.Conv3DBackpropFilterV2(
                input=x,
                filter_sizes=tf.shape(kernel),
                out_backprop=dy,
                strides=strides,
                padding=padding,
            )
            return dx, dw

        return packed_forward(x, kernel, padding), grad

    return conv(x, tf.convert_to_tensor(kernel))


class PackedConv3D(tf.keras.layers.Conv3D):
    """`Conv3D` (stride 1, 'valid' or 'same' with an odd kernel) run as `packed_conv3d`.

    With padding 'same' it is also the reference's ZeroPadding3D((K-1)/2) + VALID pair fused."""

    def build(self, input_shape):
        super().build(input_shape)
        odd = all(k % 2 == 1 for k in self.kernel_size)
        if (
            self.padding not in ("valid", "same")
            or (self.padding == "same" and not odd)
            or tuple(self.strides) != (1, 1, 1)
            or tuple(self.dilation_rate) != (1, 1, 1)
            or self.data_format != "channels_last"
            or self.groups != 1
        ):
            raise ValueError(
                f"{self.name}: PackedConv3D needs padding='valid' or 'same' with an odd kernel, "
                "stride 1, no dilation, one group and channels_last"
            )

    def convolution_op(self, inputs, kernel):
        return packed_conv3d(inputs, kernel, self.padding.upper())


class ImageConv3D(tf.keras.layers.Conv3D):
    """`Conv3D` (stride 1, 'same') on a 1-channel image with the faster input-gradient."""

    def build(self, input_shape):
        super().build(input_shape)
        if (
            int(input_shape[-1]) != 1
            or self.padding != "same"
            or tuple(self.strides) != (1, 1, 1)
            or tuple(self.dilation_rate) != (1, 1, 1)
            or self.data_format != "channels_last"
        ):
            raise ValueError(
                f"{self.name}: ImageConv3D needs a 1-channel channels_last input, "
                "padding='same', stride 1 and no dilation"
            )

    def convolution_op(self, inputs, kernel):
        return image_conv3d(inputs, kernel)
