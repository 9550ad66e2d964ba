"""What the physics score's numbers mean: known distortions of simulated showers on its fixed scale.

    .venv/bin/python bench/gan3d_score_scale.py [--files 4] [--events-per-file 500] [--seed 5]

Simulates showers, splits them into two random halves as `gan3d validate` does (reference and
held out), and scores, against the reference, "generators" that return the held-out showers
changed in a known way, and an independent simulation (another seed) at the held-out energies'
distribution. Prints one JSON object: per case the raw score and the score on the 0-1 scale,
plus the two references, so docs/validation.md can quote figures with the command behind them.
"""

from __future__ import annotations

import argparse
import json
import tempfile

import numpy as np

from gan3d.data import ShowerFiles, expand_data_arg
from gan3d.simulate import write_files
from gan3d.validate import reference_halves, scaled_score, shower_features, take


def _features(
    directory: str, files: int, events: int, seed: int
) -> tuple[dict, np.ndarray, np.ndarray]:
    write_files(directory, files, events, seed=seed)
    with ShowerFiles(expand_data_arg(directory)) as data:
        images, ep, _ = data.load()
    return shower_features(images, ep), images, ep


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--events-per-file", type=int, default=500)
    ap.add_argument("--seed", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        real, images, ep = _features(f"{tmp}/data", args.files, args.events_per_file, args.seed)
        other, _, _ = _features(f"{tmp}/other", args.files, args.events_per_file, args.seed + 1000)
    first, second = reference_halves(len(ep), 0)
    reference, held = take(real, first), take(real, second)
    cases = {
        "held-out data itself": held,
        "independent simulation (another seed)": take(other, np.arange(len(second))),
        "moved one cell in x": shower_features(np.roll(images[second], 1, axis=1), ep[second]),
        "two layers deeper": shower_features(np.roll(images[second], 2, axis=3), ep[second]),
        "energy scaled by 1.05": shower_features(images[second] * 1.05, ep[second]),
        "energy scaled by 1.2": shower_features(images[second] * 1.2, ep[second]),
        "energy scaled by 0.5": shower_features(images[second] * 0.5, ep[second]),
        "empty showers": shower_features(np.zeros_like(images[second]), ep[second]),
    }
    out: dict = {
        "events": len(ep),
        "reference_events": len(first),
        "compared_events": len(second),
        "cases": {},
    }
    for name, fake in cases.items():
        result = scaled_score(reference, held, fake)
        out["score_reference_data"] = result["score_reference_data"]
        out["score_reference_empty"] = result["score_reference_empty"]
        out["cases"][name] = {"score": result["score"], "score_raw": result["score_raw"]}
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
