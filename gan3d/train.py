"""`python -m gan3d train`: Horovod data-parallel 3DGAN training in hybrid MPI/OpenMP.

Launch one process per rank with the MPI's own launcher (`mpiexec -n R ...` or `srun`); each rank
uses `--threads` compute threads. Order of start-up matters and is kept here: MPI layout (mpi4py)
-> thread checks and environment -> TensorFlow -> Horovod -> data -> models -> broadcast of the
initial (or resumed) state from rank 0 -> epochs. Rank 0 checkpoints every epoch and writes the
results JSON (see gan3d.results for its conventions).

A run whose losses or weights become NaN/Inf stops at once with LossDiverged (exit 1): that
state is never checkpointed, and the results JSON, when asked for, is written with
"status": "failed", the error and the finite history before it, and no throughput or loss
figure of the failed epoch, so no report can count it as a run.
"""
from __future__ import annotations

import argparse
import atexit
import hashlib
import importlib
import importlib.util
import itertools
import math
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gan3d import runtime
from gan3d.checkpoint import CheckpointError, EpochCheckpoints
from gan3d.runtime import RankLayout, SettingsError
from kit.atomic import remove_tree
from kit.errors import KitError

ITEX_MODULE = "intel_extension_for_tensorflow"
SYNTHETIC_EVENTS_PER_FILE = 512
ABORT_GRACE_S = 0.5  # seconds for the launcher to forward a failing rank's last words


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m gan3d train", description=__doc__.split("\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--data", help="HDF5 shower files: a directory, a glob, or a comma-separated list")
    src.add_argument("--synthetic", type=int, metavar="N",
                     help="simulate N showers into --synthetic-dir (default: a temporary directory)")
    ap.add_argument("--synthetic-dir", help="where --synthetic writes (must be shared by all nodes)")
    ap.add_argument("--validation-data", help="files for validation losses (default: split off --data)")
    ap.add_argument("--test-fraction", type=float, default=0.1,
                    help="share of the events held out for validation when --validation-data is not given "
                         "(whole files when they fit the share, else a range of every file; chosen by --seed)")
    ap.add_argument("--skip-bad-events", action="store_true",
                    help="leave out events with NaN/Inf cells or a NaN/Inf/non-positive energy instead of "
                         "stopping (costs one extra read of the data at start; the results count them)")
    ap.add_argument("--preset", choices=["full", "tiny"], default="full")
    ap.add_argument("--epochs", type=int, default=2, help="total epochs (a resumed run continues up to it)")
    ap.add_argument("--steps-per-epoch", type=int, help="cap on optimizer steps per epoch (short runs)")
    ap.add_argument("--validation-steps", type=int, help="cap on validation batches per epoch")
    ap.add_argument("--batch-size", type=int, default=16, help="showers per rank per step")
    ap.add_argument("--threads", type=int,
                    help="intra-op (OpenMP) threads per rank [SLURM_CPUS_PER_TASK, else cores / ranks on node]")
    ap.add_argument("--inter-op-threads", type=int, default=2, help="TensorFlow inter-op threads per rank")
    ap.add_argument("--oversubscribe", action="store_true",
                    help="allow ranks per node x threads > cores of a node (laptops)")
    ap.add_argument("--site", help="site config name or file: node cores, peak FLOP/s, usable memory")
    ap.add_argument("--measure-peak", type=float, nargs="?", const=3.0, metavar="SECONDS",
                    help="measure the dense-matmul peak in the run's precision and in fp64 on every rank "
                         "before training (default 3 s each)")
    ap.add_argument("--lr", type=float, default=1e-3, help="learning rate per rank (scaled by the rank count)")
    ap.add_argument("--warmup-epochs", type=float, default=0.0,
                    help="linear learning-rate warm-up from lr to lr x ranks over this many epochs")
    ap.add_argument("--optimizer", choices=["rmsprop", "adam"], default="rmsprop")
    ap.add_argument("--precision", choices=["fp32", "bf16", "bf16-emulated"], default="fp32",
                    help="compute precision: bf16 computes in bfloat16 with float32 master weights, optimizer "
                         "state, losses and BatchNorm statistics (refused on a CPU without avx512_bf16/AMX "
                         "unless bf16-emulated)")
    ap.add_argument("--allreduce-dtype", choices=["fp32", "fp16"], default="fp32",
                    help="gradients on the wire between ranks (fp16: Horovod's fp16 compression)")
    ap.add_argument("--loss-weights", default="8,0.2,0.1", help="BCE, MAPE(Ep), MAPE(cell sum)")
    ap.add_argument("--flip-prob", type=float, default=0.05, help="label flip probability")
    ap.add_argument("--xscale", type=float, default=1.0, help="image scale factor (reference: 1 or 100)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--deterministic", action="store_true",
                    help="TensorFlow op determinism: bit-identical reruns and resumes (slower)")
    ap.add_argument("--results", help="results JSON written by rank 0")
    ap.add_argument("--checkpoint-dir", help="rank 0 writes a checkpoint here after every epoch")
    ap.add_argument("--keep-checkpoints", type=int, default=2)
    ap.add_argument("--resume", action="store_true", help="continue after the last checkpoint in --checkpoint-dir")
    ap.add_argument("--itex", choices=["on", "off"], default="off",
                    help="Intel Extension for TensorFlow (installed by the site, not by the kit: README, Requirements)")
    return ap


def _loss_weights(text: str) -> tuple[float, float, float]:
    try:
        weights = tuple(float(x) for x in text.split(","))
    except ValueError:
        weights = ()
    if len(weights) != 3:
        raise SettingsError(f"--loss-weights {text!r}: give three comma-separated numbers, e.g. 8,0.2,0.1")
    return weights  # type: ignore[return-value]


def _check_args(args: argparse.Namespace) -> None:
    for flag, value in (("--epochs", args.epochs), ("--batch-size", args.batch_size),
                        ("--steps-per-epoch", args.steps_per_epoch), ("--validation-steps", args.validation_steps),
                        ("--synthetic", args.synthetic)):
        if value is not None and value < 1:
            raise SettingsError(f"{flag} {value}: must be at least 1")
    if args.resume and not args.checkpoint_dir:
        raise SettingsError("--resume needs --checkpoint-dir (where the checkpoints are)")
    if not 0.0 < args.test_fraction < 1.0:
        raise SettingsError(f"--test-fraction {args.test_fraction}: must be between 0 and 1")
    _loss_weights(args.loss_weights)


class LossDiverged(KitError):
    """Losses or weights became NaN/Inf: the state is worthless, so it is never checkpointed or reported."""

    def __init__(self, message: str, epoch: int, step: int | None):
        super().__init__(message)
        self.epoch, self.step = epoch, step


def check_losses(losses: dict[str, float], epoch: int, step: int | None, lr: float, args) -> None:
    """Raise LossDiverged if any loss is NaN or Inf (`step` None: the epoch's validation losses)."""
    bad = sorted(k for k, v in losses.items() if not math.isfinite(v))
    if bad:
        what = "NaN" if any(math.isnan(losses[k]) for k in bad) else "Inf"
        where = f"epoch {epoch} step {step}" if step is not None else f"validation after epoch {epoch}"
        raise LossDiverged(f"losses became {what} at {where} ({', '.join(bad[:4])}"
                           f"{', ...' if len(bad) > 4 else ''}); this state is not checkpointed; fix: try a "
                           f"lower --lr (the step used {lr:g}), check the data scale (--xscale {args.xscale:g}), "
                           "or --resume from the last checkpoint", epoch, step)


def check_weights(models, epoch: int, args) -> None:
    """Raise LossDiverged if a model variable holds NaN/Inf (before it could be checkpointed)."""
    for model in models:
        for var in model.variables:
            if not np.isfinite(var.numpy()).all():
                raise LossDiverged(f"weights became NaN or Inf in epoch {epoch} ({var.name}); this state is not "
                                   f"checkpointed; fix: try a lower --lr (now {args.lr:g} per rank) or "
                                   "--resume from the last checkpoint", epoch, None)


def _say(layout: RankLayout, text: str) -> None:
    if layout.rank == 0:
        print(text, flush=True)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    layout = None
    try:
        _check_args(args)
        layout = runtime.discover_layout()
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


def _site_and_cores(args: argparse.Namespace):
    """The site (if given) and the cores of one node to size threads against."""
    if args.site:
        from kit.site import load_site

        site = load_site(args.site)
        return site, site.node.cores, f"{site.name!r} site"
    return None, os.cpu_count() or 1, "this machine's"


def _data_files(args: argparse.Namespace, layout: RankLayout) -> tuple[list[Path], list[Path] | None, str | None]:
    """(data files, validation files or None to hold out --test-fraction, temporary dir to remove at the end)."""
    from gan3d.data import expand_data_arg

    temp = None
    if args.synthetic:
        from mpi4py import MPI

        from gan3d.simulate import write_files

        target = args.synthetic_dir
        if layout.rank == 0:
            if target is None:
                target = temp = tempfile.mkdtemp(prefix="gan3d-synthetic-")
                atexit.register(remove_tree, temp)  # ours; also when the run ends in an error
            files = max(2, math.ceil(args.synthetic / SYNTHETIC_EVENTS_PER_FILE))
            write_files(target, files, math.ceil(args.synthetic / files), args.seed)
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
    mean = hvd.allreduce(local, op=hvd.Average, name="epoch_losses").numpy() if hvd.size() > 1 else local.numpy()
    return {k: float(v) for k, v in zip(keys, mean)}


def warmup_lr(lr: float, scaled_lr: float, global_step: int, warmup_steps: int) -> float:
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
        for var, mean in zip(stats, hvd.grouped_allreduce(stats, op=hvd.Average, name="bn_statistics")):
            var.assign(mean)


@dataclass
class StepTimes:
    """Step wall times; the first step (graph tracing, oneDNN primitive creation) is kept apart."""
    first: float | None = None
    steps: int = 0
    seconds: float = 0.0
    every_step: float = 0.0  # the first included: an epoch's share is compared with its wall clock

    def add(self, seconds: float) -> None:
        self.every_step += seconds
        if self.first is None:
            self.first = seconds
        else:
            self.steps, self.seconds = self.steps + 1, self.seconds + seconds


def _train_epoch(step, stream, epoch: int, steps: int, lr_at, times: StepTimes, args) -> tuple[dict, int, float]:
    """One epoch of `steps` updates; returns (loss sums, steps done, learning rate of the first).
    Stops at the first step whose losses are not finite (LossDiverged)."""
    sums: dict[str, float] = {}
    done, lr_first = 0, step.learning_rate
    for images, ep, cellsum in itertools.islice(stream.epoch(epoch), steps):  # reads no batch more
        if lr_at:
            step.set_learning_rate(lr_at(epoch * steps + done))
        if done == 0:
            lr_first = step.learning_rate
        ts = time.perf_counter()
        losses = {k: float(v) for k, v in step(images, ep, cellsum).items()}  # float() waits for the step
        times.add(time.perf_counter() - ts)
        check_losses(losses, epoch + 1, done + 1, step.learning_rate, args)
        for k, v in losses.items():
            sums[k] = sums.get(k, 0.0) + v
        done += 1
    return sums, done, lr_first


def _write_failure(args, layout: RankLayout, exc: LossDiverged, history: list, checkpoints) -> None:
    """The results JSON of a diverged run: says it failed and why; no throughput, no NaN."""
    from gan3d import results as res

    last = checkpoints.latest() if checkpoints else None
    res.write_results(args.results, {
        "status": "failed", "error": str(exc), "failed_at": {"epoch": exc.epoch, "step": exc.step},
        "preset": args.preset, "seed": args.seed, "ranks": layout.size, "batch_per_rank": args.batch_size,
        "precision": args.precision, "learning_rate": {"per_rank": args.lr}, "xscale": args.xscale,
        "losses": history,  # the completed epochs, all finite
        "checkpoint": str(last) if last else None,
    })


def _validation_sums(step, stream, steps: int, rank: int) -> tuple[dict, int]:
    """This rank's validation loss sums over its shard (same batches every epoch)."""
    sums: dict[str, float] = {}
    done = 0
    for images, ep, cellsum in itertools.islice(stream.epoch(0), steps):
        for k, v in step.evaluate(images, ep, cellsum, batch_index=rank * steps + done).items():
            sums[k] = sums.get(k, 0.0) + float(v)
        done += 1
    return sums, done


def _run(args: argparse.Namespace, layout: RankLayout) -> int:
    t_start = time.time()
    site, cores, where = _site_and_cores(args)
    threads = args.threads or runtime.default_threads(layout.local_size, cores)
    from gan3d.precision import check_supported, model_precision

    bf16_unit = check_supported(args.precision)  # from the CPU flags, before any slow work
    runtime.check_capacity(layout.ranks_per_node, threads, args.inter_op_threads, cores, where,
                           args.oversubscribe)
    if args.itex == "on" and importlib.util.find_spec(ITEX_MODULE) is None:  # before any slow work
        raise SettingsError("--itex on: intel-extension-for-tensorflow is not installed (not in the kit's pin "
                            "list: it requires the full tensorflow build, which clashes with the pinned "
                            "tensorflow-cpu; README, Requirements); fix: run with --itex off")
    settings = runtime.thread_settings(threads, args.inter_op_threads)
    warnings = runtime.apply_environment(settings)
    itex_installed = importlib.util.find_spec(ITEX_MODULE) is not None
    if args.itex == "off" and itex_installed:
        warnings.append("--itex off, but TensorFlow loads an installed ITEX plugin by itself; "
                        "for a plain-TensorFlow run use an environment without intel-extension-for-tensorflow")
    train_paths, val_paths, temp_dir = _data_files(args, layout)
    # Checked before TensorFlow starts, so a bad file stops the job in seconds.
    from gan3d.data import ShowerStream, describe_held_out, open_split

    train_files, val_files, held_out = open_split(train_paths, val_paths, args.test_fraction, args.seed,
                                                  args.skip_bad_events)
    _say(layout, f"gan3d train: {describe_held_out(held_out)}")
    skipped = {"train": train_files.skipped_events, "validation": val_files.skipped_events}
    if any(skipped.values()):
        _say(layout, f"gan3d train: --skip-bad-events left out {skipped['train']} training and "
                     f"{skipped['validation']} validation event(s) with NaN/Inf cells or bad energies")
    stream = ShowerStream(train_files, batch_size=args.batch_size, rank=layout.rank, size=layout.size,
                          seed=args.seed, xscale=args.xscale, shuffle=True)
    val_stream = ShowerStream(val_files, batch_size=args.batch_size, rank=layout.rank, size=layout.size,
                              seed=args.seed, xscale=args.xscale, shuffle=False)
    if args.checkpoint_dir and layout.rank == 0:
        EpochCheckpoints(args.checkpoint_dir, args.keep_checkpoints).prepare()
    steps = min(stream.batches_per_epoch, args.steps_per_epoch or stream.batches_per_epoch)
    val_steps = min(val_stream.batches_per_epoch, args.validation_steps or val_stream.batches_per_epoch)

    import tensorflow as tf

    warnings += runtime.configure_tensorflow(settings)
    if args.itex == "on":
        importlib.import_module(ITEX_MODULE)  # registers its CPU kernels with TensorFlow
    import horovod.tensorflow as hvd

    hvd.init()
    if (hvd.rank(), hvd.size()) != (layout.rank, layout.size):
        raise SettingsError(f"Horovod sees rank {hvd.rank()} of {hvd.size()} but MPI rank {layout.rank} of "
                            f"{layout.size}: horovod and mpi4py are built against different MPIs; "
                            "fix: rebuild both against the MPI the launcher belongs to")
    tf.keras.utils.set_random_seed(args.seed)  # same initial weights everywhere (rank 0's are broadcast)
    if args.deterministic:
        tf.config.experimental.enable_op_determinism()
    in_force = runtime.settings_in_force()
    _say(layout, f"gan3d train: {layout.size} rank(s) on {layout.nodes} node(s), {layout.ranks_per_node} per node; "
                 f"intra-op {in_force['intra_op_threads']}, inter-op {in_force['inter_op_threads']} threads "
                 f"per rank; " + " ".join(f"{k}={v}" for k, v in in_force["env"].items()))
    for w in warnings:
        _say(layout, f"gan3d train: warning: {w}")

    from gan3d.flops import step_flops
    from gan3d.model import PRESETS, discriminator, generator
    from gan3d.step import StepConfig, TrainStep

    # The peak to divide by is the one of the arithmetic the CPU runs: bf16 on a bf16 unit; emulated
    # bf16 runs on the fp32 units (results still say "bf16-emulated" under "precision").
    precision = "bf16" if args.precision == "bf16" else "fp32"
    peak_measured: dict[str, float] = {}
    if args.measure_peak:
        from gan3d.peak import measure_peak_flops

        for p in dict.fromkeys((precision, "fp64")):  # all ranks at once: what this layout reaches
            mine = measure_peak_flops(threads, args.measure_peak, precision=p)
            peak_measured[p] = float(sum(hvd.allgather_object(mine)))

    compute = model_precision(args.precision)
    gen, disc = generator(args.preset, compute), discriminator(args.preset, compute)
    if args.precision != "fp32":
        _say(layout, f"gan3d train: precision {args.precision} (bfloat16 compute, float32 weights); "
                     f"CPU bf16 unit: {bf16_unit or 'none, emulated'}")
    loss_weights = _loss_weights(args.loss_weights)
    config = StepConfig(loss_weights=loss_weights, flip_prob=args.flip_prob,
                        learning_rate=args.lr * layout.size, optimizer=args.optimizer, xscale=args.xscale,
                        latent_dim=PRESETS[args.preset].latent_dim, seed=args.seed,
                        allreduce_dtype=args.allreduce_dtype)
    step = TrainStep(gen, disc, config=config, hvd=hvd)
    state = tf.train.Checkpoint(generator=gen, discriminator=disc, **step.variables_to_checkpoint())
    initial_digest = _weights_digest((gen, disc))

    checkpoints = EpochCheckpoints(args.checkpoint_dir, args.keep_checkpoints) if args.checkpoint_dir else None
    start_epoch = 0
    if args.resume and layout.rank == 0:
        latest = checkpoints.latest()
        if latest is None:
            raise CheckpointError(f"--resume: no complete checkpoint in {checkpoints.directory}; "
                                  "fix: train without --resume first, or point --checkpoint-dir at the run")
        meta = checkpoints.restore(state, latest, {"preset": args.preset})
        start_epoch = int(meta["epoch"])
    start_epoch = int(hvd.broadcast_object(start_epoch, root_rank=0))
    # Rank 0's state (fresh or resumed) everywhere: models, optimizer slots and counters.
    # (The RNGs are reseeded per rank and epoch: TrainStep.reseed.)
    hvd.broadcast_variables(gen.variables + disc.variables + step.d_optimizer.variables
                            + step.g_optimizer.variables, root_rank=0)
    step.set_learning_rate(config.learning_rate)  # this run's --lr, not the one restored with the optimizer
    if start_epoch:
        _say(layout, f"gan3d train: resumed from {checkpoints.latest()} after epoch {start_epoch}")
    if start_epoch >= args.epochs:
        _say(layout, f"gan3d train: already trained {start_epoch} epoch(s) of --epochs {args.epochs}; nothing to do")

    base_lr = config.learning_rate
    warmup_steps = int(round(args.warmup_epochs * steps))
    lr_at = (lambda global_step: warmup_lr(args.lr, base_lr, global_step, warmup_steps)) if warmup_steps else None
    history, epoch_times, val_times, ckpt_times = [], [], [], []
    wall_times, available = [], []  # the paper's epoch clock; the node's MemAvailable at epoch ends
    step_sums = []  # each epoch's steps alone, to set beside its wall clock
    times = StepTimes()
    from gan3d import results as res

    try:
        for epoch in range(start_epoch, args.epochs):
            step.reseed(layout.rank, epoch)
            t0, in_steps = time.perf_counter(), times.every_step
            sums, done, lr_first = _train_epoch(step, stream, epoch, steps, lr_at, times, args)
            epoch_times.append(time.perf_counter() - t0)
            step_sums.append(times.every_step - in_steps)
            if done != steps:
                raise SettingsError(f"rank {layout.rank} got {done} batches in epoch {epoch + 1}, expected {steps}")
            train_losses = _mean_losses(sums, done, hvd)
            _average_statistics((gen, disc), hvd)
            wall_times.append(time.perf_counter() - t0)  # t0: the epoch's start, as above
            available.append(res.memory_available_bytes())

            t0 = time.perf_counter()
            val_losses = _mean_losses(*_validation_sums(step, val_stream, val_steps, layout.rank), hvd)
            val_times.append(time.perf_counter() - t0)
            check_losses({**train_losses, **{f"validation {k}": v for k, v in val_losses.items()}},
                         epoch + 1, None, step.learning_rate, args)
            check_weights((gen, disc), epoch + 1, args)  # identical on all ranks: all stop together

            t0 = time.perf_counter()
            if checkpoints and layout.rank == 0:
                checkpoints.save(state, gen, epoch + 1, {"preset": args.preset, "seed": args.seed,
                                                         "ranks": layout.size, "batch_size": args.batch_size,
                                                         "steps_per_epoch": steps, "precision": args.precision})
            ckpt_times.append(time.perf_counter() - t0)
            history.append({"epoch": epoch + 1, "train": train_losses, "validation": val_losses,
                            "learning_rate": {"first_step": lr_first, "last_step": step.learning_rate}})
            _say(layout, f"gan3d train: epoch {epoch + 1}/{args.epochs}: {epoch_times[-1]:.2f} s, {steps} steps, "
                         f"d_loss {train_losses.get('d_loss', float('nan')):.4f} g_loss "
                         f"{train_losses.get('g_loss', float('nan')):.4f}, validation d_loss "
                         f"{val_losses.get('d_loss', float('nan')):.4f}")
    except LossDiverged as exc:
        if layout.rank == 0 and args.results:
            _write_failure(args, layout, exc, history, checkpoints)
        raise

    digest = _weights_digest((gen, disc))
    per_rank = hvd.allgather_object({"rank": layout.rank, "hostname": layout.hostname,
                                     "peak_rss_bytes": res.peak_rss_bytes(), "weights_sha256": digest,
                                     "available": min(filter(None, available), default=None)})
    if layout.rank == 0 and args.results:
        last_checkpoint = checkpoints.latest() if checkpoints else None
        flops = step_flops(args.preset, args.batch_size)
        from gan3d.cpu import describe
        from gan3d.peak import site_peaks

        perf = res.throughput({k: float(v) for k, v in flops.items()},
                              args.batch_size, layout.size, times.steps, times.seconds)
        perf |= res.peak_fields(perf["flop_per_second"], precision, layout.nodes,
                                site_peaks(site) if site else None, peak_measured,
                                f"sum over {layout.size} rank(s) x {threads} thread(s) of a tf.linalg.matmul "
                                f"loop run by all at once ({args.measure_peak or 0:g} s each)")
        rss = [r["peak_rss_bytes"] for r in per_rank]
        usable = site.node.usable_memory_gb * 1e9 / layout.ranks_per_node if site else None
        record = {
            "status": "ok",
            "site": site.name if site else None,
            "image_digest": res.image_digest(), "container": res.container_runtime(),
            "job": {"slurm_job_id": os.environ.get("SLURM_JOB_ID"), "run_id": os.environ.get("KIT_RUN_ID")},
            "software": res.software_versions(itex_loaded=itex_installed),
            "cpu": describe(),  # what ran: model, bf16 unit, ISA flags (the machines change between days)
            "mpi_library_version": layout.mpi_library_version,
            "mpi_library_version_full": layout.mpi_library_version_full,
            "nodes": layout.nodes, "ranks": layout.size, "ranks_per_node": layout.ranks_per_node,
            "threads_per_rank": in_force["intra_op_threads"], "inter_op_threads": in_force["inter_op_threads"],
            "thread_env": in_force["env"], "oversubscribed": layout.ranks_per_node * threads > cores,
            "cores_per_node": cores, "itex": {"requested": args.itex == "on", "installed": itex_installed}, "deterministic": args.deterministic,
            "preset": args.preset, "seed": args.seed, "optimizer": args.optimizer,
            # the FLOP per step are the same in every precision; the peak to divide by is not
            "precision": args.precision, "bf16_unit": bf16_unit, "allreduce_dtype": args.allreduce_dtype,
            "learning_rate": {"per_rank": args.lr, "scaled": base_lr, "warmup_epochs": args.warmup_epochs},
            "loss_weights": list(loss_weights), "xscale": args.xscale,
            "data_files": {"train": len(train_files.paths), "validation": len(val_files.paths)},
            "held_out": held_out,
            "skip_bad_events": args.skip_bad_events, "bad_events_skipped": skipped,
            "train_events": train_files.num_events, "validation_events": val_files.num_events,
            "batch_per_rank": args.batch_size, "global_batch": args.batch_size * layout.size,
            "epochs": args.epochs, "start_epoch": start_epoch, "steps_per_epoch": steps,
            "full_epoch_steps": stream.batches_per_epoch, "validation_steps": val_steps,
            "validation_times": val_times, "checkpoint_times": ckpt_times, "first_step_seconds": times.first,
            **res.epochs(epoch_times, wall_times, times.steps, times.seconds, stream.batches_per_epoch,
                         step_sums),
            **perf,
            "losses": history,
            **res.memory(rss, [r["available"] for r in per_rank], usable),
            "weights_sha256_initial": initial_digest,
            "weights_sha256_per_rank": [r["weights_sha256"] for r in per_rank],
            "hostnames": sorted({r["hostname"] for r in per_rank}),
            "hostname_per_rank": [r["hostname"] for r in per_rank],  # rank order: which node ran which rank
            "checkpoint": str(last_checkpoint) if last_checkpoint else None,
            "wall_seconds": time.time() - t_start,
        }
        path = res.write_results(args.results, record)
        _say(layout, f"gan3d train: {perf['showers_per_second']:.2f} showers/s, "
                     f"{perf['flop_per_second'] / 1e9:.2f} GFLOP/s; results in {path}")
        if usable and max(rss) > usable:
            _say(layout, f"gan3d train: warning: peak memory {max(rss) / 1e9:.2f} GB per rank exceeds the "
                         f"{usable / 1e9:.2f} GB a rank may use on a {site.name} node")
    train_files.close()
    val_files.close()
    if temp_dir and layout.rank == 0:
        remove_tree(temp_dir)
    hvd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
