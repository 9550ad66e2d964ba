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

On AMX the first layer's 1-channel input also leaves oneDNN's bf16 kernels idle, forward and
weight-gradient as well: `FoldedImageConv3D` stacks the image's 5 depth-shifted copies as 5 input
channels and convolves them with a 1 x 5 x 5 kernel (the 5^3 kernel's depth moved into its input
channels), 1.4-1.7x faster in bf16 on a Xeon with AMX (docs/benchmarks.md); in float32 its
forward and weight-gradient are slower, and the frequency domain is faster than any of them.

In a bf16 model every convolution hands its output on in float32 and adds its bias there: the
layers after it compute in float32 anyway (gan3d.model.ELEMENTWISE_DTYPE), and TensorFlow's bias
add and its gradient in float32 cost less than in bfloat16 (the cast moves before the bias add).

Parameters and outputs of these layers are those of `tf.keras.layers.Conv3D` (they subclass
it), so the model is the reference model.
"""

from __future__ import annotations

import tensorflow as tf

from gan3d import cpu


def _same_pads(kernel_size: tuple[int, ...]) -> list[int]:
    return [(k - 1) // 2 for k in kernel_size]  # TF's SAME: the odd pad goes after


def _input_grad(x: tf.Tensor, kernel: tf.Tensor, dy: tf.Tensor, padding: str) -> tf.Tensor:
    """TensorFlow's own input-gradient of a stride-1 conv3d (oneDNN's backward-data kernel)."""
    return tf.raw_ops.Conv3DBackpropInputV2(
        input_sizes=tf.shape(x), filter=kernel, out_backprop=dy, strides=[1] * 5, padding=padding
    )


def _kernel_grad(x: tf.Tensor, kernel: tf.Tensor, dy: tf.Tensor, padding: str) -> tf.Tensor:
    """TensorFlow's own weight-gradient of a stride-1 conv3d (oneDNN's backward-weights kernel)."""
    return tf.raw_ops.Conv3DBackpropFilterV2(
        input=x, filter_sizes=tf.shape(kernel), out_backprop=dy, strides=[1] * 5, padding=padding
    )


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
    # tap-major
    t = tf.transpose(tf.reshape(tf.cast(t, tf.float32), (-1, d, h, w, taps)), (4, 0, 1, 2, 3))
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
    # the input: a Keras kernel is an AutoCastVariable, float32 until read
    col2im = col2im_pays(x.dtype)

    @tf.custom_gradient
    def conv(x, kernel):
        y = tf.nn.conv3d(x, kernel, strides, "SAME")

        def grad(dy):
            dw = _kernel_grad(x, kernel, dy, "SAME")
            if col2im:
                return col2im_input_grad(dy, kernel, x.shape), dw
            return _input_grad(x, kernel, dy, "SAME"), dw

        return y, grad

    return conv(x, tf.convert_to_tensor(kernel))


def _fold_depth(x: tf.Tensor, kd: int) -> tf.Tensor:
    """(b, d, h, w, 1) -> (b, d, h, w, kd): channel i holds the SAME-padded volume shifted by i
    along depth, so a depth-1 convolution over these channels sums the kd depth taps."""
    before = (kd - 1) // 2
    d = int(x.shape[1])
    padded = tf.pad(x, [[0, 0], [before, kd - 1 - before], [0, 0], [0, 0], [0, 0]])
    return tf.concat([padded[:, i : i + d] for i in range(kd)], axis=-1)


def _unfold_depth(dxd: tf.Tensor, kd: int) -> tf.Tensor:
    """The gradient of `_fold_depth`: channel i's gradient added back at its depth shift, in
    float32 (as col2im_input_grad sums its taps), then cut to the unpadded volume."""
    before = (kd - 1) // 2
    d = int(dxd.shape[1])
    g = tf.cast(dxd, tf.float32)
    full = tf.add_n(
        [
            tf.pad(g[..., i : i + 1], [[0, 0], [i, kd - 1 - i], [0, 0], [0, 0], [0, 0]])
            for i in range(kd)
        ]
    )
    return tf.cast(full[:, before : before + d], dxd.dtype)


def folded_image_conv3d(x: tf.Tensor, kernel: tf.Tensor) -> tf.Tensor:
    """Stride-1 SAME conv3d of a 1-channel volume with the depth taps as input channels.

    y[q] = sum_{i,j,k} x[q + (i,j,k) - pad] W[i,j,k] = sum_{j,k} sum_i xd_i[q + (0,j,k) - pad] W[i,j,k]
    with xd_i the volume shifted by i along depth: one (1, kh, kw) convolution of kd channels.
    Both gradients are the backprop kernels of that convolution (the weight-gradient's taps moved
    back), so forward, input- and weight-gradient all run with kd input channels instead of 1."""
    kd = int(kernel.shape[0])
    strides = [1, 1, 1, 1, 1]

    @tf.custom_gradient
    def conv(x, kernel):
        xd = _fold_depth(x, kd)
        wd = tf.transpose(kernel, (3, 1, 2, 0, 4))  # (1, kh, kw, kd, cout): depth taps as channels
        y = tf.nn.conv3d(xd, wd, strides, "SAME")

        def grad(dy):
            dxd, dwd = _input_grad(xd, wd, dy, "SAME"), _kernel_grad(xd, wd, dy, "SAME")
            return _unfold_depth(dxd, kd), tf.transpose(dwd, (3, 1, 2, 0, 4))

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

    @tf.custom_gradient
    def conv(x, kernel):
        def grad(dy):
            return _input_grad(x, kernel, dy, padding), _kernel_grad(x, kernel, dy, padding)

        return packed_forward(x, kernel, padding), grad

    return conv(x, tf.convert_to_tensor(kernel))


class Conv3D(tf.keras.layers.Conv3D):
    """`tf.keras.layers.Conv3D` whose output leaves in the layer's variable dtype (float32) with
    the bias added there; in a float32 model it is Keras' own. It keeps Keras' class name: a
    `.weights.h5` file names a layer's weights by its class (gan3d.model.generator_for_weights)."""

    def add_weight(self, name=None, *args, **kwargs):
        if name == "bias":  # a float32 bias inside a bfloat16 call, not cast down to bfloat16
            kwargs["experimental_autocast"] = False
        return super().add_weight(name, *args, **kwargs)

    def convolution_op(self, inputs, kernel):
        return _in_variable_dtype(self, tf.keras.layers.Conv3D.convolution_op(self, inputs, kernel))


def _in_variable_dtype(layer: tf.keras.layers.Layer, y: tf.Tensor) -> tf.Tensor:
    """The convolution's output as the bias add takes it: float32 (a no-op in a float32 model).
    The probe (gan3d.formprobe) calls the forms' `convolution_op` on a layer of another form, so
    these methods name their functions, not `super()`."""
    return tf.cast(y, layer.dtype)


class PackedConv3D(Conv3D):
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
        return _in_variable_dtype(self, packed_conv3d(inputs, kernel, self.padding.upper()))


class ImageConv3D(Conv3D):
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
        return _in_variable_dtype(self, image_conv3d(inputs, kernel))


class FoldedImageConv3D(ImageConv3D):
    """`ImageConv3D` computed as `folded_image_conv3d`: faster where the bf16 kernels are AMX."""

    def convolution_op(self, inputs, kernel):
        return _in_variable_dtype(self, folded_image_conv3d(inputs, kernel))
