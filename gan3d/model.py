"""The CERN 3DGAN generator and discriminator (channels_last tf.keras), plus the latent sampling.

The `full` preset reproduces the reference architecture exactly (872,948 and 73,450
parameters, see docs and tests); `tiny` runs the same code with fewer filters so that CPU
tests finish in seconds.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import tensorflow as tf
from keras.src.utils.generic_utils import to_snake_case

from gan3d.conv_forms import Conv3D, FoldedImageConv3D, ImageConv3D, PackedConv3D
from gan3d.fast_layers import BitsDropout, FoldedBatchNormalization
from gan3d.fft_conv import FFTConv3D

LEAKY_SLOPE = 0.3  # Keras-2 LeakyReLU default, as in the reference
BN_MOMENTUM = 0.99
BN_EPSILON = 1e-3
ENERGY_RANGE = (0.1, 5.0)  # primary energy Ep in units of 100 GeV
CELLSUM_FIT = (0.0018, -0.023, 0.11, -0.28, 2.21)  # cell sum / Ep vs Ep (100 GeV units)
IMAGE_SHAPE = (25, 25, 25, 1)
# Keras dtype policy per compute precision: "mixed_bfloat16" keeps variables (the master
# weights) in float32 and computes in bfloat16; BatchNormalization keeps its statistics in float32.
PRECISIONS = {"fp32": "float32", "bf16": "mixed_bfloat16"}


@dataclass(frozen=True)
class Preset:
    """Sizes of one model variant; every preset runs the same layer code."""

    latent_dim: int
    g_dense_channels: int  # the Dense output is reshaped to (7, 7, 8, g_dense_channels)
    g_filters: tuple[int, int, int]  # the three generator convolutions before the 1-channel one
    d_filters: tuple[int, int]  # first discriminator conv, then the three later convs
    dropout: float = 0.2


PRESETS: dict[str, Preset] = {
    "full": Preset(latent_dim=200, g_dense_channels=8, g_filters=(64, 6, 6), d_filters=(32, 8)),
    "tiny": Preset(latent_dim=32, g_dense_channels=2, g_filters=(8, 4, 2), d_filters=(8, 2)),
}


def get_preset(preset: str | Preset) -> Preset:
    """Resolve a preset name; an unknown name is a user error that lists the choices."""
    if isinstance(preset, Preset):
        return preset
    try:
        return PRESETS[preset]
    except KeyError:
        raise ValueError(
            f"unknown model preset {preset!r}; choose one of {sorted(PRESETS)}"
        ) from None


def check_precision(precision: str) -> str:
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; choose one of {sorted(PRECISIONS)}")
    return precision


@contextlib.contextmanager
def _policy(precision: str):
    """Build layers under `precision`'s dtype policy, then restore the process-wide one.

    A scope rather than a global switch, so that fp32 and bf16 models can live side by side
    (the equivalence test and the bench build both in one process).
    """
    before = tf.keras.mixed_precision.global_policy()
    tf.keras.mixed_precision.set_global_policy(PRECISIONS[check_precision(precision)])
    try:
        yield
    finally:
        tf.keras.mixed_precision.set_global_policy(before)


# Layers computed in the frequency domain by `--forms fft` (a float32 model's fixed table): those
# where it measured faster than the direct convolution on one CPU family (Zen 4, docs/benchmarks.md).
# `--forms auto` measures every layer's forms on the machine that runs instead (gan3d.formprobe).
FFT_LAYERS = frozenset(
    {"d_conv1", "d_conv2", "d_conv3", "d_conv4", "g_conv1", "g_conv2", "g_conv3"}
)

# The classes of the forms a convolution can run in (the same variables and outputs in each):
# oneDNN's own ("direct"), two output positions packed into the channel blocks ("packed"), the
# 1-channel input's gradient as matmul + col2im ("col2im"), the 1-channel input's depth taps as
# input channels ("folded"), the frequency domain ("fft": in float32, in a bf16 model too). In a
# bf16 model each takes bfloat16 and gives float32 to the float32 layers after it.
FORM_CLASSES: dict[str, type] = {
    "direct": Conv3D,
    "packed": PackedConv3D,
    "col2im": ImageConv3D,
    "folded": FoldedImageConv3D,
    "fft": FFTConv3D,
}
# Every convolution of the model and the forms it can take; the first is the form where none is
# chosen (what `fft=False` builds), and the one a measurement keeps unless another is clearly faster.
LAYER_FORMS: dict[str, tuple[str, ...]] = {
    "g_conv1": ("direct", "fft"),
    "g_conv2": ("packed", "direct", "fft"),
    "g_conv3": ("packed", "direct", "fft"),
    "g_conv4": ("direct", "fft"),
    "d_conv1": ("col2im", "direct", "folded", "fft"),
    "d_conv2": ("packed", "direct", "fft"),
    "d_conv3": ("packed", "direct", "fft"),
    "d_conv4": ("packed", "direct", "fft"),
}


def candidate_forms(precision: str) -> dict[str, tuple[str, ...]]:
    """The forms each layer can take in `precision`: every form in either (a bf16 model's
    frequency-domain layers compute in float32; on a CPU without AMX they beat bf16 convolutions)."""
    check_precision(precision)
    return dict(LAYER_FORMS)


def fixed_forms(precision: str, fft: bool = True) -> dict[str, str]:
    """The kit's built-in forms: each layer's first form, and with `fft` in float32 FFT_LAYERS in
    the frequency domain."""
    return {
        name: "fft" if fft and precision == "fp32" and name in FFT_LAYERS else forms[0]
        for name, forms in candidate_forms(precision).items()
    }


def check_forms(forms: Mapping[str, str], precision: str) -> dict[str, str]:
    """`forms` as a plain dict, every layer named once with a form it can take in `precision`;
    ValueError naming the first layer that is not."""
    allowed = candidate_forms(precision)
    if set(forms) != set(allowed):
        raise ValueError(
            f"layer forms name {sorted(forms)}; expected exactly the layers {sorted(allowed)}"
        )
    for name, form in forms.items():
        if form not in allowed[name]:
            raise ValueError(
                f"layer {name} cannot run as {form!r} in {precision}; it can as {allowed[name]}"
            )
    return {name: forms[name] for name in allowed}


def _resolve_forms(precision: str, fft: bool, forms: Mapping[str, str] | None) -> dict[str, str]:
    return fixed_forms(precision, fft) if forms is None else check_forms(forms, precision)


def _conv(
    filters: int,
    kernel: tuple[int, int, int],
    padding: str,
    name: str,
    forms: Mapping[str, str],
    **kw,
) -> tf.keras.layers.Layer:
    """A Conv3D in the form `forms` names for it (gan3d.conv_forms, gan3d.fft_conv, or Keras' own)."""
    cls = FORM_CLASSES[forms[name]]
    if cls is FFTConv3D:  # float32 whatever the model's precision (gan3d.fft_conv)
        kw["dtype"] = "float32"
    return cls(filters, kernel, padding=padding, data_format="channels_last", name=name, **kw)


def _padded_conv(x, filters: int, pad: int, i: int, forms: Mapping[str, str]):
    """The reference's ZeroPadding3D(pad) + VALID 5^3 Conv3D, fused when that is a SAME conv.

    With pad 2 the pair equals one SAME convolution of the unpadded input (same kernel, same
    output); with pad 1 (output shrinks by 2) the pad stays a layer.
    """
    if pad == 2:
        return _conv(filters, (5, 5, 5), "same", f"d_conv{i}", forms)(x)
    x = tf.keras.layers.ZeroPadding3D(pad, name=f"d_pad{i}")(x)
    return _conv(filters, (5, 5, 5), "valid", f"d_conv{i}", forms)(x)


# The elementwise layers between convolutions (LeakyReLU, BatchNorm, Dropout) compute in float32
# in a bf16 model too: TensorFlow's Eigen kernels for bf16 compares, selects and LeakyReLU
# gradients are scalar code, slower than a cast to float32 and back (docs/benchmarks.md).
ELEMENTWISE_DTYPE = "float32"

# Keras' BatchNormalization and Dropout in the forms TensorFlow runs fastest (gan3d.fast_layers);
# the reference structure the benchmarks compare against puts Keras' own back.
BATCH_NORM: type[tf.keras.layers.BatchNormalization] = FoldedBatchNormalization
DROPOUT: type[tf.keras.layers.Dropout] = BitsDropout


@contextlib.contextmanager
def batch_norm_class(cls: type[tf.keras.layers.BatchNormalization]):
    """Build models with `cls` as their BatchNorm layers (Keras' own, for the reference structure
    or a weights file saved with it)."""
    global BATCH_NORM
    saved, BATCH_NORM = BATCH_NORM, cls
    try:
        yield
    finally:
        BATCH_NORM = saved


# How a `.weights.h5` file names a layer's weights: by its class in snake case, numbered per class
# in the model's order (layers/fft_conv3d_1/vars/0), by the function Keras' saving_lib names it with.
_SAVED_CONV_FORMS = {to_snake_case(cls.__name__): form for form, cls in FORM_CLASSES.items()}
_SAVED_BATCH_NORMS = {
    to_snake_case(cls.__name__): cls
    for cls in (tf.keras.layers.BatchNormalization, FoldedBatchNormalization)
}
MAX_SAVED_LAYERS = 64  # the generator has 14 layers; more in a file is not one of its files


def generator_for_weights(path: str, preset: str | Preset, precision: str) -> tf.keras.Model:
    """The generator built in the classes a `.weights.h5` file was saved from, so that it loads:
    Keras names the weights there by layer class, so a file loads only into a model whose
    convolutions have the forms (and whose BatchNorms the class) of the one that saved it. Each
    convolution's form is told by its kernel's shape (the generator's are all different); a file
    that tells nothing gives the built-in forms, and load_weights then says what does not fit."""
    import h5py

    saved_forms: dict[tuple[int, ...], str] = {}
    batch_norm = BATCH_NORM
    with h5py.File(path, "r") as f:
        layers = f.get("layers")
        names = itertools.islice(layers, MAX_SAVED_LAYERS) if isinstance(layers, h5py.Group) else ()
        for name in names:
            kind = name.rsplit("_", 1)[0] if name.rsplit("_", 1)[-1].isdigit() else name
            kernel = layers.get(f"{name}/vars/0")
            if kind in _SAVED_CONV_FORMS and isinstance(kernel, h5py.Dataset):
                saved_forms[tuple(kernel.shape)] = _SAVED_CONV_FORMS[kind]
            batch_norm = _SAVED_BATCH_NORMS.get(kind, batch_norm)
    built = generator(preset, precision)
    forms = fixed_forms(precision)
    for name in forms:
        if name.startswith("g_"):
            shape = tuple(built.get_layer(name).kernel.shape)
            forms[name] = saved_forms.get(shape, forms[name])
    if forms == fixed_forms(precision) and batch_norm is BATCH_NORM:
        return built
    with batch_norm_class(batch_norm):
        return generator(preset, precision, forms=forms)


def _lrelu(name: str) -> tf.keras.layers.Layer:
    return tf.keras.layers.LeakyReLU(LEAKY_SLOPE, name=name, dtype=ELEMENTWISE_DTYPE)


def _bn(name: str) -> tf.keras.layers.Layer:
    return BATCH_NORM(
        axis=-1, momentum=BN_MOMENTUM, epsilon=BN_EPSILON, name=name, dtype=ELEMENTWISE_DTYPE
    )


def _dropout(rate: float, name: str) -> tf.keras.layers.Layer:
    # force_generator: masks come from a tf.random.Generator whose state is a variable, so
    # a checkpoint can hold it (Keras' default legacy RNG keeps its state inside the kernel).
    return DROPOUT(rate, name=name, force_generator=True, dtype=ELEMENTWISE_DTYPE)


def generator(
    preset: str | Preset = "full",
    precision: str = "fp32",
    *,
    fft: bool = True,
    forms: Mapping[str, str] | None = None,
) -> tf.keras.Model:
    """Latent vector (already multiplied by Ep) -> shower image (25, 25, 25, 1), float32.

    With precision "bf16" every layer computes in bfloat16 except the final ReLU, which
    hands the image on in float32 (the cell-sum target and the physics check read it).
    `forms` names each convolution's form (LAYER_FORMS; e.g. gan3d.formprobe's choice); without it
    the built-in ones (`fixed_forms`), and `fft=False` keeps FFT_LAYERS direct (the same model).
    """
    p = get_preset(preset)
    chosen = _resolve_forms(precision, fft, forms)
    with _policy(precision):
        return _generator(p, chosen)


def _generator(p: Preset, forms: Mapping[str, str]) -> tf.keras.Model:
    L = tf.keras.layers
    f1, f2, f3 = p.g_filters
    z = L.Input(shape=(p.latent_dim,), name="latent")
    x = L.Dense(7 * 7 * 8 * p.g_dense_channels, name="g_dense")(z)
    x = L.Reshape((7, 7, 8, p.g_dense_channels), name="g_reshape")(x)
    x = _conv(f1, (6, 6, 8), "same", "g_conv1", forms, kernel_initializer="he_uniform")(x)
    x = _lrelu("g_lrelu1")(x)
    x = _bn("g_bn1")(x)
    x = L.UpSampling3D((2, 2, 2), name="g_up1")(x)
    x = L.ZeroPadding3D((2, 2, 0), name="g_pad1")(x)
    x = _conv(
        f2,
        (6, 5, 8),
        "valid",
        "g_conv2",
        forms,
        kernel_initializer="he_uniform",
    )(x)
    x = _lrelu("g_lrelu2")(x)
    x = _bn("g_bn2")(x)
    x = L.UpSampling3D((2, 2, 3), name="g_up2")(x)
    x = L.ZeroPadding3D((1, 0, 3), name="g_pad2")(x)
    x = _conv(
        f3,
        (3, 3, 8),
        "valid",
        "g_conv3",
        forms,
        kernel_initializer="he_uniform",
    )(x)
    x = _lrelu("g_lrelu3")(x)
    x = _conv(
        1, (2, 2, 2), "valid", "g_conv4", forms, use_bias=False, kernel_initializer="glorot_normal"
    )(x)
    image = L.ReLU(name="g_relu", dtype="float32")(x)
    return tf.keras.Model(z, image, name="generator")


def discriminator(
    preset: str | Preset = "full",
    precision: str = "fp32",
    *,
    fft: bool = True,
    forms: Mapping[str, str] | None = None,
) -> tf.keras.Model:
    """Image -> [real/fake probability, Ep regression, cell sum of the input image].

    With precision "bf16" the convolutions compute in bfloat16; the two heads and the cell
    sum are float32 layers, so the losses (and the sigmoid before them) are computed in float32.
    `forms` and `fft`: as for `generator`.
    """
    p = get_preset(preset)
    chosen = _resolve_forms(precision, fft, forms)
    with _policy(precision):
        return _discriminator(p, chosen)


def _discriminator(p: Preset, forms: Mapping[str, str]) -> tf.keras.Model:
    L = tf.keras.layers
    f1, f2 = p.d_filters
    image = L.Input(shape=IMAGE_SHAPE, name="image")
    x = _conv(f1, (5, 5, 5), "same", "d_conv1", forms)(image)
    x = _lrelu("d_lrelu1")(x)
    x = _dropout(p.dropout, "d_drop1")(x)
    for i, pad in enumerate((2, 2, 1), start=2):
        x = _padded_conv(x, f2, pad, i, forms)
        x = _lrelu(f"d_lrelu{i}")(x)
        x = _bn(f"d_bn{i}")(x)
        x = _dropout(p.dropout, f"d_drop{i}")(x)
    x = L.AveragePooling3D((2, 2, 2), name="d_pool")(x)
    features = L.Flatten(name="d_flatten")(x)
    fake = L.Dense(1, activation="sigmoid", name="generation", dtype="float32")(features)
    aux = L.Dense(1, activation="linear", name="auxiliary", dtype="float32")(features)
    ecal = L.Lambda(lambda t: tf.reduce_sum(t, axis=(1, 2, 3)), name="ecal", dtype="float32")(image)
    return tf.keras.Model(image, [fake, aux, ecal], name="discriminator")


def sample_energies(batch: int, rng: tf.random.Generator) -> tf.Tensor:
    """Primary energies Ep ~ U(0.1, 5) in units of 100 GeV, shape (batch, 1)."""
    lo, hi = ENERGY_RANGE
    return rng.uniform((batch, 1), lo, hi, dtype=tf.float32)


def _as_generator(rng_or_seed: tf.random.Generator | int) -> tf.random.Generator:
    if isinstance(rng_or_seed, tf.random.Generator):
        return rng_or_seed
    return tf.random.Generator.from_seed(int(rng_or_seed))


def sample_latent(
    batch: int, ep: tf.Tensor | None, latent_dim: int, *, rng_or_seed: tf.random.Generator | int
) -> tf.Tensor:
    """Generator input z ~ N(0, 1) multiplied by Ep (shape (batch, 1)); Ep=None leaves z as is."""
    z = _as_generator(rng_or_seed).normal((batch, latent_dim), dtype=tf.float32)
    return z if ep is None else z * tf.reshape(tf.cast(ep, tf.float32), (-1, 1))


def fitted_cellsum(ep, xscale: float = 1.0):
    """Target cell sum of a fake shower: fitted (cell sum / Ep)(Ep) x Ep x xscale.

    Ep in units of 100 GeV; the image is in GeV x xscale, so at Ep=1 the sum is about
    2 GeV x xscale (sampling fraction ~2%). Works on numpy arrays and tensors alike.
    """
    if tf.is_tensor(ep):
        ratio = tf.math.polyval([tf.constant(c, ep.dtype) for c in CELLSUM_FIT], ep)
        return ratio * ep * tf.cast(xscale, ep.dtype)
    ep = np.asarray(ep, dtype=np.float64)
    return np.polyval(CELLSUM_FIT, ep) * ep * xscale
