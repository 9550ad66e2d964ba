"""Physics equivalence of bf16 training on the FULL preset (the test does the tiny one).

    .venv/bin/python bench/gan3d_bf16_physics.py [--steps 40] [--minutes M] [--batch-size 16]
        [--showers 640] [--generated 512] [--bf16 fixed,fft]
    .venv/bin/python bench/gan3d_bf16_physics.py --preset tiny --steps 16 --batch-size 4 --showers 64
        --generated 128

Trains fp32 seed A, fp32 seed B and bf16 seed A (once per --bf16 forms: bfloat16 convolutions,
the float32 frequency domain) from the same simulated showers for the same steps
(gan3d.equivalence), then prints, per statistic, the fp32 seed-to-seed distance and each
bf16-to-fp32 distance as a markdown table. bf16 is equivalent where its distance is not larger.
Cost on 2 cores: about 4 x steps full-size steps (~1 s each when idle) plus the traces.
`--minutes M` fits a loaded machine: the first run stops after its share of M (M over the number
of runs) or --steps, and the others take as many steps as it did; the table says how many.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument(
        "--minutes",
        type=float,
        help="time budget: the first run gets a third, the others its steps",
    )
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--showers", type=int, default=640, help="simulated training showers")
    ap.add_argument(
        "--generated", type=int, default=512, help="showers generated per model for the statistics"
    )
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument(
        "--preset",
        choices=["full", "tiny"],
        default="full",
        help="tiny: the test's setting (--steps 16 --batch-size 4 --showers 64 --generated 128)",
    )
    ap.add_argument(
        "--bf16",
        default="fixed,fft",
        help="the bf16 runs, by their forms (gan3d.equivalence.BF16_FORMS), comma-separated",
    )
    args = ap.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import numpy as np
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    from gan3d import cpu, equivalence
    from gan3d.data import preprocess
    from gan3d.simulate import simulate_showers

    print(f"CPU: {cpu.describe()}; load {os.getloadavg()[0]:.1f} at start")
    t0 = time.perf_counter()
    raw, energy = simulate_showers(args.showers, np.random.default_rng(7), emin=50.0, emax=450.0)
    names = args.bf16.split(",")
    if unknown := sorted(set(names) - set(equivalence.BF16_FORMS)):
        ap.error(f"--bf16 {','.join(unknown)}: choose from {','.join(equivalence.BF16_FORMS)}")
    share = 2 + len(names)  # the fp32 pair, then one bf16 run per set of forms
    seconds = None if args.minutes is None else 60.0 * args.minutes / share
    out = equivalence.compare(
        args.preset,
        preprocess(raw, energy, 1.0),
        steps=args.steps,
        batch=args.batch_size,
        generated=args.generated,
        seconds=seconds,
        bf16=names,
    )
    runs = out["bf16"]
    print(
        f"\n| statistic ({args.preset} preset, {out['steps']} steps × batch {args.batch_size}, "
        f"{args.generated} generated showers) | fp32 seed A vs fp32 seed B | "
        + " | ".join(f"bf16 ({name}) seed A vs fp32 seed A, within the spread" for name in runs)
        + " |"
    )
    print("|---" * (2 + len(runs)) + "|")
    for key in equivalence.STATISTICS:
        cells = [
            f"{run['vs_fp32'][key]:.4g}, {'yes' if run['within'][key] else '**no**'}"
            for run in runs.values()
        ]
        print(f"| {key} | {out['fp32_seed_spread'][key]:.4g} | " + " | ".join(cells) + " |")
    c = out["cellsum_over_ep"]
    print(
        f"\ncell sum / Ep (mean, std): fp32 A {c['fp32_a'][0]:.4g}, {c['fp32_a'][1]:.4g}; "
        f"fp32 B {c['fp32_b'][0]:.4g}, {c['fp32_b'][1]:.4g}; "
        + "; ".join(
            f"bf16 ({name}) A {run['cellsum_over_ep'][0]:.4g}, {run['cellsum_over_ep'][1]:.4g}"
            for name, run in runs.items()
        )
    )
    print(f"wall {time.perf_counter() - t0:.0f} s, load {os.getloadavg()[0]:.1f} at the end")
    return 0 if all(all(run["within"].values()) for run in runs.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
