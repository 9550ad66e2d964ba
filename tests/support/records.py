"""A results record as `gan3d train` writes it (peaks by gan3d.results.peak_fields), without a
training: for tests of what prints or reads records."""

from __future__ import annotations

from gan3d.peak import site_peaks
from gan3d.results import peak_fields
from kit.site import load_site

RATE = 50e9  # the run's model FLOP/s
MEASURED = {"fp32": 200e9, "bf16": 400e9, "fp64": 100e9}


def record(
    site: str, precision: str, node_peaks: dict | None = None, rate: float = RATE, **extra
) -> dict:
    peaks = node_peaks if node_peaks is not None else site_peaks(load_site(site))
    compute = "bf16" if precision == "bf16" else "fp32"  # as gan3d.train divides
    return {
        "site": site,
        "precision": precision,
        "ranks": 2,
        "threads_per_rank": 1,
        "preset": "tiny",
        "epoch_times": [3.0, 2.0],
        "steps_per_epoch": 3,
        "first_step_seconds": 4.0,
        "showers_per_second": 10.0,
        "flop_per_shower": 5e9,
        "flop_per_second": rate,
        "peak_rss_bytes_per_rank": [2**30, 2**31],
        "losses": [],
        **peak_fields(
            rate,
            compute,
            1,
            node_peaks=peaks,
            measured={p: MEASURED[p] for p in (compute, "fp64")},
            measured_basis="matmul loop",
        ),
        **extra,
    }
