"""Describe the current host as a site config (lscpu, hwloc, /proc/meminfo, the MPI on PATH)."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
from pathlib import Path

import yaml

from kit.atomic import atomic_write_text
from kit.boundedrun import run_bounded
from kit.errors import KitError
from kit.site.model import SCHEMA, vendor_named_in
from kit.site.schema import check_document

# FP32 FLOP per cycle per core from the widest FMA the CPU flags show; two FMA units assumed
# for AVX-512 and AVX2 (one cannot read the unit count from flags: edit the result if needed).
FLOPS_BY_FLAG = [("avx512f", 64), ("fma", 32), ("avx", 16), ("sse2", 8)]
# Where each vendor's version output puts its version; then MPICH's mpichversion and Hydra's.
VERSION_PATTERNS = {
    "intel": (r"Intel\(R\) MPI Library[^\n]*?Version (\d[\w.]*)",),
    "openmpi": (r"\((?:Open MPI|OpenRTE)\) (\d[\w.]*)",),
    "mvapich2": (r"MVAPICH2 Version:\s*(\d[\w.]*)",),
}
VERSION_FALLBACK = (r"MPICH Version:\s*(\d[\w.]*)", r"Version:\s*(\d[\w.]*)")


def ldconfig() -> str:
    """glibc's ldconfig: in /sbin, which an ordinary user's PATH often lacks (Debian, SLES)."""
    return (
        shutil.which("ldconfig") or shutil.which("ldconfig", path="/usr/sbin:/sbin") or "ldconfig"
    )


def _run(cmd: list[str]) -> str:
    if shutil.which(cmd[0]) is None:
        return ""
    try:
        ran = run_bounded(cmd, timeout=30)
    except subprocess.TimeoutExpired:  # a hung probe describes nothing; the field falls back
        return ""
    return ran.out if ran.returncode == 0 and not ran.stdout_cut else ""


def _lscpu() -> dict[str, str]:
    text = _run(["lscpu", "-J"])
    if not text:
        return {}
    return {e["field"].rstrip(":"): e.get("data") or "" for e in json.loads(text)["lscpu"]}


def _hwloc_count(kind: str) -> int | None:
    out = _run(["hwloc-calc", "--number-of", kind, "all"]).strip()
    return int(out) if out.isdigit() and int(out) > 0 else None


def _meminfo_gb() -> tuple[float, float]:
    fields: dict[str, str] = dict(
        re.findall(r"^(\w+):\s+(\d+) kB", Path("/proc/meminfo").read_text(), re.M)
    )
    total = int(fields["MemTotal"]) / 2**20
    return round(total, 1), round(int(fields.get("MemAvailable", fields["MemTotal"])) / 2**20, 1)


def _max_clock_ghz(cpu: dict[str, str]) -> float | None:
    """The CPU's rated maximum clock, where the kernel knows it; None in a VM, whose guest sees
    whatever the hypervisor reports (the peak is then measured, never computed from it)."""
    if "hypervisor" in cpu.get("Flags", "").split() or not cpu.get("CPU max MHz"):
        return None
    try:
        return round(float(cpu["CPU max MHz"]) / 1000, 2)
    except ValueError:
        return None


def _flops_per_cycle(flags: str) -> int:
    have = set(flags.split())
    return next((n for flag, n in FLOPS_BY_FLAG if flag in have), 4)


def probe_mpi() -> dict:
    """The MPI whose mpiexec is first on PATH, described from its own version output."""
    mpiexec = shutil.which("mpiexec")
    if mpiexec is None:
        raise KitError(
            "kit site probe: no mpiexec on PATH, so host_mpi cannot be described",
            fix="load the site's MPI module (or install one) and probe again",
        )
    text = _run([mpiexec, "--version"]) + _run(["mpichversion"])
    real = Path(mpiexec).resolve()
    prefix = real.parent.parent
    # Hydra's own --version names no vendor: without mpichversion's "MPICH Version" it is MPICH's.
    vendor = vendor_named_in(text.encode()) or "mpich"
    version = next(
        (
            m
            for pattern in VERSION_PATTERNS.get(vendor, ()) + VERSION_FALLBACK
            if (m := re.search(pattern, text))
        ),
        None,
    )
    soname, lib_dir, file_version = None, None, None
    names = ("libmpi.so.40",) if vendor == "openmpi" else ("libmpi.so.12", "libmpich.so.12")
    for line in _run([ldconfig(), "-p"]).splitlines():
        match = re.match(r"\s*(\S+) \(.*\) => (\S+)", line)
        if match and match.group(1) in names:
            soname, path = match.groups()
            lib_dir = str(Path(path).parent)
            suffix = re.search(r"\.so\.([\d.]+)\Z", Path(path).resolve().name)
            file_version = suffix.group(1) if suffix else None
            break
    return {
        "vendor": vendor,
        "version": version.group(1) if version else "unknown",
        "prefix": str(prefix),
        "library_dirs": [lib_dir] if lib_dir else [],
        "launcher": "mpiexec",
        "env": {},
        "soname": soname,
        "library_version": file_version,
    }


PROOT_VERSION = re.compile(r"[^\n]*?\| ([0-9]{1,3}(?:\.[0-9]{1,4}){1,3})")  # the banner's last line
PROOT_LIMITS = (
    "without seccomp acceleration each system call costs about 20-28 times a native one (a "
    "CPU-bound loop runs at bare speed, a process starts about 0.1 s later); "
    "statx is not translated (ls/stat of some paths show host metadata)"
)


def proot_note() -> str:
    """Which proot a udocker site would run, and its limits: comment lines for the probed file."""
    path = shutil.which("proot")
    if path is None:
        return (
            "# proot: none on PATH; container.runtime: udocker needs one (apt-get install proot) or\n"
            "# udocker's own from its tools tarball (container.udocker.tarball).\n"
        )
    banner = _run([path, "--version"])[:4096]
    found = next(
        (m[1] for line in banner.splitlines() if (m := PROOT_VERSION.fullmatch(line.rstrip()))),
        "unknown",
    )
    note = (
        f"proot: {path} (version {found}); with container.runtime: "
        "udocker the kit runs it through a wrapper without udocker's -k (Debian's 5.1.0 breaks "
        f"glibc 2.36 with it). Limits measured with Debian's 5.1.0: {PROOT_LIMITS}."
    )
    return "".join(f"# {line}\n" for line in _wrap(note))


def _wrap(text: str, width: int = 96) -> list[str]:
    lines, line = [], ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    return lines + ([line] if line else [])


def _runtime() -> dict:
    """Charliecloud where ch-run is installed; else udocker where it is; else Charliecloud, to
    install.
    """
    if shutil.which("ch-run") is None and shutil.which("udocker") is not None:
        return {
            "runtime": "udocker",
            "udocker": {"proot": shutil.which("proot")}
            if shutil.which("proot")
            else {"proot": None, "tarball": "/path/to/udocker-englib.tar.gz"},
        }
    return {"runtime": "charliecloud"}


def probe_host(name: str | None = None) -> dict:
    """A site-config dict for this machine; values the host cannot tell are marked in comments."""
    cpu = _lscpu()
    sockets = _hwloc_count("package") or int(cpu.get("Socket(s)", "1") or 1)
    cores = _hwloc_count("core") or os.cpu_count() or 1
    threads = _hwloc_count("pu") or cores
    numa = _hwloc_count("numanode") or int(cpu.get("NUMA node(s)", "1") or 1)
    total, avail = _meminfo_gb()
    host = (
        re.sub(r"[^a-z0-9._-]", "-", (name or socket.gethostname()).lower()).strip("-.")
        or "localhost"
    )
    slurm = shutil.which("sbatch") is not None
    return {
        "name": host[:64],
        "description": f"probed from {socket.gethostname()} by kit site probe",
        "scheduler": {
            "type": "slurm" if slurm else "local",
            "partition": None,
            "account": None,
            "max_nodes": 1,
            "max_walltime": "01:00:00",
        },
        "node": {
            "cpu_model": cpu.get("Model name", "unknown"),
            "sockets": sockets,
            "cores_per_socket": max(1, cores // sockets),
            "threads_per_core": max(1, threads // cores),
            "numa_domains": numa,
            "memory_gb": total,
            "usable_memory_gb": avail,
            # No host tells its clock under AVX-512 load: null (peak unknown) until taken from
            # the vendor's specification; the max clock only outside a VM.
            "clock_ghz_avx": None,
            "clock_ghz_max": _max_clock_ghz(cpu),
            "fp32_flop_per_cycle_per_core": _flops_per_cycle(cpu.get("Flags", "")),
        },
        "host_mpi": probe_mpi(),
        "container": {**_runtime(), "image_dir": "~/images", "binds": [], "join": True},
        "modules": [],
        "transfer": {
            "host": "localhost",
            "user": None,
            "port": 22,
            "image_dir": "~/images",
            "jump_host": None,
            "keep_versions": 2,
            "direct_io": True,
        },
        "network": {"latency_us": 1.0, "bandwidth_gbps": 10.0},
    }


def probe_yaml(name: str | None = None) -> str:
    """The probed config as YAML, validated against the schema before anyone sees it."""
    header = (
        "# Written by `kit site probe`. Fill in what a host cannot tell: clock under AVX load\n"
        "# (null: the theoretical peak stays unknown), FMA units per core, FP64/BF16 FLOP/cycle,\n"
        "# scheduler limits, transfer endpoint and network figures.\n"
    ) + proot_note()
    text = header + yaml.safe_dump(probe_host(name), sort_keys=False)
    check_document(text, "<probed>", SCHEMA)
    return text


def write_probe(out: str | os.PathLike, name: str | None = None) -> Path:
    """A new file OUT, never one that is there: a site config, even a probed one, is edited by hand
    (its header asks for it), so an existing OUT is the user's, and a second probe must not undo
    it."""
    out = Path(out)
    fix = "remove it first if it is to go, or give another --out"
    if os.path.lexists(out):
        raise KitError(
            "already exists; kit site probe writes a new file only", fix=fix, where=str(out)
        )
    try:
        atomic_write_text(out, probe_yaml(name), replace=False)
    except FileExistsError:  # made while the host was probed
        raise KitError(
            "appeared while the host was probed; kit site probe writes a new file only",
            fix=fix,
            where=str(out),
        ) from None
    return out
