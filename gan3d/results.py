"""The run-result record (docs/architecture.md, "File contracts"): throughput, FLOP rate, peaks, memory, versions.

Conventions, so that a report can compare runs:
- `flop_per_step.per_rank` is one rank's training step at its own batch (`gan3d.flops.step_flops`);
  `flop_per_step.job` is that times the number of ranks (one data-parallel step of the job).
- `showers_per_second` and `flop_per_second` are job-level and exclude the first step of the run
  (it traces the tf.function); that step's time is reported as `first_step_seconds`.
- Every peak and % of peak names its precision and denominator in its key (`peak_fields`): for the
  run's precision and fp64,
  `peak_<p>_theoretical_flop_per_second` = nodes x the site node's peak (cores x AVX clock x
  FLOP/cycle of <p>), null where the site config does not state clock or FLOP/cycle (the `laptop`
  VM), with `peak_<p>_theoretical_basis` saying how it was computed or why it is unknown;
  `peak_<p>_measured_flop_per_second` = the sum over ranks of a dense matmul rate in <p> measured by
  all ranks at once with their own thread count (`--measure-peak`), i.e. what this layout can reach;
  `percent_of_peak_<p>_theoretical` and `percent_of_peak_<p>_measured` divide the run's FLOP/s by them.
- `percent_of_peak_fp64_max_clock` is the seed paper's convention: of nodes x cores x the max clock x
  FP64 FLOP/cycle (SuperMUC-NG: 4.15 TFLOP/s per node); null where the site lacks either fact.
- `percent_of_peak` is the headline figure and `percent_of_peak_denominator` names it: the run's
  precision, theoretical where the site states it, else measured.
- `epoch_wall_times` are the paper's epoch times: wall clock from an epoch's first batch to the end
  of its closing all-reduces (loss means, BatchNorm statistics), data loading and the first
  (tracing) step included; `epoch_times` stop before those all-reduces; `full_epoch_seconds_estimate`
  is the step-only estimate (mean timed step x steps of a full epoch); `epoch_step_seconds` is each
  epoch's steps alone (their wall times summed, the first step included), so that a report sets an
  epoch's steps beside the same epoch's wall clock.
- `container` names the runtime the job ran in ("charliecloud": ch-run sets CH_RUNNING) or is null
  for a bare run; a report compares the two.
- `memory_available_bytes_min_per_rank`: each rank's lowest MemAvailable of its node, sampled at
  the end of every epoch (the paper's Table 9 compares free memory with and without the container).
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


def memory_available_bytes(meminfo: str = "/proc/meminfo") -> int | None:
    """The node's MemAvailable now (the kernel's estimate of what can be allocated without swapping);
    None where the kernel does not say (not Linux). Reads one small procfs file."""
    try:
        with open(meminfo, encoding="ascii", errors="replace") as fh:
            for line in fh.read(64 * 1024).splitlines():
                name, _, rest = line.partition(":")
                if name == "MemAvailable" and rest.split()[1:] == ["kB"] and rest.split()[0].isdigit():
                    return int(rest.split()[0]) * 1024
    except OSError:
        return None
    return None


def container_runtime(environ: dict[str, str] | None = None) -> str | None:
    """"charliecloud" inside ch-run (it exports CH_RUNNING to the contained process), else None: the
    run is bare. Recorded so a report never merges container and bare runs into one series."""
    environ = os.environ if environ is None else environ
    return "charliecloud" if "CH_RUNNING" in environ else None


def epochs(train_seconds: list[float], wall_seconds: list[float], timed_steps: int, timed_seconds: float,
           full_epoch_steps: int, step_seconds: list[float] | None = None) -> dict:
    """The epoch-time fields (see the module docstring for which clock each one is)."""
    return {"epoch_times": list(train_seconds), "epoch_wall_times": list(wall_seconds),
            "epoch_step_seconds": list(step_seconds) if step_seconds is not None else None,
            "full_epoch_seconds_estimate": full_epoch_steps * timed_seconds / timed_steps if timed_steps else None}


def memory(peak_rss_per_rank: list[int], available_min_per_rank: list[int | None],
           usable_per_rank: float | None) -> dict:
    """Per-rank memory fields: peak RSS, the node's lowest MemAvailable, and the site's budget."""
    return {"peak_rss_bytes_per_rank": list(peak_rss_per_rank),
            "memory_available_bytes_min_per_rank": list(available_min_per_rank),
            "usable_memory_bytes_per_rank": usable_per_rank,
            "memory_within_node": (max(peak_rss_per_rank) <= usable_per_rank) if usable_per_rank else None}


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
               steps: int, seconds: float) -> dict:
    """Samples/s and FLOP/s for `steps` job steps that took `seconds` of wall time."""
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
    }


def peak_fields(flop_rate: float, precision: str, nodes: int, node_peaks: dict | None,
                measured: dict[str, float], measured_basis: str) -> dict:
    """The peaks and % of peak of a run in `precision` (and fp64), each key naming its precision
    and denominator. `node_peaks` is gan3d.peak.site_peaks(site) for one node (None: no site);
    `measured` the job's measured peak per precision (absent: not measured)."""
    out: dict = {}  # the run's own precision is the trainer's to record ("bf16-emulated" divides by fp32)
    for p in dict.fromkeys((precision, "fp64")):
        theory = node_peaks[p] if node_peaks else {"flop_per_second": None, "basis": "unknown: no --site given"}
        peak = theory["flop_per_second"] * nodes if theory["flop_per_second"] else None
        basis = f"{nodes} nodes x {theory['basis']}" if peak and nodes > 1 else theory["basis"]
        out |= {f"peak_{p}_theoretical_flop_per_second": peak, f"peak_{p}_theoretical_basis": basis,
                f"peak_{p}_measured_flop_per_second": measured.get(p),
                f"peak_{p}_measured_basis": measured_basis if p in measured else
                "not measured: train with --measure-peak",
                f"percent_of_peak_{p}_theoretical": _percent(flop_rate, peak),
                f"percent_of_peak_{p}_measured": _percent(flop_rate, measured.get(p))}
    paper = node_peaks["paper_convention"] if node_peaks else {"flop_per_second": None,
                                                              "basis": "unknown: no --site given"}
    paper_peak = paper["flop_per_second"] * nodes if paper["flop_per_second"] else None
    out |= {"peak_fp64_max_clock_flop_per_second": paper_peak,
            "peak_fp64_max_clock_basis": (f"{nodes} nodes x " if paper_peak and nodes > 1 else "") + paper["basis"],
            "percent_of_peak_fp64_max_clock": _percent(flop_rate, paper_peak)}
    kind = "theoretical" if out[f"percent_of_peak_{precision}_theoretical"] is not None else "measured"
    headline = out[f"percent_of_peak_{precision}_{kind}"]
    out |= {"percent_of_peak": headline,
            "percent_of_peak_denominator": f"{precision} {kind} peak" if headline is not None else None}
    return out


def _percent(rate: float, peak: float | None) -> float | None:
    return 100.0 * rate / peak if peak else None


def write_results(path: str | os.PathLike, record: dict) -> Path:
    """Write the record atomically (readers never see half a file); ValueError if it holds NaN/Inf."""
    path = Path(path)
    text = json.dumps({"schema": SCHEMA, "kit_version": kit_version, **record}, indent=2, allow_nan=False) + "\n"
    atomic_write_text(path, text)
    return path
