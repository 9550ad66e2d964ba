"""The ABI rules that decide whether a host MPI can replace the image's MPI (Sarus's rules).

MPICH family (libmpi.so.12; Debian names it libmpich.so.12): MPICH >= 3.1, Intel MPI >= 5.0,
Cray MPT >= 7.0, MVAPICH2 >= 2.0, ParaStation. Open MPI is its own family. Same family and
SONAME major always; minor: `major` ignores it, `full` (default) warns when the host's is
older than the image's, `strict` demands equality. Open MPI has rules of its own, from its
release versions (kit.openmpi_abi; sources in docs/mpi-abi.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from kit.openmpi_abi import openmpi_rule, release_series
from kit.site.model import FAMILY_OF_VENDOR

MODES = ("major", "full", "strict")
DEFAULT_SONAME = {"mpich": "libmpi.so.12", "openmpi": "libmpi.so.40"}
# What to put into an image so that it pairs with a host of each family.
ADVICE = {
    "mpich": "an MPICH-ABI MPI with libmpi.so.12 (e.g. Debian/Ubuntu 'mpich' {hint}, "
    "or Intel MPI matching the host's {host})",
    "openmpi": "Open MPI {hint} (the host's major version, minor no newer than the host's {host})",
}


@dataclass(frozen=True)
class AbiId:
    """One side of a pair: who built it and which library ABI it exports."""

    vendor: str
    version: str | None
    soname: str  # e.g. libmpi.so.12 or libmpich.so.12
    file_version: str | None  # e.g. 12.2.2 (None: minor unknown)

    @property
    def family(self) -> str:
        return FAMILY_OF_VENDOR.get(self.vendor, "unknown")

    @property
    def linker_name(self) -> str:
        return self.soname.split(".so")[0] + ".so"

    @property
    def major(self) -> int | None:
        match = re.search(r"\.so\.(\d+)", self.soname)
        return int(match.group(1)) if match else None

    @property
    def minor(self) -> int | None:
        if not self.file_version:
            return None
        parts = self.file_version.split(".")
        return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None

    def describe(self) -> str:
        ver = f" {self.version}" if self.version else ""
        fv = self.file_version or f"{self.major}.?"
        return f"{self.vendor}{ver} ({self.soname}, ABI {fv})"


@dataclass
class Verdict:
    ok: bool
    mode: str
    reasons: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # image soname -> host soname to load instead
    aliases: dict[str, str] = field(default_factory=dict)
    advice: str | None = None


def advice_for(host: AbiId) -> str:
    if host.family == "openmpi":
        series = release_series(host.version)
        hint = (
            (f"{series[0]}.0.x" + (f" to {series[0]}.{series[1]}.x" if series[1] else ""))
            if series
            else ""
        )
        return ADVICE["openmpi"].format(hint=hint, host=host.describe())
    hint = f"with libmpi.so.12 minor <= {host.minor}" if host.minor is not None else ""
    return ADVICE["mpich"].format(hint=hint, host=host.describe())


def decide(host: AbiId, image: AbiId, mode: str = "full") -> Verdict:
    """Apply the rules; the verdict lists every reason, warnings included."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    v = Verdict(ok=True, mode=mode)

    def refuse(reason: str) -> None:
        v.ok = False
        v.reasons.append(reason)

    if host.family == "unknown" or image.family == "unknown":
        refuse(f"unknown MPI family (host {host.vendor}, image {image.vendor})")
    elif host.family != image.family:
        refuse(
            f"ABI families differ: host {host.describe()} is {host.family} ABI, "
            f"image {image.describe()} is {image.family} ABI"
        )
    else:
        v.reasons.append(f"same ABI family: {host.family}")
    if v.ok and host.major != image.major:
        refuse(f"SONAME majors differ: host {host.soname}, image {image.soname}")
    elif v.ok:
        v.reasons.append(f"same SONAME major: .{host.major}")
    if v.ok and host.linker_name != image.linker_name:
        v.aliases[image.soname] = host.soname
        v.reasons.append(
            f"linker names differ ({image.linker_name} in the image, {host.linker_name} on the host): "
            f"the image's {image.soname} is served by the host's {host.soname}"
        )
    if v.ok and host.family == "openmpi":
        openmpi_rule(
            host.version,
            image.version,
            mode,
            reason=v.reasons.append,
            warn=v.warnings.append,
            refuse=refuse,
        )
    elif v.ok and mode != "major":
        _minor_rule(host, image, mode, v, refuse)
    if not v.ok:
        v.advice = advice_for(host)
    return v


def _minor_rule(host: AbiId, image: AbiId, mode: str, v: Verdict, refuse) -> None:
    hmin, imin = host.minor, image.minor
    if hmin is None or imin is None:
        side = "host" if hmin is None else "image"
        v.warnings.append(f"the {side} library's minor version is unknown; minor not compared")
        return
    if hmin == imin:
        v.reasons.append(f"same minor: {hmin}")
    elif mode == "strict":
        refuse(
            f"minor versions differ: host {hmin}, image {imin} (strict mode requires equal minor)"
        )
    elif hmin > imin:
        v.reasons.append(f"host minor {hmin} >= image minor {imin}")
    else:
        v.warnings.append(
            f"host minor {hmin} is older than the image's minor {imin}: "
            "programs built against the image's MPI may call functions the host lacks"
        )
