"""Peak FLOP/s: theoretical (cores x clock x FLOP/cycle) and measured (a dense matmul loop).

The measured peak is what TensorFlow's own dense kernel reaches on this machine, the fair
yardstick for the training step; the theoretical peak is what a site config promises.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

MATRIX = 2048


def theoretical_peak(cores: int, clock_ghz: float, flop_per_cycle: float) -> float:
    """FLOP/s of `cores` cores at `clock_ghz` doing `flop_per_cycle` FLOP per cycle each."""
    if cores < 1 or clock_ghz <= 0 or flop_per_cycle <= 0:
        raise ValueError(f"theoretical_peak: need cores >= 1, clock_ghz > 0, flop_per_cycle > 0; "
                         f"got {cores}, {clock_ghz}, {flop_per_cycle}")
    return cores * clock_ghz * 1e9 * flop_per_cycle


def _set_threads(threads: int | None) -> bool:
    """Apply `threads` to TF's intra-op pool; False if TF already runs with another value."""
    import tensorflow as tf

    if threads is None:
        return True
    try:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        return True
    except RuntimeError:  # the runtime is initialized: it keeps its pool
        return tf.config.threading.get_intra_op_parallelism_threads() == threads


def measure_peak_flops(threads: int | None = None, seconds: float = 1.0, n: int = MATRIX) -> float:
    """Best FLOP/s of an n x n float32 matmul loop in TensorFlow over about `seconds`.

    With `threads` the loop runs on that many intra-op threads; if this process's TF runtime
    already uses another number, the measurement runs in a fresh Python process.
    """
    if not _set_threads(threads):
        return _measure_in_subprocess(threads, seconds, n)
    import tensorflow as tf

    a = tf.random.stateless_normal((n, n), seed=[1, 2])
    b = tf.random.stateless_normal((n, n), seed=[3, 4])
    flop = 2.0 * n ** 3
    matmul = tf.function(lambda x, y: tf.linalg.matmul(x, y))
    matmul(a, b).numpy()  # warm-up: trace, allocate, spin up the thread pool
    best, deadline = 0.0, time.perf_counter() + seconds
    while True:
        count, start = 0, time.perf_counter()
        while count < 3 or time.perf_counter() - start < seconds / 4:
            c = matmul(a, b)
            count += 1
        c.numpy()
        best = max(best, count * flop / (time.perf_counter() - start))
        if time.perf_counter() >= deadline:
            return best


def _measure_in_subprocess(threads: int | None, seconds: float, n: int) -> float:
    cmd = [sys.executable, "-m", "gan3d", "peak", "--seconds", str(seconds), "--matrix", str(n)]
    if threads is not None:
        cmd += ["--threads", str(threads)]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return float(json.loads(out)["measured_flop_per_second"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gan3d peak", description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=None, help="TF intra-op threads (default: TF's choice)")
    ap.add_argument("--seconds", type=float, default=1.0, help="measuring time")
    ap.add_argument("--matrix", type=int, default=MATRIX, help="matrix size n of the n x n matmul")
    ap.add_argument("--cores", type=int, help="for the theoretical peak: cores used")
    ap.add_argument("--clock-ghz", type=float, help="for the theoretical peak: clock under AVX load")
    ap.add_argument("--flop-per-cycle", type=float, help="for the theoretical peak: FP32 FLOP/cycle/core")
    args = ap.parse_args(argv)
    if args.threads is not None and args.threads < 1:
        ap.error(f"--threads {args.threads}: must be at least 1")
    if args.seconds <= 0 or args.matrix < 1:
        ap.error("--seconds and --matrix must be positive")
    given = [args.cores, args.clock_ghz, args.flop_per_cycle]
    if any(v is not None for v in given) and not all(v is not None for v in given):
        ap.error("the theoretical peak needs all of --cores, --clock-ghz and --flop-per-cycle")
    measured = measure_peak_flops(args.threads, args.seconds, args.matrix)
    out = {"measured_flop_per_second": measured, "matrix": args.matrix, "threads": args.threads,
           "kernel": "tf.linalg.matmul float32"}
    if all(v is not None for v in given):
        peak = theoretical_peak(args.cores, args.clock_ghz, args.flop_per_cycle)
        out |= {"theoretical_flop_per_second": peak, "percent_of_theoretical": 100.0 * measured / peak}
    json.dump(out, sys.stdout, indent=2)
    print()
    return 0
