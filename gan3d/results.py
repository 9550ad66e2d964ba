"""The run-result record (DESIGN.md "Run result"): throughput, FLOP rate, peaks, memory, versions.

Conventions, so that a report can compare runs:
- `flop_per_step.per_rank` is one rank's training step at its own batch (`gan3d.flops.step_flops`);
  `flop_per_step.job` is that times the number of ranks (one data-parallel step of the job).
- `showers_per_second` and `flop_per_second` are job-level and exclude the first step of the run
  (it traces the tf.function); that step's time is reported as `first_step_seconds`.
- `peak_flop_per_second_theoretical` = nodes x the site node's fp32 peak (cores x AVX clock x FLOP/cycle).
- `peak_flop_per_second_measured` = the sum over ranks of a dense matmul rate measured by all ranks
  at once with their own thread count (`--measure-peak`), i.e. what this rank layout can reach.
- `precision` is the compute precision of the step: "fp32" (absent in older records: fp32),
  "bf16" (bfloat16 on the CPU's bf16 unit, `bf16_unit` "amx" or "avx512_bf16") or
  "bf16-emulated" (bf16 numerics on a CPU without one: no bf16 peak applies). The FLOP per
  step are the same in every precision; `allreduce_dtype` is the gradients' type on the wire.
- `status` is "ok" for a finished run; a run whose losses became NaN/Inf writes "failed" with
  `error` and no throughput. No record ever holds NaN or Inf (strict JSON: a report parsing it
  must never meet a NaN it could average).
"""
from __future__ import annotations

import importlib
import json
import os
import platform
import resource
from pathlib import Path

from kit import __version__ as kit_version
from kit.atomic import atomic_write_text

SCHEMA = "gan3d-run/1"
VERSIONED = {"tensorflow": "tensorflow", "keras": "keras", "horovod": "horovod", "numpy": "numpy",
             "h5py": "h5py", "mpi4py": "mpi4py", "itex": "intel_extension_for_tensorflow"}


def peak_rss_bytes() -> int:
    """Peak resident set size of this process so far (Linux reports KiB)."""
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def software_versions(itex_loaded: bool = False) -> dict[str, str | None]:
    """Versions of the stack as imported in this job; ITEX only if the run switched it on."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for key, module in VERSIONED.items():
        if key == "itex" and not itex_loaded:
            versions[key] = None
            continue
        try:
            versions[key] = getattr(importlib.import_module(module), "__version__", "unknown")
        except ImportError:
            versions[key] = None
    return versions


def image_digest(environ: dict[str, str] | None = None) -> str | None:
    """The container image digest the launcher exported (KIT_IMAGE_DIGEST), if any."""
    environ = os.environ if environ is None else environ
    return environ.get("KIT_IMAGE_DIGEST") or None


def throughput(flop_per_rank_step: dict[str, float], batch_per_rank: int, ranks: int,
               steps: int, seconds: float, peak_theoretical: float | None,
               peak_measured: float | None) -> dict:
    """Samples/s, FLOP/s and % of peak for `steps` job steps that took `seconds` of wall time."""
    global_batch = batch_per_rank * ranks
    job_step = {k: v * ranks for k, v in flop_per_rank_step.items()}
    rate = steps / seconds if seconds > 0 and steps > 0 else 0.0
    flop_rate = job_step["total"] * rate
    return {
        "timed_steps": steps,
        "timed_seconds": seconds,
        "showers_per_second": global_batch * rate,
        "flop_per_shower": flop_per_rank_step["total"] / batch_per_rank,
        "flop_per_step": {"per_rank": dict(flop_per_rank_step), "job": job_step},
        "flop_per_second": flop_rate,
        "flop_per_second_per_rank": flop_rate / ranks,
        "peak_flop_per_second_theoretical": peak_theoretical,
        "peak_flop_per_second_measured": peak_measured,
        "percent_of_peak_theoretical": _percent(flop_rate, peak_theoretical),
        "percent_of_peak_measured": _percent(flop_rate, peak_measured),
        # The seed paper divided by the FP64 peak (half the fp32 one on AVX-512 FMA): shown beside ours.
        "percent_of_peak_fp64_paper_convention": _percent(flop_rate, peak_theoretical / 2 if peak_theoretical else None),
    }


def _percent(rate: float, peak: float | None) -> float | None:
    return 100.0 * rate / peak if peak else None


def write_results(path: str | os.PathLike, record: dict) -> Path:
    """Write the record atomically (readers never see half a file); ValueError if it holds NaN/Inf."""
    path = Path(path)
    text = json.dumps({"schema": SCHEMA, "kit_version": kit_version, **record}, indent=2, allow_nan=False) + "\n"
    atomic_write_text(path, text)
    return path
