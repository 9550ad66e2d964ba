"""A readable summary of a site: the facts a user checks before a scaling run."""

from __future__ import annotations

from dataclasses import asdict

from rich.console import Console
from rich.table import Table
from rich.text import Text

from kit.excerpt import plain_console, printable_text
from kit.site.model import APPTAINER_RUNTIMES, PRECISIONS, Site


def _flops(value: float | None) -> str:
    if value is None:
        return "unknown"
    for unit, scale in (("PFLOP/s", 1e15), ("TFLOP/s", 1e12), ("GFLOP/s", 1e9)):
        if value >= scale:
            return f"{value / scale:.2f} {unit}"
    return f"{value:.0f} FLOP/s"


def summary_rows(site: Site) -> list[tuple[str, str]]:
    n, s, mpi = site.node, site.scheduler, site.host_mpi
    numa = f"{n.numa_domains}" + (f" ({n.numa_domains_snc} with SNC)" if n.numa_domains_snc else "")
    rows = [
        ("site", f"{site.name}: {site.description}" if site.description else site.name),
        ("config file", str(site.path) if site.path else "-"),
        (
            "scheduler",
            f"{s.type}, partition {s.partition or '-'}, account {s.account or '-'}, "
            f"up to {s.max_nodes} nodes for {s.max_walltime}",
        ),
        (
            "node",
            f"{n.sockets} x {n.cores_per_socket}-core {n.cpu_model} = {n.cores} cores, "
            f"{n.threads_per_core} threads/core, {numa} NUMA domains",
        ),
        ("memory", f"{n.memory_gb:g} GB, {n.usable_memory_gb:g} GB usable"),
        ("clock", f"{_ghz(n.clock_ghz_avx)} under AVX, {_ghz(n.clock_ghz_max)} max"),
    ]
    for precision in PRECISIONS:
        peak = n.theoretical_peak(precision)
        rows.append(
            (
                f"{precision.upper()} peak per node",
                f"{_flops(peak.flops)} ({peak.basis})" if peak.flops else peak.basis,
            )
        )
    if n.clock_ghz_max:
        rows.append(
            (
                "peak at max clock",
                ", ".join(
                    f"{p.upper()} {_flops(n.theoretical_peak_flops(p, 'max'))}" for p in PRECISIONS
                )
                + " (vendor/Top500 convention; the seed paper's % of peak is of its FP64 figure)",
            )
        )
    if site.network.island_nodes:
        rows.append(
            (
                "peak per island",
                f"FP32 {_flops(site.peak_per_island('fp32'))}, "
                f"FP64 {_flops(site.peak_per_island('fp64'))} ({site.network.island_nodes} nodes; "
                f"{site.network.islands} islands)",
            )
        )
    node_fp32 = n.theoretical_peak_flops()
    rows += [
        ("peak at max_nodes", f"FP32 {_flops(s.max_nodes * node_fp32 if node_fp32 else None)}"),
        (
            "host MPI",
            f"{mpi.vendor} {mpi.version} at {mpi.prefix}, launcher {mpi.launcher!r}"
            + (f", {mpi.soname} {mpi.library_version or ''}" if mpi.soname else ""),
        ),
        ("MPI env", ", ".join(f"{k}={v}" for k, v in mpi.launch_env.items()) or "-"),
        *_openmpi_rows(mpi),
        (
            "container",
            f"{site.container.runtime}, images in {site.container.image_dir}, "
            f"host MPI bound under {site.container.mpi_target}, join={site.container.join}",
        ),
        *_udocker_rows(site),
        ("modules", ", ".join(site.modules) or "-"),
        (
            "transfer",
            f"{site.transfer.user + '@' if site.transfer.user else ''}{site.transfer.host}:"
            f"{site.transfer.port} -> {site.transfer.image_dir}"
            + (f" via {site.transfer.jump_host}" if site.transfer.jump_host else ""),
        ),
        (
            "network",
            f"{site.network.fabric or '-'}, {site.network.latency_us:g} us, "
            f"{site.network.bandwidth_gbps:g} Gbit/s",
        ),
    ]
    return rows


def _udocker_rows(site: Site) -> list[tuple[str, str]]:
    if site.container.runtime != "udocker":
        return []
    u = site.container.udocker_settings
    return [
        (
            "udocker",
            f"{u.executable}, mode {u.mode}, "
            f"proot {u.proot or 'udocker’s own'}{', tools tarball ' + u.tarball if u.tarball else ''}, "
            f"repository {u.dir}" + (", --allow-root" if u.allow_root else ""),
        )
    ]


def _openmpi_rows(mpi) -> list[tuple[str, str]]:
    if mpi.vendor != "openmpi":
        return []
    o = mpi.ompi
    return [
        (
            "Open MPI",
            f"components {o.components}, help files {o.help_files}, "
            f"PMIx components {o.pmix_components or '- (inside Open MPI)'}"
            + (", mpirun --allow-run-as-root" if o.allow_run_as_root else ""),
        )
    ]


def _ghz(value: float | None) -> str:
    return "unknown" if value is None else f"{value:g} GHz"


JSON_SCHEMA = "kit-site-show/1"


def _precisions(flops_at) -> dict[str, float | None]:
    return {p: flops_at(p) for p in PRECISIONS}


def _scaled(count: int, value: float | None) -> float | None:
    return None if value is None else count * value


def summary_document(site: Site) -> dict:
    """The summary for scripts: the validated config, plus what it implies (cores, peaks in
    FLOP/s).
    """
    n, s = site.node, site.scheduler
    sections = {
        k: asdict(v)
        for k, v in (
            ("scheduler", s),
            ("node", n),
            ("host_mpi", site.host_mpi),
            ("container", site.container),
            ("transfer", site.transfer),
            ("network", site.network),
        )
    }
    sections["node"] |= {"cores": n.cores, "hardware_threads": n.hardware_threads}
    sections["host_mpi"]["library_dirs"] = site.host_mpi.lib_dirs
    if site.host_mpi.vendor == "openmpi":
        sections["host_mpi"]["openmpi"] = asdict(site.host_mpi.ompi)
    # its settings with their defaults; no key for other runtimes
    if site.container.runtime == "udocker":
        sections["container"]["udocker"] = asdict(site.container.udocker_settings)
    else:
        del sections["container"]["udocker"]
    if site.container.runtime in APPTAINER_RUNTIMES:
        sections["container"]["apptainer"] = asdict(site.container.apptainer_settings)
    else:
        del sections["container"]["apptainer"]
    node_peak = n.theoretical_peak_flops
    return {
        "name": site.name,
        "description": site.description,
        "config_file": str(site.path) if site.path else None,
        "modules": list(site.modules),
        **sections,
        "peak_flops": {
            "per_node": _precisions(node_peak),
            "per_node_max_clock": _precisions(lambda p: node_peak(p, "max"))
            if n.clock_ghz_max
            else None,
            "per_island": _precisions(site.peak_per_island) if site.network.island_nodes else None,
            "at_max_nodes": _precisions(lambda p: _scaled(s.max_nodes, node_peak(p))),
            "basis": {p: n.theoretical_peak(p).basis for p in PRECISIONS},
        },
    }


def print_summary(site: Site, console: Console | None = None) -> None:
    """The rows as text: a config's description or paths may hold markup, escapes or megabytes."""
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    for key, value in summary_rows(site):
        table.add_row(Text(key), printable_text(value, 1000))
    (console or plain_console()).print(table)
