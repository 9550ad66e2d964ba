"""Stride-1 3D convolutions computed through FFTs, for a float32 model's few-channel layers.

A 5^3 convolution costs 125 multiply-adds per output and channel pair; through the FFT it costs
one complex multiply-add per frequency and channel pair plus the transforms, which on the
3DGAN's 25^3 volumes is several times less arithmetic. The forward pass and both gradients
share the spectra of the input and the kernel (computed once in the forward pass) and of the
output gradient (once in the backward pass).

Sizes: along each axis the transform length n = L + max(pad_before, pad_after) (27 for a SAME
5^3 conv on 25, L for VALID), the smallest that keeps the circular products free of
wrap-around for all three passes (and at least the kernel's size k, for the weight gradient's
k shifts). The kernel is transformed flipped and unshifted; the output is then read at offset
s = pad_after, and the output gradient is placed at that offset, which makes every pass a
plain crop (no roll).

The results equal `tf.nn.conv3d` and its gradients up to float32 rounding (relative 1e-6;
tests/gan3d_model/test_fft_conv.py).
"""
from __future__ import annotations

import tensorflow as tf


def _geometry(spatial: tuple[int, int, int], ksize: tuple[int, int, int], padding: str):
    """Per axis: (transform length, output offset s, output length) for a stride-1 conv."""
    n, s, out = [], [], []
    for length, k in zip(spatial, ksize):
        before = (k - 1) // 2 if padding == "SAME" else 0  # TF's SAME: the odd pad goes after
        after = k - 1 - before if padding == "SAME" else 0
        n.append(max(length + max(before, after), k))  # k: the weight gradient's k shifts
        s.append(k - 1 - before)
        out.append(length if padding == "SAME" else length - k + 1)
    return n, s, out


def _to_freq(t: tf.Tensor, n: list[int]) -> tf.Tensor:
    """(B, d, h, w, C) real -> (F, B, C) complex: C-first rfft3d (zero-padded to n), frequency-major."""
    b, c = tf.shape(t)[0], t.shape[-1]
    pads = [[0, 0], [0, 0]] + [[0, n[i] - int(t.shape[1 + i])] for i in range(3)]
    spec = tf.signal.rfft3d(tf.pad(tf.transpose(t, (0, 4, 1, 2, 3)), pads))  # faster than rfft3d's own padding
    return tf.transpose(tf.reshape(spec, (b, c, -1)), (2, 0, 1))


def _to_space(f: tf.Tensor, n: list[int], start: list[int], size: list[int]) -> tf.Tensor:
    """(F, B, C) complex -> the [start, start+size) window of the inverse rfft3d, as (B, d, h, w, C)."""
    b, c = tf.shape(f)[1], f.shape[-1]
    spec = tf.reshape(tf.transpose(f, (1, 2, 0)), (b, c, n[0], n[1], n[2] // 2 + 1))
    vol = tf.signal.irfft3d(spec, fft_length=n)
    vol = vol[:, :, start[0]:start[0] + size[0], start[1]:start[1] + size[1], start[2]:start[2] + size[2]]
    return tf.transpose(vol, (0, 2, 3, 4, 1))


def fft_conv3d(x: tf.Tensor, kernel: tf.Tensor, padding: str) -> tf.Tensor:
    """tf.nn.conv3d(x, kernel, stride 1, padding) in float32, forward and gradients via FFT."""
    ksize = tuple(int(k) for k in kernel.shape[:3])
    spatial = [int(d) for d in x.shape[1:4]]
    n, s, out = _geometry(tuple(spatial), ksize, padding)

    @tf.custom_gradient
    def conv(x, kernel):
        xf = _to_freq(x, n)  # (F, B, I)
        # the flipped kernel, as an (I, O, k, k, k) "batch" of volumes -> (F, I, O)
        flipped = tf.reverse(tf.transpose(kernel, (3, 4, 0, 1, 2)), axis=(2, 3, 4))
        spec = tf.signal.rfft3d(flipped, fft_length=n)
        wf = tf.transpose(tf.reshape(spec, (kernel.shape[3], kernel.shape[4], -1)), (2, 0, 1))
        y = _to_space(tf.matmul(xf, wf), n, s, out)

        def grad(dy):
            placed = tf.pad(dy, [[0, 0], [s[0], n[0] - out[0] - s[0]], [s[1], n[1] - out[1] - s[1]],
                                 [s[2], n[2] - out[2] - s[2]], [0, 0]])
            dyf = _to_freq(placed, n)  # (F, B, O)
            dx = _to_space(tf.matmul(dyf, wf, adjoint_b=True), n, [0, 0, 0], spatial)
            corr = tf.matmul(xf, dyf, adjoint_a=True)  # (F, I, O): sum over the batch
            i, o = kernel.shape[3], kernel.shape[4]
            r = tf.signal.irfft3d(tf.reshape(tf.transpose(corr, (1, 2, 0)), (i, o, n[0], n[1], n[2] // 2 + 1)),
                                  fft_length=n)[:, :, :ksize[0], :ksize[1], :ksize[2]]
            dw = tf.transpose(tf.reverse(r, axis=(2, 3, 4)), (2, 3, 4, 0, 1))
            return dx, dw

        return y, grad

    return conv(x, tf.convert_to_tensor(kernel))


class FFTConv3D(tf.keras.layers.Conv3D):
    """`Conv3D` (stride 1, 'valid' or 'same', float32) run as `fft_conv3d`: same variables, same outputs."""

    def build(self, input_shape):
        super().build(input_shape)
        if self.padding not in ("valid", "same") or tuple(self.strides) != (1, 1, 1) \
                or tuple(self.dilation_rate) != (1, 1, 1) or self.data_format != "channels_last" \
                or self.groups != 1 or self.compute_dtype != "float32":
            raise ValueError(f"{self.name}: FFTConv3D needs padding='valid' or 'same', stride 1, no dilation, "
                             "one group, channels_last and float32 compute")

    def convolution_op(self, inputs, kernel):
        return fft_conv3d(inputs, kernel, self.padding.upper())


def fft_layer_names(*models: tf.keras.Model) -> list[str]:
    """The layers of `models` computed through FFTs (a run's record names them: their arithmetic is
    less than the model FLOP counted for them)."""
    return sorted(layer.name for m in models for layer in m.layers if isinstance(layer, FFTConv3D))
