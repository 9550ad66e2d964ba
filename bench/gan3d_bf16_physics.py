"""Physics equivalence of bf16 training on the FULL preset (the test does the tiny one).

    .venv/bin/python bench/gan3d_bf16_physics.py [--steps 40] [--minutes M] [--batch-size 16]
        [--showers 640] [--generated 512] [--bf16 fixed,fft] [--fp32-seeds 3] [--bf16-seeds 2]
        [--json FILE]
    .venv/bin/python bench/gan3d_bf16_physics.py --preset tiny --steps 16 --batch-size 4 --showers 64
        --generated 128

Trains fp32 once per seed (--fp32-seeds of them) and bf16 from the first --bf16-seeds of those
seeds, once per --bf16 forms (bfloat16 convolutions, the float32 frequency domain), from the same
simulated showers for the same steps (gan3d.equivalence), then prints, per statistic and seed, the
fp32 seed spread (the farthest other fp32 run) and each bf16 run's distance to the fp32 run of its
seed as a markdown table; `--json FILE` keeps every run's statistics. A bf16 run is equivalent
where it is not farther; one that is just another sample misses a statistic with probability
1/(fp32 seeds).
Cost on 2 cores: (fp32 seeds + bf16 seeds x forms) x steps full-size steps (~1 s each when idle)
plus the traces. `--minutes M` fits a loaded machine: the first run stops after its share of M (M
over the number of runs) or --steps, and the others take as many steps as it did; the table says
how many.
"""

from __future__ import annotations

import argparse
import json
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
        help="time budget: the first run gets its share, the others its steps",
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
    ap.add_argument(
        "--fp32-seeds", type=int, default=2, help="fp32 runs, the yardstick (at least 2)"
    )
    ap.add_argument("--bf16-seeds", type=int, default=1, help="bf16 runs per set of forms")
    ap.add_argument("--json", type=Path, help="write every run's statistics and verdicts here")
    args = ap.parse_args(argv)
    if args.fp32_seeds < 2:
        ap.error(f"--fp32-seeds {args.fp32_seeds}: the yardstick needs at least 2 fp32 runs")
    if not 1 <= args.bf16_seeds <= args.fp32_seeds:
        ap.error(f"--bf16-seeds {args.bf16_seeds}: choose 1 to --fp32-seeds ({args.fp32_seeds})")
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
    share = args.fp32_seeds + args.bf16_seeds * len(names)
    seconds = None if args.minutes is None else 60.0 * args.minutes / share
    out = equivalence.compare(
        args.preset,
        preprocess(raw, energy, 1.0),
        steps=args.steps,
        batch=args.batch_size,
        generated=args.generated,
        seconds=seconds,
        bf16=names,
        seeds=[3 + i for i in range(args.fp32_seeds)],
        bf16_seeds=args.bf16_seeds,
    )
    runs = out["bf16"]
    spread = out["fp32_seed_spread"]
    print(
        f"\n{args.preset} preset, {out['steps']} steps × batch {args.batch_size}, "
        f"{args.generated} generated showers; per seed: the fp32 seed spread (farthest other fp32 run), "
        "then each bf16 run's distance to the fp32 run of its seed\n"
    )
    bf16_seeds = sorted(next(iter(runs.values()))["per_seed"])  # the same seeds in every set
    print(
        "| statistic | seed | fp32 seed spread | "
        + " | ".join(f"bf16 ({name}) | within" for name in names)
        + " |"
    )
    print("|---" * (3 + 2 * len(names)) + "|")
    for key in equivalence.STATISTICS:
        for seed in bf16_seeds:
            cells = [
                f"{r['vs_fp32'][key]:.4g} | {'yes' if r['within'][key] else '**no**'}"
                for r in (runs[name]["per_seed"][seed] for name in names)
            ]
            print(f"| {key} | {seed} | {spread[seed][key]:.4g} | " + " | ".join(cells) + " |")
    print("\ncell sum / Ep (mean, std):")
    for seed, stats in out["fp32"].items():
        print(f"  fp32 seed {seed}: " + ", ".join(f"{v:.4g}" for v in stats["cellsum_over_ep"]))
    for name, run in runs.items():
        for seed, r in run["per_seed"].items():
            cellsum = r["statistics"]["cellsum_over_ep"]
            print(f"  bf16 ({name}) seed {seed}: " + ", ".join(f"{v:.4g}" for v in cellsum))
    if args.json:
        tmp = args.json.with_name(f".{args.json.name}.tmp")
        tmp.write_text(json.dumps({"args": vars(args) | {"json": str(args.json)}, **out}))
        tmp.replace(args.json)
    print(f"wall {time.perf_counter() - t0:.0f} s, load {os.getloadavg()[0]:.1f} at the end")
    return 0 if all(all(run["within"].values()) for run in runs.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
