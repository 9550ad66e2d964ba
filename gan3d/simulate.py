"""Synthetic electron showers in the CLIC ECAL layout, so every feature works without the real data.

The real CLIC files cannot be downloaded at a secure site; this module writes files with the
same layout (`ECAL` (N,25,25,25) float32 cell energies in GeV, `target` (N,2) with the particle
id 11 in column 0 and the primary energy in GeV in column 1, plus `energy` (N,)) from a
documented parametrization in the spirit of GFLASH (Grindhammer & Peters, hep-ex/0001020),
with the coefficients of Geant4's GFlash homogeneous-medium tuning (GVFlashHomoShowerTuning).

Geometry (axis order of the array = x, y, z; z, the LAST axis, is the depth):
  * 25 x 25 cells transversely, 5.1 mm each; tungsten absorber, Moliere radius 9.3 mm, so
    R_M = 1.83 cells (`MOLIERE_CELLS`).
  * 25 sampling layers along z, each 0.65 radiation lengths deep (`X0_PER_LAYER`), 16 X0 in all.
  * critical energy of tungsten Ec = 7.97 MeV (`CRITICAL_GEV`).

Per event (all vectorized over events and energy deposits; no Python loop over events):
  * Longitudinal: dE/dt = E b (b t)^(a-1) e^(-b t) / Gamma(a), t in X0. The shower maximum
    T = (a-1)/b has the mean ln(E/Ec) - 0.5 (electron, PDG; Geant4's tuning uses -0.812);
    a has the GFlash mean 0.81 + (0.458 + 2.26/Z) ln(E/Ec). (ln T, ln a) are drawn as
    correlated Gaussians with the GFlash widths sigma(ln T) = 1/(-1.4 + 1.26 ln y),
    sigma(ln a) = 1/(-0.58 + 0.86 ln y) and correlation 0.705 - 0.023 ln y (y = E/Ec), then
    b = (a-1)/T: showers fluctuate in depth and length event by event.
  * Transverse: the GFLASH radial form f(r) = p f(r; R_C) + (1-p) f(r; R_T) with
    f(r; R) = 2 r R^2 / (r^2 + R^2)^2 (r in Moliere radii); the core radius R_C, tail radius R_T
    and core weight p depend on the relative depth tau = t/T with the GFlash coefficients
    for tungsten (Z = 74), so showers widen with depth; about 90% of the energy lies within
    one Moliere radius.
  * Shower axis: enters at the centre of the 25 x 25 face plus a uniform jitter of +-1 cell
    in x and y (`AXIS_JITTER_CELLS`).
  * Visible energy: E x sampling fraction s, s = 2.34% x (1 + N(0, 0.10/sqrt(E/GeV) (+) 0.01)),
    i.e. a stochastic resolution of 10%/sqrt(E) with a 1% constant term. Energy leaking out
    of the back (beyond 16 X0) or the sides is lost, so cell sum / E falls from 0.022 at
    10 GeV to 0.018 at 500 GeV (about E/50 on average). The depth per layer and s were chosen
    so that cell sum / Ep follows the reference's fitted curve (`gan3d.model.CELLSUM_FIT`,
    the trainer's cell-sum target for generated showers) within about 2% over 10-500 GeV.
  * Cell-level fluctuations: the visible energy is carried by discrete energy spots (their
    number Poisson with mean 100 + 2 E/GeV; each spot's weight Gamma(2)-distributed), each
    placed at a depth t drawn from the event's Gamma profile and a radius drawn from the
    radial form: cells receive a Poisson number of spots with random energies, as in GFLASH.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from pathlib import Path

import numpy as np

from gan3d.showerfile import MAX_EVENTS_PER_FILE
from kit.atomic import rename_noreplace
from kit.crash import environment_problem
from kit.readfile import open_regular_fd

GRID = 25  # cells per axis
X0_PER_LAYER = 0.65  # radiation lengths per layer along z (see the module docstring)
MOLIERE_CELLS = 9.3 / 5.1  # Moliere radius of tungsten in cell widths
CRITICAL_GEV = 7.97e-3  # critical energy of tungsten
Z_ABSORBER = 74.0
SAMPLING_FRACTION = 0.0234
STOCHASTIC_TERM = 0.10  # sigma(s)/s = 10% / sqrt(E/GeV) (+) 1%
CONSTANT_TERM = 0.01
AXIS_JITTER_CELLS = 1.0
SPOTS_BASE, SPOTS_PER_GEV = 100.0, 2.0
SPOT_WEIGHT_SHAPE = 2.0
PARTICLE_ID = 11  # electron
# 20x the reference scans' 500 GeV; spots per event grow with E (memory, time)
MAX_ENERGY_GEV = 10_000.0
MAX_FILES = 100_000
# marks the files it wrote
GENERATOR = "gan3d.simulate (GFLASH-style parametrization, see module docstring)"
CHUNK_EVENTS = 64  # events simulated at once: temporaries stay cache-sized (faster than 256 here)


def _longitudinal(energy: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Per-event Gamma shape a and shower maximum T (in X0), with GFLASH correlated fluctuations."""
    ln_y = np.log(energy / CRITICAL_GEV)
    mean_ln_t = np.log(ln_y - 0.5)
    mean_ln_a = np.log(0.81 + (0.458 + 2.26 / Z_ABSORBER) * ln_y)
    sig_t = 1.0 / (-1.4 + 1.26 * ln_y)
    sig_a = 1.0 / (-0.58 + 0.86 * ln_y)
    rho = 0.705 - 0.023 * ln_y
    g1, g2 = rng.standard_normal((2, energy.size))
    ln_t = mean_ln_t + sig_t * g1
    ln_a = mean_ln_a + sig_a * (rho * g1 + np.sqrt(1.0 - rho**2) * g2)
    return np.exp(ln_a), np.exp(ln_t)


def _radial_params(tau: np.ndarray, ln_e: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """GFLASH core radius, tail radius (Moliere radii) and core probability at relative depth
    tau.
    """
    z = Z_ABSORBER
    r_core = (0.0251 + 0.00319 * ln_e) + (0.1162 - 0.000381 * z) * tau
    k4 = 0.3585 + 0.0412 * ln_e
    r_tail = (0.659 - 0.00309 * z) * (np.exp(-2.59 * (tau - 0.645)) + np.exp(k4 * (tau - 0.645)))
    p1, p2, p3 = 2.632 - 0.00094 * z, 0.401 + 0.00187 * z, 1.313 - 0.0686 * ln_e
    arg = (p2 - tau) / p3
    p_core = np.clip(p1 * np.exp(arg - np.exp(arg)), 0.0, 1.0)
    return r_core, r_tail, p_core


def _simulate_chunk(energy: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    n = energy.size
    a, t_max = _longitudinal(energy, rng)
    b = (a - 1.0) / t_max
    resolution = np.hypot(STOCHASTIC_TERM / np.sqrt(energy), CONSTANT_TERM)
    visible = (
        energy * SAMPLING_FRACTION * np.clip(1.0 + resolution * rng.standard_normal(n), 0.05, None)
    )
    centre = GRID / 2.0 + rng.uniform(-AXIS_JITTER_CELLS, AXIS_JITTER_CELLS, (2, n))

    spots = rng.poisson(SPOTS_BASE + SPOTS_PER_GEV * energy)
    event = np.repeat(np.arange(n), spots)
    depth = rng.gamma(a[event], 1.0 / b[event])  # in X0
    weight = rng.gamma(SPOT_WEIGHT_SHAPE, 1.0, event.size)
    weight *= (visible / np.maximum(np.bincount(event, weight, minlength=n), 1e-30))[event]

    r_core, r_tail, p_core = _radial_params(depth / t_max[event], np.log(energy)[event])
    radius = np.where(rng.random(event.size) < p_core, r_core, r_tail)
    u = rng.random(event.size)
    r = radius * np.sqrt(u / (1.0 - u)) * MOLIERE_CELLS  # inverse CDF of 2rR^2/(r^2+R^2)^2
    # float32 trig is SIMD, ~10x faster
    phi = rng.random(event.size, dtype=np.float32) * np.float32(2.0 * np.pi)
    x = np.floor(centre[0][event] + r * np.cos(phi))
    y = np.floor(centre[1][event] + r * np.sin(phi))
    layer = np.floor(depth / X0_PER_LAYER)
    inside = (x >= 0) & (x < GRID) & (y >= 0) & (y < GRID) & (layer < GRID)
    flat = (((event * GRID + x) * GRID + y) * GRID + layer)[inside].astype(np.int64)
    cells = np.bincount(flat, weight[inside], minlength=n * GRID**3)
    return cells.reshape(n, GRID, GRID, GRID).astype(np.float32)


def simulate_showers(
    n: int,
    rng: np.random.Generator,
    energies: np.ndarray | None = None,
    *,
    emin: float = 10.0,
    emax: float = 500.0,
) -> tuple[np.ndarray, np.ndarray]:
    """n electron showers: (ECAL cells in GeV, float32 (n,25,25,25) [x,y,z]; primary energy in GeV).

    Energies default to U(emin, emax) GeV, as in the reference's energy scan files.
    """
    if energies is None:
        energies = rng.uniform(emin, emax, n)
    energies = np.asarray(energies, dtype=np.float64).reshape(-1)
    if energies.size != n:
        raise ValueError(f"simulate_showers: {energies.size} energies given for n={n} showers")
    if n and energies.min() <= 0.1:
        raise ValueError(
            "simulate_showers: energies must be above 0.1 GeV (the parametrization's range)"
        )
    ecal = np.empty((n, GRID, GRID, GRID), dtype=np.float32)
    for start in range(0, n, CHUNK_EVENTS):
        stop = min(start + CHUNK_EVENTS, n)
        ecal[start:stop] = _simulate_chunk(energies[start:stop], rng)
    return ecal, energies


def file_name(index: int) -> str:
    """`EleEscan_<i>_<j>.h5` like the reference scans: ten files j=0..9 per group i=1,2,..."""
    return f"EleEscan_{index // 10 + 1}_{index % 10}.h5"


def _write_file(
    path: Path,
    energy_gev: np.ndarray,
    rng: np.random.Generator,
    compression: str | None,
    progress,
    replace: bool,
) -> None:
    """Simulate and write one file chunk by chunk (bounded memory), atomically: a hidden temp
    sibling is filled, fsynced and renamed into place, so readers never see a partial file."""
    import h5py

    n = len(energy_gev)
    opts: dict[str, object] = {"compression": compression, "shuffle": compression is not None}
    if compression == "gzip":
        opts["compression_opts"] = 1
    target = np.stack(
        [np.full(n, PARTICLE_ID, dtype=np.float32), energy_gev.astype(np.float32)], axis=1
    )
    tmp = path.with_name(f".{path.name}.{os.getpid()}.part")
    try:
        with h5py.File(tmp, "w") as h5:
            ecal = h5.create_dataset(
                "ECAL",
                (n, GRID, GRID, GRID),
                dtype=np.float32,
                chunks=(min(n, 64), GRID, GRID, GRID),
                **opts,
            )
            for start in range(0, n, CHUNK_EVENTS):
                stop = min(start + CHUNK_EVENTS, n)
                ecal[start:stop] = _simulate_chunk(energy_gev[start:stop], rng)
                if progress is not None:
                    progress(stop - start)
            h5.create_dataset("target", data=target)
            h5.create_dataset("energy", data=energy_gev.astype(np.float32))
            h5.attrs["generator"] = GENERATOR
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        if replace:
            os.replace(tmp, path)
        else:
            _rename_new(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _ours(path: Path) -> bool:
    """Whether PATH is a file this module wrote (True: it may be replaced) or absent (False).
    Anything else there (a real CLIC file has these very names) is a ValueError: never replaced.
    The file is opened only if regular (a FIFO would block) and its root's `generator` read."""
    import h5py

    if not os.path.lexists(path):
        return False
    refusal = (
        f"{path}: already there and not written by gan3d simulate (no generator attribute "
        f"{GENERATOR.split(' (')[0]!r}); it is never replaced; fix: simulate into a new or empty directory"
    )
    try:
        fd = open_regular_fd(path, follow_symlinks=False)
    except OSError:  # a symlink, a directory, a FIFO, unreadable
        raise ValueError(refusal) from None
    try:
        with h5py.File(f"/proc/self/fd/{fd}", "r") as h5:
            generator = h5.attrs.get("generator")
    except (OSError, ValueError, RuntimeError, KeyError, TypeError):  # not HDF5, damaged
        generator = None
    finally:
        os.close(fd)
    if isinstance(generator, bytes):
        generator = generator.decode("utf-8", "replace")
    if generator != GENERATOR:
        raise ValueError(refusal)
    return True


def _rename_new(tmp: Path, path: Path) -> None:
    """TMP to PATH only if nothing appeared at PATH meanwhile (renameat2 NOREPLACE)."""
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        rename_noreplace(dir_fd, tmp.name, path.name)
    except FileExistsError:
        raise ValueError(
            f"{path}: appeared while gan3d simulate wrote it; it is never replaced; fix: "
            "give a new or empty directory"
        ) from None
    finally:
        os.close(dir_fd)


def write_files(
    out_dir: str | Path,
    files: int,
    events_per_file: int,
    *,
    seed: int,
    emin: float = 10.0,
    emax: float = 500.0,
    compression: str | None = "gzip",
    progress=None,
) -> list[Path]:
    """Write `files` files of `events_per_file` showers; file k is seeded by (seed, k), so each is
    reproducible on its own. `progress(done_events)` is called after every chunk when given."""
    if not (1 <= files <= MAX_FILES and 1 <= events_per_file <= MAX_EVENTS_PER_FILE):
        raise ValueError(
            f"--files {files}, --events-per-file {events_per_file}: give 1..{MAX_FILES} files of "
            f"1..{MAX_EVENTS_PER_FILE} events (what gan3d train reads in one file); fix: change them"
        )
    if not 0.1 < emin <= emax <= MAX_ENERGY_GEV:
        raise ValueError(
            f"--emin {emin:g}, --emax {emax:g}: the energy range must satisfy 0.1 < emin <= emax <= "
            f"{MAX_ENERGY_GEV:g} GeV (the parametrization's range); fix: change them"
        )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / file_name(k) for k in range(files)]
    ours = [_ours(path) for path in paths]  # every name checked before the first is written
    for k, path in enumerate(paths):
        rng = np.random.default_rng([seed, k])
        energies = rng.uniform(emin, emax, events_per_file)
        _write_file(path, energies, rng, compression, progress, ours[k])
    return paths


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m gan3d simulate", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--out", required=True, help="output directory (created if missing)")
    ap.add_argument("--files", type=int, default=2)
    ap.add_argument("--events-per-file", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--emin", type=float, default=10.0, help="lowest primary energy, GeV")
    ap.add_argument("--emax", type=float, default=500.0, help="highest primary energy, GeV")
    ap.add_argument(
        "--compression",
        choices=["gzip", "lzf", "none"],
        default="gzip",
        help="HDF5 filter for ECAL (gzip level 1 is readable by every HDF5 tool)",
    )
    args = ap.parse_args(argv)
    comp = None if args.compression == "none" else args.compression
    total = args.files * args.events_per_file
    write = functools.partial(
        write_files,
        args.out,
        args.files,
        args.events_per_file,
        seed=args.seed,
        emin=args.emin,
        emax=args.emax,
        compression=comp,
    )
    try:
        if sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import Progress

            with Progress(console=Console(stderr=True)) as bar:
                task = bar.add_task(f"simulating {total} showers", total=total)
                paths = write(progress=lambda k: bar.advance(task, k))
        else:
            paths = write()
    except ValueError as exc:  # bad arguments
        print(f"gan3d simulate: error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # an unwritable --out: the path and the fix when the machine refused it
        print(f"gan3d simulate: error: {environment_problem(exc) or exc}", file=sys.stderr)
        return 1
    print(f"wrote {len(paths)} files, {total} showers, into {Path(args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
