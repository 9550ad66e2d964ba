"""`gan3d train --forms`: the form each convolution of a run computes in, and where it came from.

- `auto` (the default): this machine's cached choice (gan3d.formcache) for the same key, else a
  probe (gan3d.formprobe: each layer's forms, then the frequency domain settled by timing whole
  steps with and without it), whose choice is then cached;
- `probe`: a probe whatever the cache holds (the cache is then replaced);
- `fft`: the fixed table (`gan3d.model.FFT_LAYERS` in the frequency domain in float32, measured on
  one CPU family), the same forms on every machine;
- `direct`: no layer in the frequency domain (each layer's first form).

With several ranks every rank probes at once (the probe then meets the contention of the run),
and rank 0's choice is the job's, so every rank builds the same model. `GAN3D_FORMS` sets the
default of `--forms` (the test suite sets `fft`, whose forms do not depend on timings).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MODES = ("auto", "probe", "fft", "direct")
ENV = "GAN3D_FORMS"


def default_mode(environ: Mapping[str, str] | None = None) -> str:
    """`GAN3D_FORMS`, else auto (gan3d train refuses a value that names no mode in one line)."""
    return (os.environ if environ is None else environ).get(ENV, "") or "auto"


@dataclass(frozen=True)
class Choice:
    """The forms a run builds its model with; `source` says where they came from."""

    forms: dict[str, str]
    source: str  # "probe", "cache", "fixed table (--forms fft)", "fixed (--forms direct)"
    cache_file: str | None = None
    probe: dict | None = None  # gan3d.formprobe.Probe.record() of this run's probe
    warnings: list[str] = field(default_factory=list)

    def record(self) -> dict:
        """The results JSON's `layer_forms`."""
        return {
            "forms": dict(self.forms),
            "source": self.source,
            "cache_file": self.cache_file,
            "probe": self.probe,
        }


@dataclass(frozen=True)
class RunShape:
    """What a choice depends on besides the machine: it is part of the cache key."""

    preset: str
    precision: str  # "fp32" or "bf16": what the layers compute in
    batch_per_rank: int
    threads_per_rank: int
    inter_op_threads: int
    ranks_per_node: int


def cache_key(shape: RunShape, allowed: Mapping[str, tuple[str, ...]]) -> dict[str, Any]:
    """The CPU (model and every flag), the TensorFlow version and whether ITEX's kernels run it
    (they replace oneDNN's, so a form's speed is theirs), the run's shape and the candidates."""
    import tensorflow as tf

    from gan3d import cpu, itex

    flags = " ".join(sorted(cpu.cpu_flags()))
    return {
        "cpu_model": cpu.cpu_model(),
        "cpu_flags_sha256": hashlib.sha256(flags.encode()).hexdigest(),
        "tensorflow": tf.__version__,
        "itex": itex.seen_here().library,
        **vars(shape),
        "candidates": {name: list(forms) for name, forms in allowed.items()},
    }


def choose_forms(
    mode: str,
    shape: RunShape,
    *,
    rank: int = 0,
    share: Callable[[Any], Any] = lambda value: value,
    run_probe: Callable[[], Any] | None = None,
    cache_directory: Path | None = None,
    key: Mapping[str, Any] | None = None,
) -> Choice:
    """The run's forms in `mode` (MODES). `share(value)` returns rank 0's value on every rank
    (Horovod's broadcast_object; in one process the value itself); `run_probe` returns a
    gan3d.formprobe.Probe (default: the real one at `shape`); `cache_directory` and `key`
    default to gan3d.formcache's and `cache_key`'s."""
    from gan3d import formcache, formprobe, model

    if mode not in MODES:
        raise ValueError(f"--forms {mode!r}: choose one of {', '.join(MODES)}")
    if mode in ("fft", "direct"):
        how = "fixed table (--forms fft)" if mode == "fft" else "fixed (--forms direct)"
        return Choice(model.fixed_forms(shape.precision, fft=mode == "fft"), how)
    allowed = model.candidate_forms(shape.precision)
    key = cache_key(shape, allowed) if key is None else key
    path = formcache.cache_path(cache_directory or formcache.cache_dir(), key)
    warnings: list[str] = []
    cached = None
    if rank == 0 and mode == "auto":
        cached, why = formcache.read(path, key, allowed)
        if why:
            warnings.append(why)
    cached = share(cached)
    if cached is not None:
        return Choice(
            forms=model.check_forms(cached, shape.precision),
            source="cache",
            cache_file=str(path),
            probe=None,
            warnings=warnings,
        )
    if run_probe is None:

        def run_probe():
            first = {name: forms[0] for name, forms in allowed.items()}
            candidates = formprobe.tf_candidates(
                shape.preset, shape.precision, shape.batch_per_rank
            )
            steps = formprobe.tf_steps(shape.preset, shape.precision, shape.batch_per_rank)
            return formprobe.check_by_steps(formprobe.probe(candidates, first), steps)

    measured = run_probe()
    forms = model.check_forms(share(measured.forms), shape.precision)
    written = None
    if rank == 0:
        why = formcache.write(path, key, forms, probe=measured.record())
        if why:
            warnings.append(why)
        else:
            written = str(path)
    return Choice(
        forms=forms, source="probe", cache_file=written, probe=measured.record(), warnings=warnings
    )
