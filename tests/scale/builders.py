"""Results files for the report's tests, written by gan3d.results (the library gan3d train writes
them with), from controlled times: a 4..768-node sweep, or a container/bare pair, cannot run here.
Only the figures are chosen; every key, clock and memory field comes from the writer."""

from __future__ import annotations

from pathlib import Path

from gan3d import results as res
from gan3d.peak import site_peaks
from kit.scale.paper import PAPER_EPOCH_EVENTS, TABLES
from kit.site import load_site

GiB = 2**30


def write_run(
    path: Path,
    nodes: int,
    wall: float,
    *,
    ranks_per_node: int = 4,
    threads: int = 12,
    batch: int = 8,
    site: str | None = "supermuc-ng",
    mpi: str = "Intel(R) MPI Library 2019",
    preset: str = "full",
    events: int = PAPER_EPOCH_EVENTS,
    container: str | None = None,
    digest: str | None = None,
    precision: str | None = None,
    steps: int | None = None,
    full_steps: int | None = None,
    step_share: float = 0.9,
    rss: int = 3 * GiB,
    available: int = 60 * GiB,
    env: dict | None = None,
    **extra,
) -> Path:
    """One ok run whose epochs after the first took `wall` s (the first 1.3x: tracing), whose steps
    explain `step_share` of it, and whose ranks peaked at `rss` with `available` left on the node;
    `env` is rank 0's environment as far as the fabric and Horovod settings go (default: none set)."""
    ranks = nodes * ranks_per_node
    full_steps = full_steps or max(1, events // (batch * ranks))
    steps = steps or full_steps
    pflops = dict(zip(TABLES["table7"].nodes, TABLES["table7"].pflop_per_second)).get(
        nodes, 0.0027 * nodes
    )
    step_seconds = wall * step_share / steps  # one timed step
    timed = 2 * steps - 1
    flop_per_rank_step = {"total": pflops * 1e15 * step_seconds / ranks}
    # The peaks as gan3d train computes them from the shipped site config (no peak measured).
    node_peaks = site_peaks(load_site(site)) if site == "supermuc-ng" else None
    record = {
        "status": "ok",
        "site": site,
        "image_digest": digest,
        "container": container,
        "mpi_library_version": mpi,
        "nodes": nodes,
        "ranks": ranks,
        "ranks_per_node": ranks_per_node,
        "threads_per_rank": threads,
        "preset": preset,
        "train_events": events,
        "precision": precision or "fp32",
        "batch_per_rank": batch,
        "global_batch": batch * ranks,
        "epochs": 2,
        "steps_per_epoch": steps,
        "full_epoch_steps": full_steps,
        **res.epochs(
            [wall * 1.3 * 0.95, wall * 0.95],
            [wall * 1.3, wall],
            timed_steps=timed,
            timed_seconds=timed * step_seconds,
            full_epoch_steps=full_steps,
            step_seconds=[wall * 1.3 * step_share, wall * step_share],
        ),
        **res.throughput(
            flop_per_rank_step,
            batch_per_rank=batch,
            ranks=ranks,
            steps=timed,
            seconds=timed * step_seconds,
        ),
        **res.peak_fields(
            pflops * 1e15,
            precision or "fp32",
            nodes,
            node_peaks=node_peaks,
            measured={},
            measured_basis="",
        ),
        **res.memory([rss] * ranks, [available] * ranks, None),
        **res.communication(env or {}),
        **extra,
    }
    return res.write_results(path, record)
