"""What a finished `kit scale tune` must have written, for the tests that run a real one (the laptop
tutorial's, the Slurm tune's)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from kit.scale import tune

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def check_tune(directory: Path, site: str, layouts: list[tuple[int, int]]) -> dict:
    """tune.yaml has a row per layout with positive figures and recommends the fastest; tune.png is
    drawn.
    """
    doc = yaml.safe_load((directory / tune.TUNE_NAME).read_text())
    rows = doc["layouts"]
    assert [(r["ranks_per_node"], r["threads_per_rank"]) for r in rows] == layouts
    assert all(
        r["problem"] is None
        and r["showers_per_second"] > 0
        and r["peak_rss_bytes_per_rank"] > 50 * 2**20
        for r in rows
    ), rows
    # % of the measured fp32 peak: the runs measured it, and say that is the denominator; a peak measured
    # below the run's own rate (the other test worker's load on the cores) gives no % and its run says
    # why, unless frequency-domain layers made the rate an effective one, which may pass the peak
    for r in rows:
        record = json.loads(Path(r["results"]).read_text())
        if r["percent_of_peak"] is None:
            assert (
                not record["fft_convolutions"]
                and r["percent_of_peak_denominator"] is None
                and "disturbed" in record["peak_fp32_measured_basis"]
            )
        else:
            assert (
                0 < r["percent_of_peak"]
                and (record["fft_convolutions"] or r["percent_of_peak"] <= 100)
                and r["percent_of_peak_denominator"] == "measured fp32 peak"
            )
    fastest = max(rows, key=lambda r: r["showers_per_second"])
    assert (doc["best"]["ranks_per_node"], doc["best"]["threads_per_rank"]) == (
        fastest["ranks_per_node"],
        fastest["threads_per_rank"],
    )
    assert doc["site_name"] == site and doc["nodes"] == 1 and doc["cpu"]
    for row in rows:  # each row is its run's results JSON, not a copy that could drift
        record = json.loads(Path(row["results"]).read_text())
        assert record["showers_per_second"] == row["showers_per_second"]
        # the layer forms each layout's run chose (the suite fixes them: GAN3D_FORMS=fft)
        assert (row["forms"], row["forms_source"]) == (
            record["layer_forms"]["forms"],
            record["layer_forms"]["source"],
        )
        assert (
            row["forms_source"] == "fixed table (--forms fft)" and row["forms"]["d_conv1"] == "fft"
        )
        assert (record["ranks_per_node"], record["threads_per_rank"]) == (
            row["ranks_per_node"],
            row["threads_per_rank"],
        )
    assert (directory / tune.PLOT_NAME).read_bytes()[:8] == PNG_MAGIC
    return doc
