"""The run-result record (docs/architecture.md, "File contracts"): throughput, FLOP rate, peaks,
memory, versions.

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
  `percent_of_peak_<p>_theoretical` and `percent_of_peak_<p>_measured` divide the run's FLOP/s by
  them.
- `percent_of_peak_fp64_max_clock` is the seed paper's convention: of nodes x cores x the max clock
  x FP64 FLOP/cycle (SuperMUC-NG: 4.15 TFLOP/s per node); null where the site lacks either fact.
- `percent_of_peak` is the headline figure and `percent_of_peak_denominator` names it: the run's
  precision, theoretical where the site states it, else measured.
- `epoch_wall_times` are the paper's epoch times: wall clock from an epoch's first batch to the end
  of its closing all-reduces (loss means, BatchNorm statistics), data loading and the first
  (tracing) step included; `epoch_times` stop before those all-reduces;
  `full_epoch_seconds_estimate` is the step-only estimate (mean timed step x steps of a full epoch);
  `epoch_step_seconds` is each epoch's steps alone (their wall times summed, the first step
  included), so that a report sets an epoch's steps beside the same epoch's wall clock.
- `container` names the runtime the job ran in ("charliecloud": ch-run sets CH_RUNNING; "udocker":
  udocker sets container_execmode and container_root; "apptainer": Apptainer and Singularity set
  APPTAINER_CONTAINER or SINGULARITY_CONTAINER) or is null for a bare run; a report compares them.
- `memory_available_bytes_min_per_rank`: each rank's lowest MemAvailable of its node, sampled at
  the end of every epoch (the paper's Table 9 compares free memory with and without the container).
- `precision` is the compute precision of the step: "fp32" (absent in older records: fp32),
  "bf16" (bfloat16 on the CPU's bf16 unit, `bf16_unit` "amx" or "avx512_bf16") or
  "bf16-emulated" (bf16 numerics on a CPU without one: no bf16 peak applies). The FLOP per
  step are the same in every precision; `allreduce_dtype` is the gradients' type on the wire.
- `itex`: Intel Extension for TensorFlow, `requested` (--itex on), `installed`, `loaded` (its kernel
  library, e.g. `libitex_cpu_internal_avx512.so`, mapped in rank 0's process: gan3d.itex; with
  --itex off too, as TensorFlow loads an installed plugin by itself), `version`, `backend` ("CPU
  AVX512"), `library`, `reason` (why not loaded). Older records hold `requested` and `installed`.
- `fft_convolutions` names the layers computed through FFTs (gan3d.fft_conv; in float32, in a bf16
  run too, whose other layers compute in bfloat16). Their
  arithmetic is several times less than the direct convolution's count in `flop_per_step`, so with
  any named, `flop_per_second` and every % of peak are model FLOP per second (an effective rate,
  the paper's count), more than the arithmetic the CPU executed.
- `layer_forms` (may be absent: not recorded) is how each convolution ran (`gan3d.layerforms`):
  `forms` (layer -> "direct", "packed", "col2im", "folded" or "fft"), `source` ("probe", "cache",
  or a fixed table named by its --forms), `cache_file` (where the choice is kept, null if
  nowhere), and `probe` (this run's measurement: rounds, seconds, median ms per layer and form,
  and `steps`: seconds of each whole step timed with and without the frequency domain and the set
  kept, null when no step was timed; `probe` is null when none ran).
- Provenance (since gan3d-run/2): `started_utc`, `ended_utc` (ISO 8601, UTC) of rank 0's
  run, `command_line` (the process's argv as Python received it, a list; the launcher's own words
  are not part of it), `kit_version` (the installed distribution), `git_commit` with
  `git_commit_basis` (`kit.code_commit`: a git checkout's HEAD, else the commit `kit image build`
  recorded in the package, else null and why), `image_digest` (the
  `KIT_IMAGE_DIGEST` a kit batch script exports for a container launch; null for a bare run),
  `hostname_per_rank`.
- `step_times` (since gan3d-run/2): rank 0's step wall times, every step of this run counted
  (the first, tracing one, included): count, mean, min, p50/p90/p99 (nearest rank), max, and the
  slowest steps with their epoch and step (from 1); its size is bounded whatever the run length
  (`gan3d.steptimes`).
- `step_losses` (since gan3d-run/2, may be absent): rank 0's D and G losses at the steps whose
  global index (from 0, over the whole run) is a multiple of `stride`, as rows of `columns`
  (global_step, epoch, step from 1, d_loss, g_loss); at most 1024 rows (`gan3d.steplosses`).
- `mpi_fabric` and `horovod_settings` (may be absent: not recorded) are what a scaling calibration
  depends on beyond the MPI library: the variables that choose the MPI's fabric or provider
  (`FABRIC_VARIABLES`: Intel MPI's `I_MPI_FABRICS`, libfabric's `FI_PROVIDER`, MPICH's netmod,
  Open MPI's PML/BTL/MTL, UCX's transports) and Horovod's tensor fusion and cycle
  (`HOROVOD_VARIABLES`), as rank 0's environment held them; null where unset, i.e. the library
  chose its default. `kit scale predict` never fits runs that differ in them.
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
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kit import __version__ as kit_version
from kit.atomic import atomic_write_text
from kit.schema import Field, Section

# the trainer's phase records, for types only: kit reads this module without the trainer
if TYPE_CHECKING:
    from gan3d.train import Data, Host, Model, Progress

SCHEMA = "gan3d-run/2"
# The record grows by additions only: a reader takes every
# version listed (missing fields are unknown).
READABLE_SCHEMAS = ("gan3d-run/1", SCHEMA)
# A file a reader takes as a gan3d train record: its tag (each reader checks the keys it uses).
TAGGED = Section({"schema": Field("str", choices=READABLE_SCHEMAS)}, open=True)
VERSIONED = {
    "tensorflow": "tensorflow",
    "keras": "keras",
    "horovod": "horovod",
    "numpy": "numpy",
    "h5py": "h5py",
    "mpi4py": "mpi4py",
    "itex": "intel_extension_for_tensorflow",
}


def peak_rss_bytes() -> int:
    """Peak resident set size of this process so far (Linux reports KiB)."""
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def memory_available_bytes(meminfo: str = "/proc/meminfo") -> int | None:
    """The node's MemAvailable now (the kernel's estimate of what can be allocated without
    swapping); None where the kernel does not say (not Linux). Reads one small procfs file."""
    try:
        with open(meminfo, encoding="ascii", errors="replace") as fh:
            for line in fh.read(64 * 1024).splitlines():
                name, _, rest = line.partition(":")
                if (
                    name == "MemAvailable"
                    and rest.split()[1:] == ["kB"]
                    and rest.split()[0].isdigit()
                ):
                    return int(rest.split()[0]) * 1024
    except OSError:
        return None
    return None


FABRIC_VARIABLES = (
    "I_MPI_FABRICS",
    "I_MPI_OFI_PROVIDER",
    "FI_PROVIDER",  # Intel MPI; libfabric (Intel MPI, MPICH ch4:ofi)
    "MPIR_CVAR_CH4_NETMOD",
    "MPIR_CVAR_OFI_USE_PROVIDER",  # MPICH
    "OMPI_MCA_pml",
    "OMPI_MCA_btl",
    "OMPI_MCA_mtl",  # Open MPI's point-to-point components
    "UCX_TLS",
    "UCX_NET_DEVICES",  # UCX (Open MPI's pml ucx, MPICH ch4:ucx)
)
HOROVOD_VARIABLES = (
    "HOROVOD_FUSION_THRESHOLD",
    "HOROVOD_CYCLE_TIME",
    "HOROVOD_CACHE_CAPACITY",
    "HOROVOD_HIERARCHICAL_ALLREDUCE",
    "HOROVOD_AUTOTUNE",
    "HOROVOD_CPU_OPERATIONS",
)
MAX_SETTING_CHARS = 200


def communication(environ: Mapping[str, str] | None = None) -> dict:
    """`mpi_fabric` and `horovod_settings`: each variable's value (one line, at most 200
    characters), null where unset (the library's default), so runs on two fabrics or fusion settings
    are told apart."""
    env: Mapping[str, str] = os.environ if environ is None else environ

    def value(name: str) -> str | None:
        text = env.get(name)
        return None if text is None else " ".join(text.split())[:MAX_SETTING_CHARS]

    return {
        "mpi_fabric": {name: value(name) for name in FABRIC_VARIABLES},
        "horovod_settings": {name: value(name) for name in HOROVOD_VARIABLES},
    }


def container_runtime(environ: Mapping[str, str] | None = None) -> str | None:
    """ "charliecloud" inside ch-run (it exports CH_RUNNING to the contained process), "udocker"
    inside udocker run (it exports container_execmode, e.g. P1, and container_root), "apptainer"
    inside apptainer or singularity exec (they export APPTAINER_CONTAINER, SINGULARITY_CONTAINER:
    the image), else None: the run is bare. Recorded so a report never merges container and bare
    runs, or two runtimes, into one series."""
    env: Mapping[str, str] = os.environ if environ is None else environ
    if "CH_RUNNING" in env:
        return "charliecloud"
    if "APPTAINER_CONTAINER" in env or "SINGULARITY_CONTAINER" in env:
        return "apptainer"
    return "udocker" if "container_execmode" in env and "container_root" in env else None


def epochs(
    train_seconds: list[float],
    wall_seconds: list[float],
    *,
    timed_steps: int,
    timed_seconds: float,
    full_epoch_steps: int,
    step_seconds: list[float] | None = None,
) -> dict:
    """The epoch-time fields (see the module docstring for which clock each one is)."""
    return {
        "epoch_times": list(train_seconds),
        "epoch_wall_times": list(wall_seconds),
        "epoch_step_seconds": list(step_seconds) if step_seconds is not None else None,
        "full_epoch_seconds_estimate": full_epoch_steps * timed_seconds / timed_steps
        if timed_steps
        else None,
    }


def memory(
    peak_rss_per_rank: list[int],
    available_min_per_rank: list[int | None],
    usable_per_rank: float | None,
) -> dict:
    """Per-rank memory fields: peak RSS, the node's lowest MemAvailable, and the site's budget."""
    return {
        "peak_rss_bytes_per_rank": list(peak_rss_per_rank),
        "memory_available_bytes_min_per_rank": list(available_min_per_rank),
        "usable_memory_bytes_per_rank": usable_per_rank,
        "memory_within_node": (max(peak_rss_per_rank) <= usable_per_rank)
        if usable_per_rank
        else None,
    }


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


def image_digest(environ: Mapping[str, str] | None = None) -> str | None:
    """The container image digest the launcher exported (KIT_IMAGE_DIGEST), if any."""
    env: Mapping[str, str] = os.environ if environ is None else environ
    return env.get("KIT_IMAGE_DIGEST") or None


def throughput(
    flop_per_rank_step: dict[str, float],
    *,
    batch_per_rank: int,
    ranks: int,
    steps: int,
    seconds: float,
) -> dict:
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


def peak_fields(
    flop_rate: float,
    precision: str,
    nodes: int,
    *,
    node_peaks: dict | None,
    measured: dict[str, float],
    measured_basis: str,
    effective: bool = False,
) -> dict:
    """The peaks and % of peak of a run in `precision` (and fp64), each key naming its precision
    and denominator. `node_peaks` is gan3d.peak.site_peaks(site) for one node (None: no site);
    `measured` the job's measured peak per precision (absent: not measured); `effective`: some
    layers ran in the frequency domain, so `flop_rate` counts more than the arithmetic done."""
    # the run's own precision is the trainer's to record ("bf16-emulated" divides by fp32)
    out: dict = {}
    for p in dict.fromkeys((precision, "fp64")):
        theory: dict[str, Any] = (
            node_peaks[p]
            if node_peaks
            else {"flop_per_second": None, "basis": "unknown: no --site given"}
        )
        peak = theory["flop_per_second"] * nodes if theory["flop_per_second"] else None
        basis = f"{nodes} nodes x {theory['basis']}" if peak and nodes > 1 else theory["basis"]
        mine = measured.get(p)
        # A measured peak below the rate of the arithmetic the run did was disturbed (other work on
        # the cores while it ran): no percentage of it, and the basis says why. An effective rate
        # may pass a true peak (docs/peaks.md), so it tells nothing of the measurement.
        disturbed = not effective and mine is not None and p == precision and flop_rate > mine
        out |= {
            f"peak_{p}_theoretical_flop_per_second": peak,
            f"peak_{p}_theoretical_basis": basis,
            f"peak_{p}_measured_flop_per_second": mine,
            f"peak_{p}_measured_basis": (
                f"{measured_basis}; below the run's own FLOP/s, "
                "so disturbed (other work on the cores while it was measured): no % of it"
                if disturbed
                else measured_basis
            )
            if p in measured
            else "not measured: train with --measure-peak",
            f"percent_of_peak_{p}_theoretical": _percent(flop_rate, peak),
            f"percent_of_peak_{p}_measured": None if disturbed else _percent(flop_rate, mine),
        }
    paper: dict[str, Any] = (
        node_peaks["paper_convention"]
        if node_peaks
        else {"flop_per_second": None, "basis": "unknown: no --site given"}
    )
    paper_peak = paper["flop_per_second"] * nodes if paper["flop_per_second"] else None
    out |= {
        "peak_fp64_max_clock_flop_per_second": paper_peak,
        "peak_fp64_max_clock_basis": (f"{nodes} nodes x " if paper_peak and nodes > 1 else "")
        + paper["basis"],
        "percent_of_peak_fp64_max_clock": _percent(flop_rate, paper_peak),
    }
    kind = (
        "theoretical" if out[f"percent_of_peak_{precision}_theoretical"] is not None else "measured"
    )
    headline = out[f"percent_of_peak_{precision}_{kind}"]
    out |= {
        "percent_of_peak": headline,
        "percent_of_peak_denominator": f"{precision} {kind} peak" if headline is not None else None,
    }
    return out


def _percent(rate: float, peak: float | None) -> float | None:
    return 100.0 * rate / peak if peak else None


def write_results(path: str | os.PathLike, record: dict) -> Path:
    """Write the record atomically (readers never see half a file); ValueError if it holds
    NaN/Inf.
    """
    path = Path(path)
    text = (
        json.dumps(
            {"schema": SCHEMA, "kit_version": kit_version, **record}, indent=2, allow_nan=False
        )
        + "\n"
    )
    atomic_write_text(path, text)
    return path


def utc_now() -> str:
    """ISO 8601 with an explicit UTC offset, e.g. 2026-11-24T10:07:33.123+00:00."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def command_line() -> list[str]:
    """The process's command line as Python received it (interpreter, options, script or -m,
    arguments).
    """
    return list(getattr(sys, "orig_argv", [sys.executable, *sys.argv]))


@dataclass(frozen=True)
class RunClock:
    """When the run started: UTC for the record, the epoch clock for its wall seconds."""

    utc: str
    seconds: float

    @classmethod
    def start(cls) -> RunClock:
        return cls(utc_now(), time.time())


def provenance(started: RunClock, code: dict) -> dict:
    """Start and end (UTC), the command line and the code's commit (`code`:
    kit.code_commit.source_commit()).
    """
    return {
        "started_utc": started.utc,
        "ended_utc": utc_now(),
        "command_line": command_line(),
        "git_commit": code.get("git_commit"),
        "git_commit_basis": code.get("git_commit_basis"),
    }


def failure_record(
    args, layout, exc, *, history: list, checkpoints, started: RunClock, code: dict
) -> dict:
    """The record of a diverged run: says it failed and why; no throughput, no NaN."""
    last = checkpoints.latest_own() if checkpoints else None  # this run's, never another's
    return {
        "status": "failed",
        "error": str(exc),
        "failed_at": {"epoch": exc.epoch, "step": exc.step},
        "preset": args.preset,
        "seed": args.seed,
        "ranks": layout.size,
        "batch_per_rank": args.batch_size,
        "precision": args.precision,
        "learning_rate": {"per_rank": args.lr},
        "xscale": args.xscale,
        "losses": history,  # the completed epochs, all finite
        "checkpoint": str(last) if last else None,
        **provenance(started, code),
    }


def run_record(
    args,
    layout,
    host: Host,
    *,
    data: Data,
    model: Model,
    run: Progress,
    per_rank: list[dict],
    started: RunClock,
    code: dict,
    in_force: dict,
    peaks_measured: dict[str, float],
    peak_precision: str,
    layer_forms: dict | None = None,
    start_epoch: int,
    checkpoint: Path | None,
) -> dict:
    """A finished run's record (rank 0), from the trainer's phases and every rank's gathered
    facts.
    """
    from gan3d.cpu import describe
    from gan3d.fft_conv import fft_layer_names
    from gan3d.flops import step_flops
    from gan3d.peak import site_peaks

    site, times = host.site, run.times
    fft = fft_layer_names(model.gen, model.disc)
    flops = step_flops(args.preset, args.batch_size)
    perf = throughput(
        {k: float(v) for k, v in flops.items()},
        batch_per_rank=args.batch_size,
        ranks=layout.size,
        steps=times.steps,
        seconds=times.seconds,
    )
    perf |= peak_fields(
        perf["flop_per_second"],
        peak_precision,
        layout.nodes,
        node_peaks=site_peaks(site) if site else None,
        measured=peaks_measured,
        measured_basis=f"sum over {layout.size} rank(s) x {host.threads} thread(s) of a tf.linalg.matmul "
        f"loop run by all at once ({args.measure_peak or 0:g} s each)",
        effective=bool(fft),
    )
    usable = site.node.usable_memory_gb * 1e9 / layout.ranks_per_node if site else None
    train_files, val_files = data.train_files, data.val_files
    return {
        "status": "ok",
        "site": site.name if site else None,
        "image_digest": image_digest(),
        "container": container_runtime(),
        "job": {
            "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
            "run_id": os.environ.get("KIT_RUN_ID"),
        },
        "software": software_versions(itex_loaded=host.itex.loaded),
        "cpu": describe(),  # what ran: model, bf16 unit, ISA flags (the machines change between days)
        "mpi_library_version": layout.mpi_library_version,
        "mpi_library_version_full": layout.mpi_library_version_full,
        **communication(),
        "nodes": layout.nodes,
        "ranks": layout.size,
        "ranks_per_node": layout.ranks_per_node,
        "threads_per_rank": in_force["intra_op_threads"],
        "inter_op_threads": in_force["inter_op_threads"],
        "thread_env": in_force["env"],
        "oversubscribed": layout.ranks_per_node * host.threads > host.cores,
        "cores_per_node": host.cores,
        "itex": {"requested": args.itex == "on", **host.itex.record()},
        "deterministic": args.deterministic,
        "preset": args.preset,
        "seed": args.seed,
        "optimizer": args.optimizer,
        # the FLOP per step are the same in every precision; the peak to divide by is not
        "precision": args.precision,
        "bf16_unit": host.bf16_unit,
        "allreduce_dtype": args.allreduce_dtype,
        "fft_convolutions": fft,
        "layer_forms": layer_forms,
        "learning_rate": {
            "per_rank": args.lr,
            "scaled": model.step.config.learning_rate,
            "warmup_epochs": args.warmup_epochs,
        },
        "loss_weights": list(model.loss_weights),
        "xscale": args.xscale,
        "data_files": {"train": len(train_files.paths), "validation": len(val_files.paths)},
        "held_out": data.held_out,
        "skip_bad_events": args.skip_bad_events,
        "bad_events_skipped": data.skipped,
        "train_events": train_files.num_events,
        "validation_events": val_files.num_events,
        "batch_per_rank": args.batch_size,
        "global_batch": args.batch_size * layout.size,
        "epochs": args.epochs,
        "start_epoch": start_epoch,
        "steps_per_epoch": data.steps,
        "full_epoch_steps": data.stream.batches_per_epoch,
        "validation_steps": data.val_steps,
        "validation_times": run.val_times,
        "checkpoint_times": run.ckpt_times,
        "first_step_seconds": times.first,
        **epochs(
            run.epoch_times,
            run.wall_times,
            timed_steps=times.steps,
            timed_seconds=times.seconds,
            full_epoch_steps=data.stream.batches_per_epoch,
            step_seconds=run.step_sums,
        ),
        "step_times": times.summary(),
        **perf,
        "losses": run.history,
        "step_losses": run.step_losses.record(),
        **memory(
            [r["peak_rss_bytes"] for r in per_rank], [r["available"] for r in per_rank], usable
        ),
        "weights_sha256_initial": model.initial_digest,
        "weights_sha256_per_rank": [r["weights_sha256"] for r in per_rank],
        "hostnames": sorted({r["hostname"] for r in per_rank}),
        "hostname_per_rank": [
            r["hostname"] for r in per_rank
        ],  # rank order: which node ran which rank
        "checkpoint": str(checkpoint) if checkpoint else None,
        "wall_seconds": time.time() - started.seconds,
        **provenance(started, code),
    }
