"""Physics check: do generated showers look like data showers, energy bin by energy bin?

Images are (N,25,25,25[,1]) with axes (x, y, z); z, the LAST axis, is the depth (the
reference's longitudinal axis), x and y are transverse. Features per shower:
  * longitudinal profile (energy per z layer) and transverse x and y profiles;
  * cell sum / Ep (Ep in units of 100 GeV, so about 2 x xscale for the CLIC data);
  * first moment (energy-weighted mean cell index) and second moment (energy-weighted rms
    width, in cells) along x, y and z.

Score of one energy bin (lower is better, 0 for identical samples):
  shape part    = sum over z, x, y of  sum_i |r_i - f_i|, with r, f the mean profiles of real
                  and generated showers each normalized to unit sum (each term in [0, 2]);
  energy part   = D(cell sum / Ep);
  moment part   = mean over the six moments of D(moment);
  bin score     = shape part + energy part + moment part,
with D(q) = (|mean_f - mean_r| + |std_f - std_r|) / std_r  (std_r floored at 1e-3 |mean_r|
and, for moments, 0.01 cells): location and spread errors in units of the data's own
event-by-event spread. A moment undefined because (nearly) all showers of one kind are
empty counts `UNDEFINED_TERM` = 10. The energy response gets a part of its own because it
is what a calorimeter simulation is for.
The raw score is the mean of the bin scores over bins holding at least `MIN_EVENTS` showers
of both kinds. Its size depends on the data set (it falls as 1/sqrt(showers) for alike samples,
and an empty generator's depends on the calorimeter's resolution), so `gan3d validate` puts it on
a fixed scale with two references it computes itself, on the same bins: the data showers are
split into two random halves (seeded), a reference and a held-out half; the generator makes
showers at the held-out half's energies; and against the reference are scored
  raw        the generated showers,
  raw_data   the held-out data showers (what a perfect generator would score),
  raw_empty  all-zero showers at the same energies (an empty generator);
  score      = (raw_empty - raw) / (raw_empty - raw_data),
so held-out data = 1, empty showers = 0, farther from the data than empty showers < 0 (not
clamped). With fewer showers than it takes to tell data from nothing (raw_data more than half
of raw_empty) the score is null with the reason. Measured with bench/gan3d_score_scale.py
(2,000 simulated showers, halves of 1,000): raw_data 0.46, raw_empty 29.4; an independent
simulation scores 0.997, showers moved by one cell in x 0.966, two layers deeper 0.962,
energy scaled by 1.05 0.975, by 1.2 0.891, by 0.5 0.724 (docs/physics.md).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import struct
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from gan3d.files import NotRegularFile, open_regular, read_regular
from gan3d.results import TAGGED
from kit.atomic import atomic_write_bytes, write_together
from kit.errors import KitError
from kit.excerpt import one_line
from kit.schema import check_value

DEFAULT_BINS: tuple[tuple[float, float], ...] = ((10, 100), (100, 200), (200, 300), (300, 500))
PROFILES = ("z", "x", "y")
MOMENTS = ("m1_x", "m1_y", "m1_z", "m2_x", "m2_y", "m2_z")
MIN_EVENTS = 2
UNDEFINED_TERM = 10.0  # a moment that cannot be computed (e.g. a generator of empty showers)
_IDX = np.arange(25, dtype=np.float64)
MAX_RESULTS_BYTES = 64 * 2**20
# the halves' random stream, apart from the generator's latent noise (same --seed)
HALVES_STREAM = 4099
# held-out data must score at most half the empty showers' raw score to set a scale
MIN_SCALE_GAP = 0.5
PRINTED = (
    "score",
    "score_null_reason",
    "score_meaning",
    "score_raw",
    "score_reference_data",
    "score_reference_empty",
    "reference_events",
    "compared_events",
    "bins",
    "plots",
    "definition",
)
# each PNG's Software text: how a rerun knows the plots it may replace
PLOT_SOFTWARE = "python -m gan3d validate"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
MAX_PNG_HEAD = 64 * 1024  # read of a PNG: matplotlib writes its text chunks right after the header
RESULTS_FIX = (
    "point --results at the results JSON gan3d train wrote (its --results), or leave --results out"
)
SCORE_MEANING = (
    "1 = as close to the data as held-out data showers, 0 = as far as empty showers, "
    "below 0 = farther; (raw_empty - raw) / (raw_empty - raw_data) of the raw scores"
)


def shower_features(images: np.ndarray, ep: np.ndarray) -> dict[str, np.ndarray]:
    """Per-shower features (see the module docstring); `ep` is the primary energy in 100 GeV."""
    x = np.asarray(images)
    if x.ndim == 5:
        x = x[..., 0]
    if x.ndim != 4 or x.shape[1:] != (25, 25, 25):
        raise ValueError(
            f"shower_features: images of shape {np.shape(images)}, expected (N,25,25,25[,1])"
        )
    ep = np.asarray(ep, dtype=np.float64).reshape(-1)
    prof = {
        "z": x.sum(axis=(1, 2), dtype=np.float64),
        "x": x.sum(axis=(2, 3), dtype=np.float64),
        "y": x.sum(axis=(1, 3), dtype=np.float64),
    }
    total = prof["z"].sum(axis=1)
    safe = np.where(total > 0, total, np.nan)
    feats = {"energy_gev": ep * 100.0, "cellsum": total, "cellsum_over_ep": total / ep}
    for axis in PROFILES:
        p = prof[axis]
        m1 = (p * _IDX).sum(axis=1) / safe
        feats[f"profile_{axis}"] = p
        feats[f"m1_{axis}"] = m1
        feats[f"m2_{axis}"] = np.sqrt(
            np.maximum((p * (_IDX - m1[:, None]) ** 2).sum(axis=1) / safe, 0.0)
        )
    return feats


def concat_features(parts: Sequence[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Join the features of several chunks (so callers never hold all images at once)."""
    return {key: np.concatenate([p[key] for p in parts]) for key in parts[0]}


def _select(feats: dict[str, np.ndarray], lo: float, hi: float) -> dict[str, np.ndarray]:
    e = feats["energy_gev"]
    mask = (e >= lo) & (e < hi)
    return {k: v[mask] for k, v in feats.items()}


def _mean_profile(p: np.ndarray) -> np.ndarray:
    m = p.mean(axis=0)
    return m / m.sum() if m.sum() > 0 else m


def _scalar_term(r: np.ndarray, f: np.ndarray, floor: float) -> dict:
    r, f = r[np.isfinite(r)], f[np.isfinite(f)]  # moments of empty showers are undefined
    if len(r) < MIN_EVENTS or len(f) < MIN_EVENTS:
        return {"real_events": int(len(r)), "fake_events": int(len(f)), "term": UNDEFINED_TERM}
    mr, mf, sr, sf = r.mean(), f.mean(), r.std(), f.std()
    scale = max(sr, 1e-3 * abs(mr), floor)
    return {
        "real_mean": float(mr),
        "fake_mean": float(mf),
        "real_std": float(sr),
        "fake_std": float(sf),
        "term": float((abs(mf - mr) + abs(sf - sr)) / scale),
    }


def score_features(
    real: dict[str, np.ndarray],
    fake: dict[str, np.ndarray],
    bins: Sequence[tuple[float, float]] = DEFAULT_BINS,
) -> dict:
    """The per-bin and overall score of already computed features (see the module docstring)."""
    out_bins, scores = [], []
    for lo, hi in bins:
        r, f = _select(real, lo, hi), _select(fake, lo, hi)
        entry: dict = {
            "range_gev": [lo, hi],
            "real_events": int(len(r["cellsum"])),
            "fake_events": int(len(f["cellsum"])),
            "score_raw": None,
        }
        if entry["real_events"] >= MIN_EVENTS and entry["fake_events"] >= MIN_EVENTS:
            l1 = {
                a: float(
                    np.abs(
                        _mean_profile(r[f"profile_{a}"]) - _mean_profile(f[f"profile_{a}"])
                    ).sum()
                )
                for a in PROFILES
            }
            energy = _scalar_term(r["cellsum_over_ep"], f["cellsum_over_ep"], 0.0)
            moments = {m: _scalar_term(r[m], f[m], 0.01) for m in MOMENTS}
            entry.update(
                {
                    "profile_l1": l1,
                    "cellsum_over_ep": energy,
                    "moments": moments,
                    "shape_part": sum(l1.values()),
                    "energy_part": energy["term"],
                    "moment_part": float(np.mean([v["term"] for v in moments.values()])),
                }
            )
            entry["score_raw"] = entry["shape_part"] + entry["energy_part"] + entry["moment_part"]
            scores.append(entry["score_raw"])
        out_bins.append(entry)
    return {
        "score_raw": float(np.mean(scores)) if scores else None,
        "bins": out_bins,
        "definition": "raw score: mean over energy bins of [sum_{z,x,y} L1(normalized mean profiles) "
        "+ D(cellsum/Ep) + mean_{m1_xyz, m2_xyz} D(moment)], D = (|dmean|+|dstd|)/std_data; lower is better",
    }


def empty_features(ep: np.ndarray, chunk: int = 100) -> dict[str, np.ndarray]:
    """Features of all-zero showers at energies `ep` (100 GeV): the empty generator's, the scale's
    0.
    """
    ep = np.asarray(ep, dtype=np.float64).reshape(-1)
    zeros = np.zeros((min(chunk, len(ep)), 25, 25, 25), np.float32)
    return concat_features(
        [
            shower_features(zeros[: len(ep[s : s + chunk])], ep[s : s + chunk])
            for s in range(0, max(len(ep), 1), chunk)
        ]
    )


def reference_halves(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices of two random halves of n data showers (seeded): the reference and the held-out one.
    Random, not first and second, so that files ordered by energy still give alike halves."""
    order = np.random.default_rng([seed, HALVES_STREAM]).permutation(n)
    return np.sort(order[: n // 2]), np.sort(order[n // 2 :])


def take(feats: dict[str, np.ndarray], index: np.ndarray) -> dict[str, np.ndarray]:
    """The features of the showers `index` (features are computed once, split afterwards)."""
    return {k: v[index] for k, v in feats.items()}


def normalise(
    raw: float | None, data: float | None, empty: float | None
) -> tuple[float | None, str | None]:
    """(empty - raw) / (empty - data), or None and why: the scale needs data well apart from
    nothing.
    """
    if raw is None or data is None or empty is None:
        return None, (
            f"no energy bin holds {MIN_EVENTS} showers of the data, "
            "of the held-out data and of the generator; fix: compare more --events"
        )
    if empty - data <= MIN_SCALE_GAP * empty:
        return None, (
            f"held-out data scores {data:.3g} against data, not well below the {empty:.3g} of empty showers: "
            "too few showers per energy bin to set the scale; fix: compare more --events"
        )
    return (empty - raw) / (empty - data), None


def scaled_score(
    reference: dict[str, np.ndarray],
    held_out: dict[str, np.ndarray],
    fake: dict[str, np.ndarray],
    *,
    bins: Sequence[tuple[float, float]] = DEFAULT_BINS,
) -> dict:
    """The score on the fixed scale: generated showers `fake` (made at the energies of `held_out`),
    the held-out data showers and empty showers, each scored against the `reference` data showers
    with the same bins; raw terms kept per bin. See the module docstring."""
    model = score_features(reference, fake, bins)
    data = score_features(reference, held_out, bins)
    empty = score_features(reference, empty_features(held_out["energy_gev"] / 100.0), bins)
    score, reason = normalise(model["score_raw"], data["score_raw"], empty["score_raw"])
    for entry, d, e in zip(model["bins"], data["bins"], empty["bins"]):
        entry.update(
            {
                "score_reference_data": d["score_raw"],
                "score_reference_empty": e["score_raw"],
                "score": normalise(entry["score_raw"], d["score_raw"], e["score_raw"])[0],
            }
        )
    return {
        "score": score,
        "score_null_reason": reason,
        "score_meaning": SCORE_MEANING,
        "score_raw": model["score_raw"],
        "score_reference_data": data["score_raw"],
        "score_reference_empty": empty["score_raw"],
        "bins": model["bins"],
        "definition": model["definition"],
        "reference_events": int(len(reference["cellsum"])),
        "compared_events": int(len(held_out["cellsum"])),
    }


def _save_png(fig, path: Path, staged: dict[Path, bytes] | None) -> Path:
    """Marked as validate's own (its Software text), so that a later run replaces it; written
    atomically now, or kept in `staged` for the caller to write with the rest (write_together)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, metadata={"Software": PLOT_SOFTWARE})
    if staged is None:
        atomic_write_bytes(path, buf.getvalue())
    else:
        staged[path] = buf.getvalue()
    return path


def _bin_plot_name(lo: float, hi: float) -> str:
    return f"physics_{lo:g}-{hi:g}GeV.png"


def plot_names(bins: Sequence[tuple[float, float]] = DEFAULT_BINS) -> list[str]:
    """Every file name validate may write in --out with these bins."""
    return [_bin_plot_name(lo, hi) for lo, hi in bins] + [
        "physics_cellsum_vs_energy.png",
        "physics_score.png",
    ]


def png_software(path: Path) -> str | None:
    """The Software text of the PNG at PATH, from the chunks before its image data (None: no PNG or
    no such text). A link, a directory or a FIFO is an OSError: never followed, read or blocked
    on."""
    with os.fdopen(open_regular(path, follow_symlinks=False), "rb") as fh:
        head = fh.read(MAX_PNG_HEAD)
    if not head.startswith(PNG_SIGNATURE):
        return None
    pos = len(PNG_SIGNATURE)
    while pos + 8 <= len(head):
        length, kind = struct.unpack(">I4s", head[pos : pos + 8])
        body = head[pos + 8 : pos + 8 + length]
        if kind == b"IDAT" or len(body) < length:
            return None
        key, _, text = body.partition(b"\0")
        if kind == b"tEXt" and key == b"Software":
            return text.decode("latin-1")
        pos += 12 + length
    return None


def check_out(out: Path, bins: Sequence[tuple[float, float]] = DEFAULT_BINS) -> None:
    """Refuse, before anything is written, a file at one of validate's plot names in OUT that
    validate did not write (a user's plot, a link, another program's PNG): the kit never replaces
    what it did not make."""
    for name in plot_names(bins):
        path = out / name
        if not os.path.lexists(path):
            continue
        try:
            ours = png_software(path) == PLOT_SOFTWARE
        except OSError:  # a link, a directory, a FIFO, unreadable: not validate's plot
            ours = False
        if not ours:
            raise KitError(
                f"{path}: already there and not a plot gan3d validate wrote, so it is not replaced",
                fix="give --out a new or empty directory (or move the file away)",
            )


def plot_features(
    real: dict[str, np.ndarray],
    fake: dict[str, np.ndarray],
    out_dir: str | Path,
    *,
    bins: Sequence[tuple[float, float]] = DEFAULT_BINS,
    fake_label: str = "generated",
    staged: dict[Path, bytes] | None = None,
) -> list[Path]:
    """One PNG per energy bin (profiles, cell sum/Ep, moments) plus a summary PNG; atomic writes
    (or into `staged`, as _save_png)."""
    from matplotlib.figure import Figure

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for lo, hi in bins:
        r, f = _select(real, lo, hi), _select(fake, lo, hi)
        if len(r["cellsum"]) < MIN_EVENTS or len(f["cellsum"]) < MIN_EVENTS:
            continue
        fig = Figure(figsize=(16, 7.5))
        fig.subplots_adjust(left=0.05, right=0.99, bottom=0.08, top=0.93, wspace=0.3, hspace=0.3)
        axes = fig.subplots(2, 4).ravel()
        fig.suptitle(
            f"{lo:g}-{hi:g} GeV: data ({len(r['cellsum'])}) vs {fake_label} ({len(f['cellsum'])})"
        )
        for ax, axis in zip(axes[:3], PROFILES):
            for feats, label, style in ((r, "data", "k-"), (f, fake_label, "r--")):
                ax.plot(_IDX, feats[f"profile_{axis}"].mean(axis=0), style, label=label)
            ax.set_yscale("log")
            ax.set_xlabel(f"{axis} cell" + (" (depth)" if axis == "z" else ""))
            ax.set_ylabel("mean energy per cell slice")
            ax.legend()
        for ax, key in zip(axes[3:], ("cellsum_over_ep", "m1_z", "m2_z", "m1_x", "m2_x")):
            # empty showers have no moments
            rv, fv = (
                r[key][np.isfinite(r[key])],
                f[key][np.isfinite(f[key])],
            )
            both = np.concatenate([rv, fv])
            n_bins = int(np.clip(np.sqrt(len(both)), 10, 40))
            if len(both):
                edges = np.linspace(
                    np.percentile(both, 0.5), np.percentile(both, 99.5) + 1e-9, n_bins + 1
                )
                for values, label, color, line in (
                    (rv, "data", "k", "-"),
                    (fv, fake_label, "r", "--"),
                ):
                    if len(values):
                        ax.hist(
                            values,
                            edges,
                            histtype="step",
                            color=color,
                            linestyle=line,
                            density=True,
                            label=label,
                        )
            ax.set_xlabel(
                key.replace("_over_", " / ")
                .replace("m1_", "first moment ")
                .replace("m2_", "second moment ")
            )
            ax.legend()
        written.append(_save_png(fig, out / _bin_plot_name(lo, hi), staged))
    fig = Figure(figsize=(7, 4.5))
    fig.subplots_adjust(left=0.12, right=0.97, bottom=0.12, top=0.95)
    ax = fig.subplots()
    for feats, label, style in ((real, "data", "ko"), (fake, fake_label, "r^")):
        ax.plot(feats["energy_gev"], feats["cellsum_over_ep"], style, ms=2, alpha=0.4, label=label)
    ax.set_xlabel("primary energy (GeV)")
    ax.set_ylabel("cell sum / Ep (Ep in 100 GeV)")
    ax.legend()
    written.append(_save_png(fig, out / "physics_cellsum_vs_energy.png", staged))
    return written


def plot_score(physics: dict, out_dir: str | Path, staged: dict[Path, bytes] | None = None) -> Path:
    """physics_score.png: each energy bin's score and the overall one on the 0 (empty showers) to 1
    (held-out data) scale, so which energies a generator gets wrong is seen at a glance."""
    from matplotlib.figure import Figure

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    entries = [
        (f"{b['range_gev'][0]:g}-{b['range_gev'][1]:g} GeV", b["score"]) for b in physics["bins"]
    ]
    entries.append(("all bins", physics["score"]))
    fig = Figure(figsize=(7, 4.5))
    fig.subplots_adjust(left=0.1, right=0.97, bottom=0.2, top=0.9)
    ax = fig.subplots()
    for x, (label, value) in enumerate(entries):
        if value is None:
            ax.text(x, 0.05, "no scale", ha="center", va="bottom", color="gray")
        else:
            ax.bar(x, value, color="k" if label == "all bins" else "tab:blue")
            ax.text(x, value, f"{value:.3g}", ha="center", va="bottom" if value >= 0 else "top")
    ax.axhline(1.0, color="g", linestyle="--", label="held-out data (1)")
    ax.axhline(0.0, color="r", linestyle="--", label="empty showers (0)")
    ax.set_xticks(range(len(entries)), [label for label, _ in entries])
    ax.set_ylabel("physics score")
    ax.set_title(
        f"generated vs data showers ({physics['compared_events']} compared, "
        f"{physics['reference_events']} reference)"
    )
    ax.set_ylim(top=max(1.15, ax.get_ylim()[1]))
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2, frameon=False)
    return _save_png(fig, out / "physics_score.png", staged)


def read_results(path: str | Path) -> dict:
    """The record gan3d train wrote at PATH (a schema gan3d reads), else a KitError: validate adds
    its physics to a training's results only, never to another JSON file or a new one (a link is
    refused, not followed)."""
    try:
        # NaN and Infinity are no JSON gan3d train writes, and
        # the record is written back without them
        record = json.loads(
            read_regular(path, MAX_RESULTS_BYTES, follow_symlinks=False),
            parse_constant=_no_constant,
        )
    except FileNotFoundError:
        raise KitError("no such results file", fix=RESULTS_FIX, where=str(path)) from None
    except NotRegularFile as exc:
        raise KitError(
            f"is {exc.kind}, not a regular file", fix=RESULTS_FIX, where=str(path)
        ) from None
    except (ValueError, RecursionError) as exc:
        raise KitError(
            f"not valid JSON ({one_line(exc)})", fix=RESULTS_FIX, where=str(path)
        ) from None
    check_value(record, path, TAGGED, what="results file of gan3d train", fix=RESULTS_FIX)
    return record


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a number JSON holds")


def _with_physics(path: str | Path, physics: dict) -> str:
    """The results at PATH with its "physics" key added or replaced (read_results' checks first)."""
    record = read_results(path)
    record["physics"] = physics
    return json.dumps(record, indent=2, allow_nan=False) + "\n"


def _data_features(files, n: int, xscale: float, chunk: int = 500) -> dict[str, np.ndarray]:
    from gan3d.data import preprocess

    parts, left = [], n
    for k, count in enumerate(files.counts):
        for start in range(0, min(count, left), chunk):
            stop = min(start + chunk, count, start + left)
            images, ep, _ = preprocess(
                files.read(k, start, stop), files.energies[k][start:stop], xscale
            )
            parts.append(shower_features(images, ep))
        left -= min(count, left)
        if left <= 0:
            break
    return concat_features(parts)


def _generated_features(generator, latent_dim: int, ep: np.ndarray, seed: int, batch: int = 100):
    import tensorflow as tf

    from gan3d.model import sample_latent

    rng = tf.random.Generator.from_seed(seed)
    parts = []
    for start in range(0, len(ep), batch):
        e = ep[start : start + batch].astype(np.float32)
        z = sample_latent(len(e), e.reshape(-1, 1), latent_dim, rng_or_seed=rng)
        images = generator(z, training=False).numpy()
        if not np.isfinite(images).all():  # a score of NaN would look like a number in the results
            raise ValueError(
                "the generator produces NaN or Inf showers (its weights hold NaN or Inf); "
                "fix: validate a checkpoint from before the training diverged"
            )
        parts.append(shower_features(images, e))
    return concat_features(parts)


def _weights_path(args) -> tuple[Path, dict]:
    """(generator weights file, the checkpoint's meta.json, {} for a bare weights file)."""
    if args.generator_weights:
        return Path(args.generator_weights), {}
    from gan3d.checkpoint import GENERATOR_WEIGHTS, EpochCheckpoints

    latest = EpochCheckpoints(args.checkpoint).latest()
    if latest is None:
        raise ValueError(
            f"checkpoint directory {args.checkpoint} holds no complete epoch checkpoint; "
            "fix: train first (python -m gan3d train --checkpoint-dir DIR) or pass --generator-weights"
        )
    meta = EpochCheckpoints.read_meta(latest)
    EpochCheckpoints.check_files(latest)
    return latest / GENERATOR_WEIGHTS, meta


def _check_weights_file(weights: Path) -> None:
    """A regular file (h5py would block on a FIFO), or a one-line ValueError."""
    fix = "fix: pass the trainer's CHECKPOINT_DIR/epoch-N/generator.weights.h5 or --checkpoint CHECKPOINT_DIR"
    try:
        os.close(open_regular(weights))
    except FileNotFoundError:
        raise ValueError(f"generator weights {weights} do not exist; {fix}") from None
    except NotRegularFile as exc:
        raise ValueError(
            f"generator weights {weights} is {exc.kind}, not a regular file; {fix}"
        ) from None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m gan3d validate", description=__doc__.split("\n")[0]
    )
    ap.add_argument(
        "--data", required=True, help="data showers: directory, glob or comma-separated files"
    )
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument(
        "--generator-weights",
        help="generator weights file (CHECKPOINT_DIR/epoch-N/generator.weights.h5)",
    )
    src.add_argument("--checkpoint", help="checkpoint directory: use its latest complete epoch")
    ap.add_argument(
        "--preset",
        choices=["full", "tiny"],
        default=None,
        help="model preset (default: the checkpoint's, else full)",
    )
    ap.add_argument(
        "--precision",
        choices=["fp32", "bf16"],
        default=None,
        help="precision the generator computes in (default: the checkpoint's, else fp32; "
        "the weights are float32 either way)",
    )
    ap.add_argument(
        "--out",
        required=True,
        help="directory for the PNG plots (plots already there are replaced "
        "only if gan3d validate wrote them)",
    )
    ap.add_argument(
        "--results", help="gan3d train's results JSON, to which a 'physics' key is added"
    )
    ap.add_argument(
        "--events",
        type=int,
        default=2000,
        help="data showers used (the first N): a random half is the reference, "
        "the generator makes showers at the other half's energies, and that half sets the score's scale",
    )
    ap.add_argument("--xscale", type=float, default=1.0, help="image scale used in training")
    ap.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the generator's latent noise and of the data's split into halves",
    )
    ap.add_argument(
        "--skip-bad-events",
        action="store_true",
        help="leave out data events with NaN/Inf cells or bad energies (counted in the results)",
    )
    args = ap.parse_args(argv)

    from gan3d.data import DataError, ShowerFiles, expand_data_arg

    try:
        # what would be refused at the end is refused now, before any work
        check_out(Path(args.out))
        if args.results:
            read_results(args.results)
        weights, meta = _weights_path(args)
        preset = args.preset or meta.get("preset") or "full"
        precision = args.precision or (
            "fp32" if meta.get("precision", "fp32") == "fp32" else "bf16"
        )
        _check_weights_file(weights)
        with ShowerFiles(expand_data_arg(args.data), skip_bad_events=args.skip_bad_events) as files:
            real = _data_features(files, args.events, args.xscale)
            skipped = files.skipped_events
        from gan3d.model import PRESETS, generator_for_weights

        try:
            model = generator_for_weights(str(weights), preset, precision)
            model.load_weights(str(weights))
        except (ValueError, OSError) as exc:
            raise ValueError(
                f"generator weights {weights} do not fit preset {preset!r} ({one_line(exc)}); "
                "fix: pass the --preset the generator was trained with"
            ) from None
        first, second = reference_halves(len(real["cellsum"]), args.seed)
        reference, held_out = take(real, first), take(real, second)
        fake = _generated_features(
            model, PRESETS[preset].latent_dim, held_out["energy_gev"] / 100.0, args.seed
        )
        physics = scaled_score(reference, held_out, fake)
        # The plots and the results' physics go in together: a stop leaves all old or all new.
        staged: dict[Path, bytes] = {}
        plots = plot_features(reference, fake, args.out, staged=staged) + [
            plot_score(physics, args.out, staged)
        ]
        physics.update(
            {
                "plots": [str(p) for p in plots],
                "events": int(len(real["cellsum"])),
                "generator_weights": str(weights),
                "preset": preset,
                "precision": precision,
                "xscale": args.xscale,
                "skip_bad_events": args.skip_bad_events,
                "bad_events_skipped": skipped,
            }
        )
        if args.results:
            staged[Path(args.results)] = _with_physics(args.results, physics).encode()
        write_together(staged)
    except (DataError, ValueError, OSError, KitError) as exc:
        # one line, escaped: the message may quote a checkpoint's or a data file's values
        print(f"gan3d validate: error: {one_line(exc, 2000)}", file=sys.stderr)
        return 1
    print(json.dumps({k: physics[k] for k in PRINTED}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
