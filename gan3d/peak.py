"""Peak FLOP/s per precision: theoretical (from a site config) and measured (a dense matmul loop).

The measured peak is what TensorFlow's own dense kernel reaches on this machine in that precision,
the fair yardstick for the training step and the only honest one where the clock is unknown (a VM);
the theoretical peak is what a site config promises (cores x clock x FLOP/cycle of the precision).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import time

from kit.boundedrun import run_bounded

MATRIX = 2048
PRECISIONS = ("fp32", "bf16", "fp64")
DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp64": "float64"}
MIN_MATRIX = 128
MAX_MATRIX = 8192  # three 8192² fp64 matrices are 1.5 GiB
MAX_SECONDS = 600.0
SUBPROCESS_GRACE_S = 120  # TensorFlow's import and start-up on a loaded 2-core machine
# CPU flags that decide which precisions have hardware behind them (said with every measurement).
ISA_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16")


def theoretical_peak(cores: int, clock_ghz: float, flop_per_cycle: float) -> float:
    """FLOP/s of `cores` cores at `clock_ghz` doing `flop_per_cycle` FLOP per cycle each."""
    if cores < 1 or clock_ghz <= 0 or flop_per_cycle <= 0:
        raise ValueError(
            f"theoretical_peak: need cores >= 1, clock_ghz > 0, flop_per_cycle > 0; "
            f"got {cores}, {clock_ghz}, {flop_per_cycle}"
        )
    return cores * clock_ghz * 1e9 * flop_per_cycle


def machine() -> dict:
    """What this measurement ran on: the CPU, its bf16 unit, and whether it is a VM (whose clock
    no guest can know)."""
    from gan3d.cpu import bf16_support, cpu_flags, cpu_model

    flags = cpu_flags()
    return {
        "cpu_model": cpu_model(),
        "virtual": "hypervisor" in flags,
        "bf16_unit": bf16_support(flags),
        "isa": [f for f in ISA_FLAGS if f in flags],
        "cpus": os.cpu_count(),
    }


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


@functools.lru_cache(maxsize=1)
def _matmul():
    """One traced matmul per process (a new tf.function per call would retrace every time)."""
    import tensorflow as tf

    return tf.function(lambda x, y: tf.linalg.matmul(x, y))


def measure_peak_flops(
    threads: int | None = None, *, seconds: float = 1.0, n: int = MATRIX, precision: str = "fp32"
) -> float:
    """Best FLOP/s of an n x n matmul loop in `precision` in TensorFlow over about `seconds`.

    A precision the CPU has no fast kernel for (bf16 without AVX512_BF16/AMX, fp64) can take seconds
    per 2048² product; the matrix is halved until one product fits a quarter of `seconds`, so the
    time stays bounded. With `threads` the loop runs on that many intra-op threads; if this
    process's TF runtime already uses another number, it runs in a fresh Python process.
    """
    if precision not in DTYPES:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, not {precision!r}")
    if not _set_threads(threads):
        return _measure_in_subprocess(threads, seconds, n, precision)
    import tensorflow as tf

    matmul = _matmul()
    while True:
        a = tf.cast(tf.random.stateless_normal((n, n), seed=[1, 2]), DTYPES[precision])
        b = tf.cast(tf.random.stateless_normal((n, n), seed=[3, 4]), DTYPES[precision])
        start = time.perf_counter()
        matmul(a, b).numpy()  # warm-up: trace, allocate, spin up the thread pool
        matmul(a, b).numpy()
        if time.perf_counter() - start < seconds / 2 or n <= MIN_MATRIX:
            break
        n //= 2
    flop = 2.0 * n**3
    best, deadline = 0.0, time.perf_counter() + seconds
    while True:
        count, start = 0, time.perf_counter()
        while count < 2 or time.perf_counter() - start < seconds / 4:
            c = matmul(a, b)
            count += 1
        c.numpy()
        best = max(best, count * flop / (time.perf_counter() - start))
        if time.perf_counter() >= deadline:
            return best


def _measure_in_subprocess(threads: int | None, seconds: float, n: int, precision: str) -> float:
    cmd = [
        sys.executable,
        "-m",
        "gan3d",
        "peak",
        "--seconds",
        str(seconds),
        "--matrix",
        str(n),
        "--precision",
        precision,
    ]
    if threads is not None:
        cmd += ["--threads", str(threads)]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    ran = run_bounded(cmd, env=env, timeout=SUBPROCESS_GRACE_S + 4 * seconds)
    if ran.returncode:
        raise subprocess.CalledProcessError(ran.returncode, cmd, ran.out, ran.err)
    return float(json.loads(ran.out)["precisions"][precision]["measured_flop_per_second"])


def site_peaks(site, cores_used: int | None = None) -> dict:
    """Per precision, the site's theoretical peak for the cores used (None with the reason when the
    config does not state it), and the seed paper's FP64-at-max-clock figure."""
    node = site.node
    used = min(cores_used or node.cores, node.cores)
    out = {}
    for precision in PRECISIONS:
        peak = node.theoretical_peak(precision)
        flops = None if peak.flops is None else peak.flops * used / node.cores
        basis = peak.basis if flops is None or used == node.cores else f"{used} of {peak.basis}"
        out[precision] = {"flop_per_second": flops, "basis": basis}
    paper = node.theoretical_peak("fp64", clock="max")
    out["paper_convention"] = {
        "flop_per_second": None if paper.flops is None else paper.flops * used / node.cores,
        "basis": f"FP64 peak at the max clock: {paper.basis}",
    }
    return out


def report(
    precisions: list[str], *, threads: int | None, seconds: float, n: int, site=None
) -> dict:
    """The `gan3d peak` document: what ran where, and per precision measured vs theoretical."""
    theory = site_peaks(site, threads) if site else None
    out: dict = {
        "machine": machine(),
        "site": site.name if site else None,
        "threads": threads,
        "seconds": seconds,
        "precisions": {},
    }
    for precision in precisions:
        measured = measure_peak_flops(threads, seconds=seconds, n=n, precision=precision)
        entry = {
            "measured_flop_per_second": measured,
            "kernel": f"tf.linalg.matmul {DTYPES[precision]}, up to {n}x{n}",
        }
        if theory:
            peak = theory[precision]["flop_per_second"]
            entry |= {
                "theoretical_flop_per_second": peak,
                "theoretical_basis": theory[precision]["basis"],
                "percent_of_theoretical": 100.0 * measured / peak if peak else None,
            }
        out["precisions"][precision] = entry
    if theory:
        out["paper_convention"] = theory["paper_convention"]
    return out


def _precisions(text: str) -> list[str]:
    chosen = [p.strip() for p in text.split(",") if p.strip()]
    bad = [p for p in chosen if p not in PRECISIONS]
    if bad or not chosen:
        raise argparse.ArgumentTypeError(f"{text!r}: give a comma list of {', '.join(PRECISIONS)}")
    return list(dict.fromkeys(chosen))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gan3d peak", description=__doc__.split("\n")[0])
    ap.add_argument(
        "--precision",
        type=_precisions,
        default=list(PRECISIONS),
        help="comma list of fp32, bf16, fp64 (default: all three)",
    )
    ap.add_argument(
        "--site", help="site config name or file: its theoretical peak per precision beside"
    )
    ap.add_argument(
        "--threads", type=int, default=None, help="TF intra-op threads (default: TF's choice)"
    )
    ap.add_argument("--seconds", type=float, default=1.0, help="measuring time per precision")
    ap.add_argument(
        "--matrix", type=int, default=MATRIX, help="largest matrix size n of the n x n matmul"
    )
    args = ap.parse_args(argv)
    if args.threads is not None and args.threads < 1:
        ap.error(f"--threads {args.threads}: must be at least 1")
    # NaN or inf seconds never reached the loop's deadline
    # (a hang); a huge matrix is allocated whole.
    if not (0 < args.seconds <= MAX_SECONDS and 1 <= args.matrix <= MAX_MATRIX):
        ap.error(
            f"--seconds {args.seconds:g}, --matrix {args.matrix}: "
            f"give 0 < seconds <= {MAX_SECONDS:g} and a matrix of 1..{MAX_MATRIX}"
        )
    site = None
    if args.site:
        from kit.errors import KitError
        from kit.site import load_site

        try:
            site = load_site(args.site)
        except KitError as exc:
            print(f"gan3d peak: error: {exc}", file=sys.stderr)
            return 1
    json.dump(
        report(
            args.precision, threads=args.threads, seconds=args.seconds, n=args.matrix, site=site
        ),
        sys.stdout,
        indent=2,
    )
    print()
    return 0
