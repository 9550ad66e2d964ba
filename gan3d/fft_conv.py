"""Stride-1 3D convolutions computed in the frequency
domain, for the model's few-channel layers (in float32, in a bf16 model too: they take its bfloat16
activations, and give float32 to the float32 layers after them).

A 5^3 convolution costs 125 multiply-adds per output and channel pair; in the frequency domain it
costs one complex multiply-add per frequency and channel pair plus the transforms, which on the
3DGAN's 25^3 volumes is several times less arithmetic.

The transforms are discrete Fourier transforms written as matrix products, one axis at a time,
on a spatial-major layout (d, h, w, channels, batch): at these lengths (25-27) oneDNN's matrix
products beat TensorFlow's FFT kernels, and the layout needs no transposes between the axes or
before the per-frequency channel mixing. A complex tensor is a real one whose axis after the
frequency axis holds (real, imaginary), so every complex product is one real matrix product.
The zero padding, the output's offset and the crops are inside the matrices (no pad or slice), and
every step is linear: the gradients are the steps' adjoints (products with the transposed
matrices), as TensorFlow derives them, sharing the forward pass's spectra.

Sizes: along each axis the transform length n = L + max(pad_before, pad_after) (27 for a SAME
5^3 conv on 25, L for VALID), the smallest that keeps the circular products free of
wrap-around for all three passes (and at least the kernel's size k, for the weight gradient's
k shifts). The kernel is transformed flipped and unshifted; the output is then the window at
offset s = pad_after of the circular result, which the inverse matrices compute alone.

The results equal `tf.nn.conv3d` and its gradients up to float32 rounding (relative 1e-6;
tests/gan3d_model/test_fft_conv.py). Always float32: bfloat16 transforms were faster, but their
rounding is relative to the whole volume's norm, not to each cell, and the full preset's showers
left the fp32 seed spread with them (docs/benchmarks.md).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

Axes = tuple[int, int, int]


def _axes(dims) -> Axes:
    """Three spatial sizes (of a TensorShape slice) as ints."""
    d0, d1, d2 = (int(d) for d in dims)
    return d0, d1, d2


def _geometry(spatial: Axes, ksize: Axes, padding: str):
    """Per axis: (transform length, output offset s, output length) for a stride-1 conv."""
    n, s, out = [], [], []
    for length, k in zip(spatial, ksize):
        before = (k - 1) // 2 if padding == "SAME" else 0  # TF's SAME: the odd pad goes after
        after = k - 1 - before if padding == "SAME" else 0
        n.append(max(length + max(before, after), k))  # k: the weight gradient's k shifts
        s.append(k - 1 - before)
        out.append(length if padding == "SAME" else length - k + 1)
    return tuple(n), tuple(s), tuple(out)


def _forward_matrices(
    n: Axes, length: Axes, offset: Axes, times_i: bool = False
) -> list[tf.Tensor]:
    """The DFT along each axis of `length` values placed at `offset` in a length-n transform.
    Axis 0 takes real values and keeps the n//2+1 frequencies a real signal needs, rows
    (frequency, re/im), times i with `times_i`; axes 1 and 2 take columns (re/im, position) to
    rows (frequency, re/im)."""
    mats = []
    for a in range(3):
        freqs = np.arange(n[a] // 2 + 1 if a == 0 else n[a])[:, None]
        e = np.exp(-2j * np.pi * freqs * (np.arange(length[a])[None, :] + offset[a]) / n[a])
        if a == 0:
            e = 1j * e if times_i else e
            m = np.stack([e.real, e.imag], axis=1).reshape(2 * len(freqs), length[a])
        else:
            block = np.array([[e.real, -e.imag], [e.imag, e.real]])  # [re/im out, re/im in, k, j]
            m = block.transpose(2, 0, 1, 3).reshape(2 * len(freqs), 2 * length[a])
        mats.append(tf.constant(m, tf.float32))
    return mats


def _inverse_matrices(n: Axes, start: Axes, size: Axes) -> list[tf.Tensor]:
    """The inverse DFT along each axis, giving only the positions [start, start+size). Axes 2 and 1
    take columns (frequency, re/im) to rows (re/im, position); axis 0 takes the n//2+1 kept
    frequencies to real values (the others are the conjugates of these)."""
    mats = []
    for a in range(3):
        kept = n[a] // 2 + 1 if a == 0 else n[a]
        g = (
            np.exp(
                2j
                * np.pi
                * np.arange(kept)[None, :]
                * (np.arange(size[a])[:, None] + start[a])
                / n[a]
            )
            / n[a]
        )
        if a == 0:
            twice = np.where((np.arange(kept) == 0) | (2 * np.arange(kept) == n[a]), 1.0, 2.0)
            m = np.stack([g.real * twice, -g.imag * twice], axis=2).reshape(size[a], 2 * kept)
        else:
            block = np.array([[g.real, -g.imag], [g.imag, g.real]])  # [re/im out, re/im in, p, k]
            m = block.transpose(0, 2, 3, 1).reshape(2 * size[a], 2 * kept)
        mats.append(tf.constant(m, tf.float32))
    return mats


def _axes_1_2(z: tf.Tensor, mats: list[tf.Tensor], n: Axes, length: Axes) -> tf.Tensor:
    """Axis 0's output (K0 re/im, L1 L2 R) -> the spectrum (K0 n1, n2 re/im, R)."""
    half = n[0] // 2 + 1
    z = tf.matmul(mats[1], tf.reshape(z, (half, 2 * length[1], -1)))  # (K0, n1 re/im, L2 R)
    # (K0 n1, n2 re/im, R)
    return tf.matmul(mats[2], tf.reshape(z, (half * n[1], 2 * length[2], -1)))


def _to_freq(t: tf.Tensor, mats: list[tf.Tensor], n: Axes, length: Axes) -> tf.Tensor:
    """(L0, L1, L2, R) real -> its spectrum (K0 n1, n2 re/im, R), K0 = n0//2+1."""
    return _axes_1_2(tf.matmul(mats[0], tf.reshape(t, (length[0], -1))), mats, n, length)


def _to_space(f: tf.Tensor, mats: list[tf.Tensor], n: Axes, size: Axes) -> tf.Tensor:
    """A spectrum (K0, n1, n2, re/im, R) -> the (size0, size1, size2, R) window of its inverse
    DFT.
    """
    half = n[0] // 2 + 1
    y = tf.matmul(mats[2], tf.reshape(f, (half * n[1], 2 * n[2], -1)))  # (K0 n1, re/im P2, R)
    y = tf.matmul(mats[1], tf.reshape(y, (half, 2 * n[1], -1)))  # (K0, re/im P1, P2 R)
    y = tf.matmul(mats[0], tf.reshape(y, (2 * half, -1)))  # (P0, P1 P2 R)
    return tf.reshape(y, (size[0], size[1], size[2], -1))


def _mixing(kernel: tf.Tensor, n: Axes) -> tf.Tensor:
    """The per-frequency channel mixing of a kernel as real (re/im O, re/im I) matrices, (F, 2O,
    2I): the columns for an input's real part are the kernel's spectrum W, those for its imaginary
    part i W (the transform of axis 0 times i); the kernel is flipped (the convolution's
    correlation)."""
    ksize = _axes(kernel.shape[:3])
    ci, co = int(kernel.shape[3]), int(kernel.shape[4])
    flipped = tf.reshape(
        tf.transpose(tf.reverse(kernel, axis=(0, 1, 2)), (0, 1, 2, 4, 3)), (ksize[0], -1)
    )
    mats, times_i = (
        _forward_matrices(n, ksize, (0, 0, 0)),
        _forward_matrices(n, ksize, (0, 0, 0), times_i=True),
    )
    half = n[0] // 2 + 1
    parts = [
        tf.reshape(tf.matmul(m[0], flipped), (2 * half, ksize[1], ksize[2], co, ci))
        for m in (mats, times_i)
    ]
    z = tf.stack(parts, axis=-2)  # (K0 re/im, k1, k2, O, re/im in, I)
    return tf.reshape(
        _axes_1_2(tf.reshape(z, (2 * half, -1)), mats, n, ksize),
        (half * n[1] * n[2], 2 * co, 2 * ci),
    )


def fft_conv3d(x: tf.Tensor, kernel: tf.Tensor, padding: str) -> tf.Tensor:
    """tf.nn.conv3d(x, kernel, stride 1, padding) in float32 via DFTs. Every step is a product with
    a constant matrix, a reshape or a transpose: both gradients are those steps' adjoints, as
    TensorFlow derives them (the output gradient's DFT is the transposed inverse matrices')."""
    ksize = _axes(kernel.shape[:3])
    spatial = _axes(x.shape[1:4])
    n, s, out = _geometry(spatial, ksize, padding)
    ci, co = int(kernel.shape[3]), int(kernel.shape[4])
    freqs = (n[0] // 2 + 1) * n[1] * n[2]
    xf = _to_freq(
        tf.transpose(x, (1, 2, 3, 4, 0)), _forward_matrices(n, spatial, (0, 0, 0)), n, spatial
    )
    yf = tf.matmul(_mixing(kernel, n), tf.reshape(xf, (freqs, 2 * ci, -1)))  # (F, re/im O, B)
    y = _to_space(yf, _inverse_matrices(n, s, out), n, out)  # (o0, o1, o2, O B)
    return tf.transpose(tf.reshape(y, out + (co, -1)), (4, 0, 1, 2, 3))


class FFTConv3D(tf.keras.layers.Conv3D):
    """`Conv3D` (stride 1, 'valid' or 'same', float32) run as `fft_conv3d`: same variables, same
    outputs.
    """

    def build(self, input_shape):
        super().build(input_shape)
        if (
            self.padding not in ("valid", "same")
            or tuple(self.strides) != (1, 1, 1)
            or tuple(self.dilation_rate) != (1, 1, 1)
            or self.data_format != "channels_last"
            or self.groups != 1
            or self.compute_dtype != "float32"
        ):
            raise ValueError(
                f"{self.name}: FFTConv3D needs padding='valid' or 'same', stride 1, no dilation, "
                "one group, channels_last and float32 compute"
            )

    def convolution_op(self, inputs, kernel):
        return fft_conv3d(inputs, kernel, self.padding.upper())


def fft_layer_names(*models: tf.keras.Model) -> list[str]:
    """The layers of `models` computed in the frequency domain (a run's record names them: their
    arithmetic is less than the model FLOP counted for them)."""
    return sorted(layer.name for m in models for layer in m.layers if isinstance(layer, FFTConv3D))
