"""`python -m gan3d train`: Horovod data-parallel 3DGAN training in hybrid MPI/OpenMP.

Launch one process per rank with the MPI's own launcher (`mpiexec -n R ...` or `srun`); each rank
uses `--threads` compute threads. Order of start-up matters, and `_run` calls one function per
phase in that order, like Horovod's Keras examples (each distributed change is marked
"# Horovod: ..."): MPI layout (mpi4py) -> the checkpoint directory -> thread checks and
environment -> data, checked before TensorFlow starts -> TensorFlow and Horovod -> models ->
broadcast of the initial (or resumed)
state from rank 0 -> epochs -> every rank's facts gathered. Rank 0 checkpoints every epoch,
prints a heartbeat every --heartbeat-steps steps or --heartbeat-seconds seconds (whichever comes
first) and writes the results JSON (built in gan3d.results, beside its conventions).

A run whose losses or weights become NaN/Inf stops at once with LossDiverged (exit 1): that
state is never checkpointed, and the results JSON, when asked for, is written with
"status": "failed", the error and the finite history before it, and no throughput or loss
figure of the failed epoch, so no report can count it as a run.
"""

from __future__ import annotations

import argparse
import atexit
import functools
import hashlib
import itertools
import math
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gan3d import itex as gan3d_itex
from gan3d import layerforms, peak, runtime
from gan3d.checkpoint import CheckpointError, EpochCheckpoints
from gan3d.heartbeat import Heartbeat
from gan3d.runtime import RankLayout, SettingsError
from gan3d.steplosses import StepLosses
from gan3d.steptimes import StepTimes
from kit.atomic import remove_tree
from kit.errors import KitError

SYNTHETIC_EVENTS_PER_FILE = 512
MAX_EPOCHS = 1_000_000
MAX_SEED = 2**32 - 1  # numpy's and TensorFlow's seeds alike
ABORT_GRACE_S = 0.5  # seconds for the launcher to forward a failing rank's last words


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m gan3d train", description=__doc__.split("\n")[0])
    _data_options(ap)
    _schedule_options(ap)
    _parallel_options(ap)
    _optimizer_options(ap)
    _output_options(ap)
    _kernel_options(ap)
    return ap


def _data_options(ap: argparse.ArgumentParser) -> None:
    """Where the showers come from and how they are checked."""
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument(
        "--data", help="HDF5 shower files: a directory, a glob, or a comma-separated list"
    )
    src.add_argument(
        "--synthetic",
        type=int,
        metavar="N",
        help="simulate N showers into --synthetic-dir (default: a temporary directory)",
    )
    ap.add_argument(
        "--synthetic-dir", help="where --synthetic writes (must be shared by all nodes)"
    )
    ap.add_argument(
        "--validation-data", help="files for validation losses (default: split off --data)"
    )
    ap.add_argument(
        "--test-fraction",
        type=float,
        default=0.1,
        help="share of the events held out for validation when --validation-data is not given "
        "(whole files when they fit the share, else a range of every file; chosen by --seed)",
    )
    ap.add_argument(
        "--skip-bad-events",
        action="store_true",
        help="leave out events with NaN/Inf cells or a NaN/Inf/non-positive energy instead of "
        "stopping (costs one extra read of the data at start; the results count them)",
    )


def _schedule_options(ap: argparse.ArgumentParser) -> None:
    """How long the run is and how much each step takes."""
    ap.add_argument("--preset", choices=["full", "tiny"], default="full")
    ap.add_argument(
        "--epochs", type=int, default=2, help="total epochs (a resumed run continues up to it)"
    )
    ap.add_argument(
        "--steps-per-epoch", type=int, help="cap on optimizer steps per epoch (short runs)"
    )
    ap.add_argument("--validation-steps", type=int, help="cap on validation batches per epoch")
    ap.add_argument("--batch-size", type=int, default=16, help="showers per rank per step")


def _parallel_options(ap: argparse.ArgumentParser) -> None:
    """Ranks, threads and the node they share (the hybrid MPI/OpenMP layout)."""
    ap.add_argument(
        "--threads",
        type=int,
        help="intra-op (OpenMP) threads per rank [SLURM_CPUS_PER_TASK, else cores / ranks on node]",
    )
    ap.add_argument(
        "--inter-op-threads", type=int, default=2, help="TensorFlow inter-op threads per rank"
    )
    ap.add_argument(
        runtime.RANKS_FLAG,
        type=int,
        metavar="N",
        help="the ranks the launcher starts (the kit's lines give it): "
        "an MPI world of another size is refused, "
        "where a runtime that cleans the environment left each rank alone",
    )
    ap.add_argument(
        "--oversubscribe",
        action="store_true",
        help="allow ranks per node x threads > cores of a node (laptops)",
    )
    ap.add_argument(
        "--site", help="site config name or file: node cores, peak FLOP/s, usable memory"
    )
    ap.add_argument(
        "--measure-peak",
        type=float,
        nargs="?",
        const=3.0,
        metavar="SECONDS",
        help="measure the dense-matmul peak in the run's precision and in fp64 on every rank "
        "before training (default 3 s each)",
    )


def _optimizer_options(ap: argparse.ArgumentParser) -> None:
    """What the optimizer does, and in which precision."""
    ap.add_argument(
        "--lr", type=float, default=1e-3, help="learning rate per rank (scaled by the rank count)"
    )
    ap.add_argument(
        "--warmup-epochs",
        type=float,
        default=0.0,
        help="linear learning-rate warm-up from lr to lr x ranks over this many epochs",
    )
    ap.add_argument("--optimizer", choices=["rmsprop", "adam"], default="rmsprop")
    ap.add_argument(
        "--precision",
        choices=["fp32", "bf16", "bf16-emulated"],
        default="fp32",
        help="compute precision: bf16 computes in bfloat16 with float32 master weights, optimizer state, "
        "losses and BatchNorm statistics (refused on a CPU without avx512_bf16/AMX unless bf16-emulated)",
    )
    ap.add_argument(
        "--allreduce-dtype",
        choices=["fp32", "fp16"],
        default="fp32",
        help="gradients on the wire between ranks (fp16: Horovod's fp16 compression)",
    )
    ap.add_argument("--loss-weights", default="8,0.2,0.1", help="BCE, MAPE(Ep), MAPE(cell sum)")
    ap.add_argument("--flip-prob", type=float, default=0.05, help="label flip probability")
    ap.add_argument(
        "--xscale", type=float, default=1.0, help="image scale factor (reference: 1 or 100)"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--deterministic",
        action="store_true",
        help="TensorFlow op determinism: bit-identical reruns and resumes (slower)",
    )


def _output_options(ap: argparse.ArgumentParser) -> None:
    """What the run writes while it trains."""
    ap.add_argument("--results", help="results JSON written by rank 0")
    ap.add_argument(
        "--heartbeat-steps",
        type=int,
        metavar="N",
        help="rank 0 prints a progress line every N steps (and every --heartbeat-seconds)",
    )
    ap.add_argument(
        "--heartbeat-seconds",
        type=float,
        default=60.0,
        metavar="T",
        help="rank 0 prints a progress line when a step ends T seconds or more after the last "
        "line (default 60; whichever of N steps and T seconds comes first)",
    )
    ap.add_argument("--checkpoint-dir", help="rank 0 writes a checkpoint here after every epoch")
    ap.add_argument("--keep-checkpoints", type=int, default=2)
    ap.add_argument(
        "--resume",
        action="store_true",
        help="continue after the last checkpoint in --checkpoint-dir",
    )


def _kernel_options(ap: argparse.ArgumentParser) -> None:
    """How the convolutions run on this CPU."""
    ap.add_argument(
        "--forms",
        choices=layerforms.MODES,
        default=layerforms.default_mode(),
        help="each convolution's form (direct, packed, col2im, folded, frequency domain): auto (default, "
        f"else ${layerforms.ENV}) takes this machine's cached choice or measures it at start (seconds; "
        "whole steps too where the frequency domain's saving is small) and caches it; probe measures again; "
        "fft is the fixed table of one CPU family; direct puts no layer in the frequency domain",
    )
    ap.add_argument(
        "--itex",
        choices=["on", "off"],
        default="off",
        help="Intel Extension for TensorFlow: on needs the ITEX stack's Python (scripts/setup.sh --itex: "
        ".venv-itex) and a CPU ITEX loads on; refused in one line otherwise",
    )


def _loss_weights(text: str) -> tuple[float, float, float]:
    try:
        real, aux, ecal = (float(x) for x in text.split(","))  # ValueError: not three numbers
    except ValueError:
        raise SettingsError(
            f"--loss-weights {text!r}: give three comma-separated numbers, e.g. 8,0.2,0.1"
        ) from None
    return real, aux, ecal


def _check_args(args: argparse.Namespace) -> None:
    for flag, value in (
        ("--epochs", args.epochs),
        ("--batch-size", args.batch_size),
        ("--steps-per-epoch", args.steps_per_epoch),
        ("--validation-steps", args.validation_steps),
        ("--synthetic", args.synthetic),
        ("--heartbeat-steps", args.heartbeat_steps),
        ("--threads", args.threads),
        ("--inter-op-threads", args.inter_op_threads),
        (runtime.RANKS_FLAG, args.ranks),
    ):
        if value is not None and value < 1:
            raise SettingsError(f"{flag} {value}: must be at least 1")
    if not (math.isfinite(args.heartbeat_seconds) and args.heartbeat_seconds > 0):
        raise SettingsError(
            f"--heartbeat-seconds {args.heartbeat_seconds:g}: must be a number of seconds above 0"
        )
    if args.forms not in layerforms.MODES:  # a default from the environment skips argparse's check
        raise SettingsError(
            f"--forms {args.forms!r} (from ${layerforms.ENV}): "
            f"choose one of {', '.join(layerforms.MODES)}; fix: set {layerforms.ENV} to one, or unset it"
        )
    if args.resume and not args.checkpoint_dir:
        raise SettingsError("--resume needs --checkpoint-dir (where the checkpoints are)")
    if not 0.0 < args.test_fraction < 1.0:
        raise SettingsError(f"--test-fraction {args.test_fraction}: must be between 0 and 1")
    # Checked before TensorFlow starts: NaN reached int() (--warmup-epochs), a flip probability of 7
    # reached StepConfig (internal errors), --xscale 0 trained on garbage and --measure-peak inf
    # measured forever.
    for flag, value, ok, what in (
        ("--lr", args.lr, 0 < args.lr < math.inf, "a learning rate above 0"),
        (
            "--flip-prob",
            args.flip_prob,
            0 <= args.flip_prob < 0.5,
            "a label flip probability in [0, 0.5)",
        ),
        (
            "--xscale",
            args.xscale,
            0 < args.xscale < math.inf,
            "a scale factor above 0 (reference: 1 or 100)",
        ),
        (
            "--warmup-epochs",
            args.warmup_epochs,
            0 <= args.warmup_epochs <= MAX_EPOCHS,
            f"0..{MAX_EPOCHS} epochs",
        ),
        (
            "--measure-peak",
            args.measure_peak,
            args.measure_peak is None or 0 <= args.measure_peak <= peak.MAX_SECONDS,
            f"a number of seconds in [0, {peak.MAX_SECONDS:g}] (0: none)",
        ),
        ("--epochs", args.epochs, args.epochs <= MAX_EPOCHS, f"1..{MAX_EPOCHS}"),
        ("--seed", args.seed, 0 <= args.seed <= MAX_SEED, f"0..{MAX_SEED}"),
    ):
        if not ok:
            raise SettingsError(f"{flag} {value}: must be {what}; fix: change it")
    weights = _loss_weights(args.loss_weights)
    if not all(0 <= w < math.inf for w in weights):
        raise SettingsError(
            f"--loss-weights {args.loss_weights!r}: each weight must be a number of 0 or more; "
            "fix: e.g. 8,0.2,0.1"
        )


@functools.lru_cache(maxsize=1)
def _defaults() -> dict[str, Any]:
    """Every option at its default (a study file checks up to 64,000 values: one parser for all)."""
    return vars(build_parser().parse_args(["--synthetic", "1"]))


def refusal(dest: str, value: Any) -> str | None:
    """What gan3d train's own checks say of one option's value, every other option at its default
    (None: accepted). kit study plan asks it of each range end, choice and fixed value of a study,
    so a study never plans a value every such evaluation would be refused for (one set of
    limits)."""
    args = argparse.Namespace(**{**_defaults(), dest: value})
    try:
        _check_args(args)
    except SettingsError as exc:
        return str(exc)
    return None


class LossDiverged(KitError):
    """Losses or weights became NaN/Inf: the state is worthless, so it is never checkpointed or
    reported.
    """

    def __init__(self, message: str, epoch: int, step: int | None, *, fix: str | None = None):
        super().__init__(message, fix=fix)
        self.epoch, self.step = epoch, step
        # the epochs completed before, all finite (the epoch loop fills it in)
        self.history: list[dict] = []


def check_losses(
    losses: dict[str, float], epoch: int, step: int | None, *, lr: float, args
) -> None:
    """Raise LossDiverged if any loss is NaN or Inf (`step` None: the epoch's validation losses)."""
    bad = sorted(k for k, v in losses.items() if not math.isfinite(v))
    if bad:
        what = "NaN" if any(math.isnan(losses[k]) for k in bad) else "Inf"
        where = (
            f"epoch {epoch} step {step}" if step is not None else f"validation after epoch {epoch}"
        )
        raise LossDiverged(
            f"losses became {what} at {where} ({', '.join(bad[:4])}{', ...' if len(bad) > 4 else ''}); "
            "this state is not checkpointed",
            epoch,
            step,
            fix=f"try a lower --lr (the step used {lr:g}), "
            f"check the data scale (--xscale {args.xscale:g}), or --resume from the last checkpoint",
        )


def check_weights(models, epoch: int, args) -> None:
    """Raise LossDiverged if a model variable holds NaN/Inf (before it could be checkpointed)."""
    for model in models:
        for var in model.variables:
            if not np.isfinite(var.numpy()).all():
                raise LossDiverged(
                    f"weights became NaN or Inf in epoch {epoch} ({var.name}); "
                    "this state is not checkpointed",
                    epoch,
                    None,
                    fix=f"try a lower --lr (now {args.lr:g} per rank) "
                    "or --resume from the last checkpoint",
                )


def _say(layout: RankLayout, text: str) -> None:
    if layout.rank == 0:
        print(text, flush=True)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    layout = None
    try:
        _check_args(args)
        layout = runtime.discover_layout(started=args.ranks)
        return _run(args, layout)
    except Exception as exc:  # every failure ends the whole job with one clear line, never a hang
        from gan3d.data import DataError
        from kit.crash import EXIT_ERROR, report_bug
        from kit.errors import KitError

        expected = isinstance(exc, (SettingsError, CheckpointError, DataError, KitError))
        if layout is None or layout.size == 1:
            if not expected:
                raise  # gan3d.__main__'s last-resort handler reports it
            print(f"gan3d train: error: {exc}", file=sys.stderr, flush=True)
            return EXIT_ERROR
        # Other ranks may wait in a collective: end the job. Rank 0 speaks first; another rank
        # only gets to speak (after a pause) if rank 0 did not fail and tear the job down.
        from mpi4py import MPI

        if layout.rank != 0:
            time.sleep(ABORT_GRACE_S * 4)
        if expected:
            print(f"gan3d train: error: [rank {layout.rank}] {exc}", file=sys.stderr, flush=True)
            code = EXIT_ERROR
        else:
            code = report_bug(f"gan3d-train-rank{layout.rank}", exc, debug=False)
        # The launcher forwards output and the abort on separate channels; without a pause it
        # may act on the abort first and drop the line above (mpiexec.hydra did, 3 runs in 40).
        time.sleep(ABORT_GRACE_S)
        MPI.COMM_WORLD.Abort(code)
        return code
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM at Slurm's time limit (kit.interrupt)
        if layout is None or layout.size == 1:
            raise  # gan3d.__main__ says so in one line
        # A rank that just returned would leave the others in a collective, then failing on a shut
        # down Horovod as on a bug: the job ends here, as on an error, with the signal's status.
        from mpi4py import MPI

        from kit import interrupt

        if layout.rank != 0:  # every rank got it (the time limit): rank 0 alone speaks
            time.sleep(ABORT_GRACE_S * 4)
        print(
            f"gan3d train: [rank {layout.rank}] {interrupt.signal_name(exc)}",
            file=sys.stderr,
            flush=True,
        )
        time.sleep(ABORT_GRACE_S)
        MPI.COMM_WORLD.Abort(interrupt.exit_status(exc))
        return interrupt.exit_status(exc)


def _site_and_cores(args: argparse.Namespace):
    """The site (if given) and the cores of one node to size threads against."""
    if args.site:
        from kit.site import load_site

        site = load_site(args.site)
        return site, site.node.cores, f"{site.name!r} site"
    return None, os.cpu_count() or 1, "this machine's"


def _data_files(
    args: argparse.Namespace, layout: RankLayout
) -> tuple[list[Path], list[Path] | None, str | None]:
    """(data files, validation files or None to hold out --test-fraction, temporary dir to remove at
    the end).
    """
    from gan3d.data import expand_data_arg

    temp = None
    if args.synthetic:
        from gan3d.simulate import write_files

        target = args.synthetic_dir
        if layout.rank == 0:
            if target is None:
                target = temp = tempfile.mkdtemp(prefix="gan3d-synthetic-")
                atexit.register(remove_tree, temp)  # ours; also when the run ends in an error
            files = max(2, math.ceil(args.synthetic / SYNTHETIC_EVENTS_PER_FILE))
            try:
                write_files(target, files, math.ceil(args.synthetic / files), seed=args.seed)
            except (
                ValueError
            ) as exc:  # a file there that the simulator did not write, too many showers
                raise SettingsError(f"--synthetic-dir {exc}") from None
        # Horovod (not started yet, so mpi4py): rank 0 simulated them; every rank reads them
        if layout.size > 1:
            from mpi4py import MPI

            target = MPI.COMM_WORLD.bcast(target, root=0)
        paths = expand_data_arg(str(target))
    else:
        paths = expand_data_arg(args.data)
    return paths, expand_data_arg(args.validation_data) if args.validation_data else None, temp


def _weights_digest(models) -> str:
    """SHA-256 over every variable of the models (trainable and BatchNorm statistics)."""
    digest = hashlib.sha256()
    for model in models:
        for var in model.variables:
            digest.update(var.name.encode())
            digest.update(np.ascontiguousarray(var.numpy()).tobytes())
    return digest.hexdigest()


def _mean_losses(sums: dict[str, float], count: int, hvd) -> dict[str, float]:
    """Per-rank mean of each loss, then averaged over ranks (one all-reduce)."""
    import tensorflow as tf

    if not sums or count == 0:
        return {}
    keys = sorted(sums)
    local = tf.constant([sums[k] / count for k in keys], tf.float64)
    mean = (
        hvd.allreduce(local, op=hvd.Average, name="epoch_losses").numpy()
        if hvd.size() > 1
        else local.numpy()
    )
    return {k: float(v) for k, v in zip(keys, mean)}


def warmup_lr(lr: float, scaled_lr: float, global_step: int, *, warmup_steps: int) -> float:
    """Linear warm-up (Goyal et al. 2017): from the one-rank rate to the rank-scaled one."""
    return lr + (scaled_lr - lr) * min(1.0, (global_step + 1) / warmup_steps)


def _average_statistics(models, hvd) -> None:
    """Average the BatchNorm moving statistics over ranks (Horovod only all-reduces gradients).

    Each rank normalizes with its own batches, so these drift apart during an epoch; after this
    every rank holds the same model at epoch boundaries, the checkpoint of rank 0 is the state of
    all ranks, and a resumed multi-rank run continues exactly.
    """
    stats = [v for m in models for v in m.non_trainable_variables]
    if hvd.size() > 1 and stats:
        for var, mean in zip(
            stats, hvd.grouped_allreduce(stats, op=hvd.Average, name="bn_statistics")
        ):
            var.assign(mean)


def _train_epoch(
    step,
    stream,
    epoch: int,
    steps: int,
    lr_at,
    times: StepTimes,
    args,
    beat: Heartbeat | None,
    logged: StepLosses,
) -> tuple[dict, int, float]:
    """One epoch of `steps` updates; returns (loss sums, steps done, learning rate of the first).
    Stops at the first step whose losses are not finite (LossDiverged). `beat`: rank 0's
    heartbeat."""
    sums: dict[str, float] = {}
    done, lr_first = 0, step.learning_rate
    for images, ep, cellsum in itertools.islice(stream.epoch(epoch), steps):  # reads no batch more
        if lr_at:
            step.set_learning_rate(lr_at(epoch * steps + done))
        if done == 0:
            lr_first = step.learning_rate
        ts = time.perf_counter()
        # float() waits for the step
        losses = {k: float(v) for k, v in step(images, ep, cellsum).items()}
        times.add(time.perf_counter() - ts, epoch + 1, done + 1)
        check_losses(losses, epoch + 1, done + 1, lr=step.learning_rate, args=args)
        logged.add(epoch * steps + done, epoch + 1, done + 1, losses=losses)
        for k, v in losses.items():
            sums[k] = sums.get(k, 0.0) + v
        done += 1
        if beat:
            beat.step_done(done)
    return sums, done, lr_first


def _validation_sums(step, stream, steps: int, rank: int) -> tuple[dict, int]:
    """This rank's validation loss sums over its shard (same batches every epoch)."""
    sums: dict[str, float] = {}
    done = 0
    for images, ep, cellsum in itertools.islice(stream.epoch(0), steps):
        for k, v in step.evaluate(images, ep, cellsum, batch_index=rank * steps + done).items():
            sums[k] = sums.get(k, 0.0) + float(v)
        done += 1
    return sums, done


@dataclass
class Host:
    """Where this rank runs and how it is threaded: decided before TensorFlow loads (pools are sized
    then).
    """

    site: Any  # kit.site.Site, or None without --site
    cores: int  # of one node, to size threads against
    threads: int
    settings: runtime.ThreadSettings
    bf16_unit: str | None
    itex: gan3d_itex.ItexState  # installed, and loaded (--itex on: probed before TensorFlow)
    warnings: list[str]


@dataclass
class Data:
    """The opened train/validation split and this rank's streams over it."""

    train_files: Any
    val_files: Any
    held_out: dict
    skipped: dict[str, int]
    stream: Any
    val_stream: Any
    steps: int  # optimizer steps per epoch
    val_steps: int
    temp_dir: str | None  # --synthetic without --synthetic-dir: rank 0 removes it at the end


@dataclass
class Model:
    """The generator, discriminator and their training step, with what a checkpoint holds."""

    gen: Any
    disc: Any
    step: Any  # gan3d.step.TrainStep
    state: Any  # tf.train.Checkpoint of models, optimizers and counters
    loss_weights: tuple[float, float, float]
    initial_digest: str


@dataclass
class Progress:
    """What the epoch loop measured: the results' epoch, loss and step-time fields."""

    times: StepTimes = field(default_factory=StepTimes)
    step_losses: StepLosses = field(default_factory=StepLosses)
    history: list[dict] = field(default_factory=list)
    # the train loop, before the closing all-reduces
    epoch_times: list[float] = field(default_factory=list)
    wall_times: list[float] = field(default_factory=list)  # the paper's epoch clock
    # each epoch's steps alone, beside its wall clock
    step_sums: list[float] = field(default_factory=list)
    val_times: list[float] = field(default_factory=list)
    ckpt_times: list[float] = field(default_factory=list)
    # the node's MemAvailable at epoch ends
    available: list[int | None] = field(default_factory=list)


def _plan_host(args: argparse.Namespace, layout: RankLayout) -> Host:
    """Threads per rank checked against the node and exported, before TensorFlow starts."""
    site, cores, where = _site_and_cores(args)
    threads = args.threads or runtime.default_threads(layout.local_size, cores)
    from gan3d.precision import check_supported

    bf16_unit = check_supported(args.precision)  # from the CPU flags, before any slow work
    runtime.check_capacity(
        layout.ranks_per_node,
        threads,
        args.inter_op_threads,
        cores=cores,
        where=where,
        oversubscribe=args.oversubscribe,
    )
    if args.itex == "on":  # before the data and TensorFlow: a child Python survives an ITEX abort
        itex = gan3d_itex.probe()
        if not itex.loaded:
            raise SettingsError(f"--itex on: ITEX does not load: {itex.reason}")
    else:
        itex = gan3d_itex.ItexState(gan3d_itex.installed(), False)
    settings = runtime.thread_settings(threads, args.inter_op_threads)
    warnings = runtime.apply_environment(settings)
    if args.itex == "off" and itex.installed:
        warnings.append(
            "--itex off, but TensorFlow loads an installed ITEX plugin by itself; "
            "for a plain-TensorFlow run use an environment without intel-extension-for-tensorflow"
        )
    return Host(
        site=site,
        cores=cores,
        threads=threads,
        settings=settings,
        bf16_unit=bf16_unit,
        itex=itex,
        warnings=warnings,
    )


def _open_data(args: argparse.Namespace, layout: RankLayout) -> Data:
    """Split and open the showers; checked before TensorFlow starts, so a bad file stops the job in
    seconds.
    """
    from gan3d.data import ShowerStream, describe_held_out, open_split

    train_paths, val_paths, temp_dir = _data_files(args, layout)
    train_files, val_files, held_out = open_split(
        train_paths,
        val_paths,
        fraction=args.test_fraction,
        seed=args.seed,
        skip_bad_events=args.skip_bad_events,
    )
    _say(layout, f"gan3d train: {describe_held_out(held_out)}")
    skipped = {"train": train_files.skipped_events, "validation": val_files.skipped_events}
    if any(skipped.values()):
        _say(
            layout,
            f"gan3d train: --skip-bad-events left out {skipped['train']} training and "
            f"{skipped['validation']} validation event(s) with NaN/Inf cells or bad energies",
        )
    # Horovod: each rank reads its own shard of every epoch's batches (rank, size).
    stream = ShowerStream(
        train_files,
        batch_size=args.batch_size,
        rank=layout.rank,
        size=layout.size,
        seed=args.seed,
        xscale=args.xscale,
        shuffle=True,
    )
    val_stream = ShowerStream(
        val_files,
        batch_size=args.batch_size,
        rank=layout.rank,
        size=layout.size,
        seed=args.seed,
        xscale=args.xscale,
        shuffle=False,
    )
    steps = min(stream.batches_per_epoch, args.steps_per_epoch or stream.batches_per_epoch)
    val_steps = min(
        val_stream.batches_per_epoch, args.validation_steps or val_stream.batches_per_epoch
    )
    return Data(
        train_files=train_files,
        val_files=val_files,
        held_out=held_out,
        skipped=skipped,
        stream=stream,
        val_stream=val_stream,
        steps=steps,
        val_steps=val_steps,
        temp_dir=temp_dir,
    )


def _prepare_checkpoints(args: argparse.Namespace, layout: RankLayout) -> EpochCheckpoints | None:
    """The checkpoint directory, checked and made by rank 0 first, before the data and TensorFlow:
    one that cannot be written fails in seconds, and a run without --resume into a directory holding
    another run's checkpoints is refused (its epochs would replace them, its results name
    theirs)."""
    if not args.checkpoint_dir:
        return None
    checkpoints = EpochCheckpoints(args.checkpoint_dir, args.keep_checkpoints)
    if layout.rank == 0:
        if not args.resume:
            checkpoints.refuse_others()
        checkpoints.prepare()
    return checkpoints


def _start_horovod(args: argparse.Namespace, layout: RankLayout, host: Host):
    """TensorFlow with the thread pools sized, then Horovod on the MPI mpi4py started; returns (hvd,
    settings in force).
    """
    import tensorflow as tf

    host.warnings += runtime.configure_tensorflow(host.settings)
    if args.itex == "on":  # its kernels are mapped with TensorFlow's import; the probe said so
        host.itex = gan3d_itex.load_here()
        if not host.itex.loaded:
            raise SettingsError(f"--itex on: ITEX does not load: {host.itex.reason}")
    elif host.itex.installed:  # --itex off: TensorFlow loads an installed plugin by itself
        host.itex = gan3d_itex.seen_here()
    try:
        import horovod.tensorflow as hvd
    except ImportError:
        if layout.size > 1:  # mpi4py started several ranks, but nothing can average their gradients
            raise SettingsError(
                f"{layout.size} ranks but Horovod is not installed; fix: "
                "build it against the launcher's MPI (scripts/setup.sh), or run one process"
            ) from None
        from gan3d import solo as hvd

    # Horovod: initialize (it reuses the MPI that mpi4py started) and check it sees the same job.
    hvd.init()
    if (hvd.rank(), hvd.size()) != (layout.rank, layout.size):
        raise SettingsError(
            f"Horovod sees rank {hvd.rank()} of {hvd.size()} but MPI rank {layout.rank} of {layout.size}: "
            "horovod and mpi4py are built against different MPIs; fix: "
            "rebuild both against the MPI the launcher belongs to"
        )
    # same initial weights everywhere (rank 0's are broadcast)
    tf.keras.utils.set_random_seed(args.seed)
    if args.deterministic:
        tf.config.experimental.enable_op_determinism()
    in_force = runtime.settings_in_force()
    _say(
        layout,
        f"gan3d train: {layout.size} rank(s) on {layout.nodes} node(s), {layout.ranks_per_node} per node; "
        f"intra-op {in_force['intra_op_threads']}, inter-op {in_force['inter_op_threads']} threads per rank; "
        + " ".join(f"{k}={v}" for k, v in in_force["env"].items()),
    )
    for w in host.warnings:
        _say(layout, f"gan3d train: warning: {w}")
    return hvd, in_force


def _peak_precision(args: argparse.Namespace) -> str:
    """The peak to divide by is the one of the arithmetic the CPU runs: bf16 on a bf16 unit;
    emulated bf16 runs on the fp32 units (results still say "bf16-emulated" under "precision")."""
    return "bf16" if args.precision == "bf16" else "fp32"


def _measure_peaks(args: argparse.Namespace, host: Host, hvd) -> dict[str, float]:
    """--measure-peak: the job's dense-matmul rate per precision, every rank at once."""
    peaks: dict[str, float] = {}
    if args.measure_peak:
        from gan3d.peak import measure_peak_flops

        # all ranks at once: what this layout reaches
        for p in dict.fromkeys((_peak_precision(args), "fp64")):
            mine = measure_peak_flops(host.threads, seconds=args.measure_peak, precision=p)
            # Horovod: the job's peak is the sum of every rank's.
            peaks[p] = float(sum(hvd.allgather_object(mine)))
    return peaks


def _choose_forms(args: argparse.Namespace, layout: RankLayout, host: Host, hvd):
    """Each convolution's form (--forms): cached or probed on this machine, or a fixed table;
    rank 0's choice is every rank's."""
    from gan3d.layerforms import RunShape, choose_forms
    from gan3d.precision import model_precision

    shape = RunShape(
        preset=args.preset,
        precision=model_precision(args.precision),
        batch_per_rank=args.batch_size,
        threads_per_rank=host.threads,
        inter_op_threads=args.inter_op_threads,
        ranks_per_node=layout.ranks_per_node,
    )
    # Horovod: every rank builds the model with rank 0's forms.
    choice = choose_forms(
        args.forms,
        shape,
        rank=layout.rank,
        share=lambda value: hvd.broadcast_object(value, root_rank=0),
    )
    for w in choice.warnings:
        _say(layout, f"gan3d train: warning: {w}")
    by_form: dict[str, list[str]] = {}
    for name, form in choice.forms.items():
        by_form.setdefault(form, []).append(name)
    took = f", {choice.probe['seconds']:.1f} s" if choice.probe else ""
    _say(
        layout,
        f"gan3d train: layer forms ({choice.source}{took}): "
        + "; ".join(f"{form} {','.join(names)}" for form, names in sorted(by_form.items())),
    )
    return choice


def _build_model(
    args: argparse.Namespace, layout: RankLayout, host: Host, hvd, forms: dict[str, str]
) -> Model:
    """Generator, discriminator and the step that trains them (its optimizers all-reduce
    gradients).
    """
    import tensorflow as tf

    from gan3d.model import PRESETS, discriminator, generator
    from gan3d.precision import model_precision
    from gan3d.step import StepConfig, TrainStep

    compute = model_precision(args.precision)
    # seeded again here: the initial weights are the seed's whatever ran before (a probe, a peak)
    tf.keras.utils.set_random_seed(args.seed)
    gen = generator(args.preset, compute, forms=forms)
    disc = discriminator(args.preset, compute, forms=forms)
    if args.precision != "fp32":
        fft = sorted(name for name, form in forms.items() if form == "fft")
        in_fp32 = f"; float32 in the frequency domain: {','.join(fft)}" if fft else ""
        _say(
            layout,
            f"gan3d train: precision {args.precision} (bfloat16 compute, float32 weights{in_fp32}); "
            f"CPU bf16 unit: {host.bf16_unit or 'none, emulated'}",
        )
    loss_weights = _loss_weights(args.loss_weights)
    # Horovod: scale the learning rate by the number of ranks (the global batch grows with them);
    # TrainStep averages gradients over ranks (hvd.allreduce) before each optimizer update.
    config = StepConfig(
        loss_weights=loss_weights,
        flip_prob=args.flip_prob,
        learning_rate=args.lr * layout.size,
        optimizer=args.optimizer,
        xscale=args.xscale,
        latent_dim=PRESETS[args.preset].latent_dim,
        seed=args.seed,
        allreduce_dtype=args.allreduce_dtype,
    )
    step = TrainStep(gen, disc, config=config, hvd=hvd)
    state = tf.train.Checkpoint(generator=gen, discriminator=disc, **step.variables_to_checkpoint())
    return Model(
        gen=gen,
        disc=disc,
        step=step,
        state=state,
        loss_weights=loss_weights,
        initial_digest=_weights_digest((gen, disc)),
    )


def _restore_and_broadcast(
    args: argparse.Namespace,
    layout: RankLayout,
    hvd,
    model: Model,
    checkpoints: EpochCheckpoints | None,
) -> int:
    """Rank 0 restores the last checkpoint (--resume); every rank then starts from rank 0's state.
    Returns the number of epochs already trained."""
    start_epoch, latest = 0, None
    if args.resume and layout.rank == 0:
        if checkpoints is None:  # _check_args refuses this before any work
            raise SettingsError("--resume needs --checkpoint-dir (where the checkpoints are)")
        latest = checkpoints.latest()
        if latest is None:
            raise CheckpointError(
                f"no complete checkpoint in {checkpoints.directory}",
                fix="train without --resume first, or point --checkpoint-dir at the run",
                where="--resume",
            )
        meta = checkpoints.restore(model.state, latest, {"preset": args.preset})
        start_epoch = int(meta["epoch"])
    # Horovod: every rank continues from the epoch rank 0 restored.
    start_epoch = int(hvd.broadcast_object(start_epoch, root_rank=0))
    # Horovod: broadcast rank 0's state (fresh or resumed) everywhere: models, optimizer slots and
    # counters. (The RNGs are reseeded per rank and epoch: TrainStep.reseed.)
    step = model.step
    hvd.broadcast_variables(
        model.gen.variables
        + model.disc.variables
        + step.d_optimizer.variables
        + step.g_optimizer.variables,
        root_rank=0,
    )
    # this run's --lr, not the one restored with the optimizer
    step.set_learning_rate(step.config.learning_rate)
    if start_epoch:
        _say(layout, f"gan3d train: resumed from {latest} after epoch {start_epoch}")
    if start_epoch >= args.epochs:
        _say(
            layout,
            f"gan3d train: already trained {start_epoch} epoch(s) of --epochs {args.epochs}; nothing to do",
        )
    return start_epoch


def _train(
    args: argparse.Namespace,
    layout: RankLayout,
    hvd,
    model: Model,
    data: Data,
    start_epoch: int,
    checkpoints: EpochCheckpoints | None,
) -> Progress:
    """The epochs: train, average losses and BatchNorm statistics over ranks, validate, check,
    checkpoint.
    """
    from gan3d import results as res

    step, steps = model.step, data.steps
    base_lr = step.config.learning_rate
    warmup_steps = int(round(args.warmup_epochs * steps))
    lr_at = (
        (lambda global_step: warmup_lr(args.lr, base_lr, global_step, warmup_steps=warmup_steps))
        if warmup_steps
        else None
    )
    beat = Heartbeat(
        lambda text: _say(layout, text),
        epochs=args.epochs,
        steps=steps,
        showers_per_step=args.batch_size * layout.size,
        every_steps=args.heartbeat_steps,
        every_seconds=args.heartbeat_seconds,
    )
    run = Progress()
    try:
        for epoch in range(start_epoch, args.epochs):
            step.reseed(layout.rank, epoch)
            t0, in_steps = time.perf_counter(), run.times.every_step
            beat.start_epoch(epoch + 1)
            sums, done, lr_first = _train_epoch(
                step,
                data.stream,
                epoch,
                steps,
                lr_at,
                run.times,
                args,
                beat if layout.rank == 0 else None,
                run.step_losses,
            )
            run.epoch_times.append(time.perf_counter() - t0)
            run.step_sums.append(run.times.every_step - in_steps)
            if done != steps:
                raise SettingsError(
                    f"rank {layout.rank} got {done} batches in epoch {epoch + 1}, expected {steps}"
                )
            # Horovod: every rank reports the losses and
            # BatchNorm statistics averaged over all ranks.
            train_losses = _mean_losses(sums, done, hvd)
            _average_statistics((model.gen, model.disc), hvd)
            run.wall_times.append(time.perf_counter() - t0)  # t0: the epoch's start, as above
            run.available.append(res.memory_available_bytes())

            t0 = time.perf_counter()
            val_losses = _mean_losses(
                *_validation_sums(step, data.val_stream, data.val_steps, layout.rank), hvd
            )
            run.val_times.append(time.perf_counter() - t0)
            check_losses(
                {**train_losses, **{f"validation {k}": v for k, v in val_losses.items()}},
                epoch + 1,
                None,
                lr=step.learning_rate,
                args=args,
            )
            # identical on all ranks: all stop together
            check_weights((model.gen, model.disc), epoch + 1, args)

            t0 = time.perf_counter()
            # Horovod: checkpoint on rank 0 only, so that ranks do not overwrite each other's.
            if checkpoints and layout.rank == 0:
                checkpoints.save(
                    model.state,
                    model.gen,
                    epoch + 1,
                    meta={
                        "preset": args.preset,
                        "seed": args.seed,
                        "ranks": layout.size,
                        "batch_size": args.batch_size,
                        "steps_per_epoch": steps,
                        "precision": args.precision,
                    },
                )
            run.ckpt_times.append(time.perf_counter() - t0)
            run.history.append(
                {
                    "epoch": epoch + 1,
                    "train": train_losses,
                    "validation": val_losses,
                    "learning_rate": {"first_step": lr_first, "last_step": step.learning_rate},
                }
            )
            _say(
                layout,
                f"gan3d train: epoch {epoch + 1}/{args.epochs}: {run.epoch_times[-1]:.2f} s, {steps} steps, "
                f"d_loss {train_losses.get('d_loss', float('nan')):.4f} g_loss "
                f"{train_losses.get('g_loss', float('nan')):.4f}, "
                f"validation d_loss {val_losses.get('d_loss', float('nan')):.4f}",
            )
    except LossDiverged as exc:
        exc.history = run.history  # the completed epochs, all finite
        raise
    return run


def _gather_ranks(hvd, layout: RankLayout, model: Model, run: Progress) -> list[dict]:
    """Horovod: every rank's host, memory and final weights, in rank order, for rank 0's record."""
    from gan3d import results as res

    return hvd.allgather_object(
        {
            "rank": layout.rank,
            "hostname": layout.hostname,
            "peak_rss_bytes": res.peak_rss_bytes(),
            "weights_sha256": _weights_digest((model.gen, model.disc)),
            "available": min(filter(None, run.available), default=None),
        }
    )


def _run(args: argparse.Namespace, layout: RankLayout) -> int:
    """The phases of a run, in the order they must happen (see the module docstring)."""
    from gan3d import results as res
    from kit.code_commit import source_commit

    started = res.RunClock.start()
    code = source_commit() if layout.rank == 0 else {}
    checkpoints = _prepare_checkpoints(args, layout)
    host = _plan_host(args, layout)
    data = _open_data(args, layout)
    hvd, in_force = _start_horovod(args, layout, host)
    peaks = _measure_peaks(args, host, hvd)
    forms = _choose_forms(args, layout, host, hvd)
    model = _build_model(args, layout, host, hvd, forms.forms)
    start_epoch = _restore_and_broadcast(args, layout, hvd, model, checkpoints)
    try:
        run = _train(args, layout, hvd, model, data, start_epoch, checkpoints)
    except LossDiverged as exc:
        if layout.rank == 0 and args.results:
            res.write_results(
                args.results,
                res.failure_record(
                    args,
                    layout,
                    exc,
                    history=exc.history,
                    checkpoints=checkpoints,
                    started=started,
                    code=code,
                ),
            )
        raise
    per_rank = _gather_ranks(hvd, layout, model, run)
    # Horovod: rank 0 alone writes the results (every rank's facts are in per_rank).
    if layout.rank == 0 and args.results:
        record = res.run_record(
            args,
            layout,
            host,
            data=data,
            model=model,
            run=run,
            per_rank=per_rank,
            started=started,
            code=code,
            in_force=in_force,
            peaks_measured=peaks,
            peak_precision=_peak_precision(args),
            layer_forms=forms.record(),
            start_epoch=start_epoch,
            checkpoint=checkpoints.latest_own() if checkpoints else None,
        )
        path = res.write_results(args.results, record)
        _say(
            layout,
            f"gan3d train: {record['showers_per_second']:.2f} showers/s, "
            f"{record['flop_per_second'] / 1e9:.2f} GFLOP/s; results in {path}",
        )
        rss, usable = record["peak_rss_bytes_per_rank"], record["usable_memory_bytes_per_rank"]
        if usable and max(rss) > usable:
            _say(
                layout,
                f"gan3d train: warning: peak memory {max(rss) / 1e9:.2f} GB per rank exceeds the "
                f"{usable / 1e9:.2f} GB a rank may use on a {host.site.name} node",
            )
    data.train_files.close()
    data.val_files.close()
    if data.temp_dir and layout.rank == 0:
        remove_tree(data.temp_dir)
    hvd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
