"""How long `gan3d train` takes before it trains: the process's wall time, its first step (which
traces the step's graph) and its form probe, for a tiny run of 2 epochs x 3 steps.

    .venv/bin/python bench/gan3d_startup.py --repeat 5
    .venv/bin/python bench/gan3d_startup.py --repeat 5 --against HEAD~1

Layouts: 1 rank x 2 threads and 2 ranks x 1 thread (MPICH's mpiexec), the fixed forms (`--forms
fft`); then 1 x 2 with `--forms probe` (a fresh cache), for the probe's own seconds. Start-up is
what a sweep of short runs (`kit scale tune`, a study's evaluations, the test suite) pays again
for every run. With `--against REV`, that revision's code (a temporary git worktree, removed at the
end) runs the same runs in the same rounds, interleaved with this checkout's, and the table gives
the ratios of the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gan3d import cpu  # noqa: E402 (the checkout's, whatever is installed)

MPIEXEC = shutil.which("mpiexec.hydra") or shutil.which("mpiexec.mpich")
LAYOUTS = (("1x2 fft", 1, 2, "fft"), ("2x1 fft", 2, 1, "fft"), ("1x2 probe", 1, 2, "probe"))


def _run(tree: Path, data: Path, work: Path, layout: tuple[str, int, int, str]) -> dict:
    """One tiny training of `tree`'s code: its process wall time and what its results say."""
    _, ranks, threads, forms = layout
    results = work / "r.json"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    files = sorted(str(p) for p in data.glob("*.h5"))
    cmd = [sys.executable, "-m", "gan3d", "train", "--preset", "tiny", "--batch-size", "4"]
    cmd += ["--data", ",".join(files[:2]), "--validation-data", files[2], "--seed", "3"]
    cmd += ["--epochs", "2", "--steps-per-epoch", "3", "--validation-steps", "2"]
    cmd += [
        "--threads",
        str(threads),
        "--forms",
        forms,
        "--results",
        str(results),
        "--deterministic",
    ]
    if ranks > 1:
        cmd = [MPIEXEC, "-n", str(ranks), *cmd]
    env = dict(
        os.environ,
        PYTHONPATH=str(tree),
        TF_CPP_MIN_LOG_LEVEL="2",
        XDG_CACHE_HOME=str(work / "cache"),  # a probe every time: no cached forms
    )
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    if done.returncode:
        sys.exit(f"{tree}: gan3d train failed ({done.returncode}): {done.stderr.strip()[-800:]}")
    r = json.loads(results.read_text())
    probe = (r.get("layer_forms") or {}).get("probe") or {}
    return {
        "process": wall,
        "first_step": r["first_step_seconds"],
        "probe": probe.get("seconds"),
        "weights": r["weights_sha256_per_rank"][0],
    }


def _cell(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}]"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=3, help="rounds (each runs every layout)")
    ap.add_argument("--against", metavar="REV", help="a git revision to compare with")
    args = ap.parse_args(argv)
    if args.repeat < 1:
        ap.error("--repeat: give at least 1")
    if MPIEXEC is None:
        sys.exit("MPICH's mpiexec is not on PATH (apt-get install mpich)")
    print(f"CPU: {cpu.describe()}; load {os.getloadavg()[0]:.1f} at start")
    with tempfile.TemporaryDirectory(prefix="gan3d-startup-") as tmp:
        tmp_path = Path(tmp)
        trees = {"this checkout": ROOT}
        if args.against:
            other = tmp_path / "against"
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(other), args.against],
                check=True,
                capture_output=True,
            )
            trees[args.against] = other
        try:
            data = tmp_path / "showers"
            subprocess.run(
                [sys.executable, "-m", "gan3d", "simulate", "--out", str(data), "--files", "3"]
                + ["--events-per-file", "64", "--seed", "1"],
                cwd=ROOT,
                check=True,
                capture_output=True,
            )
            runs: dict[tuple[str, str], list[dict]] = {}
            for _ in range(args.repeat):
                for layout in LAYOUTS:
                    for name, tree in trees.items():  # interleaved: the same load for both
                        runs.setdefault((layout[0], name), []).append(
                            _run(tree, data, tmp_path / "work", layout)
                        )
        finally:
            if args.against:
                subprocess.run(
                    ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(other)],
                    check=False,
                    capture_output=True,
                )
    load = os.getloadavg()[0]
    print(f"\n{args.repeat} rounds, median [min-max] seconds; load {load:.1f} at the end\n")
    print("| layout, forms | code | process wall | first step (traces) | form probe |")
    print("|---|---|---|---|---|")
    for (layout, name), rs in runs.items():
        probes = [r["probe"] for r in rs if r["probe"] is not None]
        print(
            f"| {layout} | {name} | {_cell([r['process'] for r in rs])} "
            f"| {_cell([r['first_step'] for r in rs])} | {_cell(probes) if probes else '–'} |"
        )
    if args.against:
        print("\n| layout, forms | process wall, this / against | first step | final weights |")
        print("|---|---|---|---|")
        for layout, *_ in LAYOUTS:
            mine, theirs = runs[(layout, "this checkout")], runs[(layout, args.against)]
            same = {r["weights"] for r in mine} == {r["weights"] for r in theirs}
            # a probe's forms follow its timings, and other forms round differently
            weights = "–" if "probe" in layout else "identical" if same else "differ"
            print(
                f"| {layout} "
                f"| {_ratio(mine, theirs, 'process')} | {_ratio(mine, theirs, 'first_step')} "
                f"| {weights} |"
            )
    return 0


def _ratio(mine: list[dict], theirs: list[dict], key: str) -> str:
    return (
        f"{statistics.median(r[key] for r in mine) / statistics.median(r[key] for r in theirs):.2f}"
    )


if __name__ == "__main__":
    sys.exit(main())
