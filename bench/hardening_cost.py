"""What the hardening costs: ``kit image convert`` of one input by two versions of the kit.

Runs the converter of this checkout and of an older commit (checked out into a temporary git
worktree) back to back, alternating, into each output form, and prints the median wall and
CPU seconds of each and their ratio. CPU seconds (user + system of the process tree) are the
figure to read on a shared machine; wall time includes waiting for the disk (a directory
output is synced to disk before it is renamed into place).

    .venv/bin/python bench/hardening_cost.py --base 263a195 [--reps 3] [--forms dir,tar.gz,sqfs]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from image_inputs import debian_image  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SUFFIX = {"dir": "", "tar.gz": ".tar.gz", "sqfs": ".sqfs"}


def cpu_flags() -> str:
    flags = next(
        (
            line.split(":", 1)[1].split()
            for line in open("/proc/cpuinfo")
            if line.startswith("flags")
        ),
        [],
    )
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in open("/proc/cpuinfo")
            if line.startswith("model name")
        ),
        "?",
    )
    keep = [f for f in flags if f.startswith(("avx512", "amx")) or f in ("avx2", "fma")]
    return f"{model}; {os.cpu_count()} CPUs; {' '.join(keep)}"


def convert(tree: Path, src: Path, out: Path) -> tuple[float, float]:
    """(wall s, CPU s of the child tree) of one conversion by the kit in ``tree``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "kit", "image", "convert", str(src), str(out)],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
        check=True,
        stdout=subprocess.DEVNULL,
    )
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", required=True, help="the older commit to compare with")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--forms", default="dir,tar.gz,sqfs")
    args = ap.parse_args()
    src = debian_image()
    print(f"machine: {cpu_flags()}\ninput: {src.name} ({src.stat().st_size / 1e6:.0f} MB)\n")
    with tempfile.TemporaryDirectory(
        prefix="kit-bench-", dir=REPO / "build" if (REPO / "build").is_dir() else None
    ) as tmp:
        base = Path(tmp) / "base"
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(base), args.base],
            check=True,
        )
        try:
            print("| output | version | wall s (median) | CPU s (median) |\n|---|---|---|---|")
            for form in args.forms.split(","):
                runs: dict[str, list[tuple[float, float]]] = {"base": [], "this": []}
                for rep in range(args.reps):
                    for name, tree in (
                        (("base", base), ("this", REPO))
                        if rep % 2 == 0
                        else (("this", REPO), ("base", base))
                    ):
                        out = Path(tmp) / f"out-{name}{SUFFIX[form]}"
                        runs[name].append(convert(tree, src, out))
                        for path in Path(tmp).glob(f"out-{name}*"):
                            shutil.rmtree(path) if path.is_dir() else path.unlink()
                med = {
                    k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v))
                    for k, v in runs.items()
                }
                for name, label in (("base", args.base), ("this", "this checkout")):
                    print(f"| {form} | {label} | {med[name][0]:.1f} | {med[name][1]:.1f} |")
                print(
                    f"| {form} | ratio this/base | {med['this'][0] / med['base'][0]:.2f}x | "
                    f"{med['this'][1] / med['base'][1]:.2f}x |"
                )
        finally:
            subprocess.run(
                ["git", "-C", str(REPO), "worktree", "remove", "--force", str(base)], check=False
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
