"""When a host Open MPI may replace the image's Open MPI, from their release versions A.B.C.

Open MPI states its promises in release numbers, not in the SONAME (libmpi.so.40 spans 3.0 to
5.0): within a major series a newer minor runs programs built with an older one (backward
compatibility, never forward); a new major breaks it (4.0 removed the MPI-1 functions such as
MPI_Address), except that 5.x keeps the C ABI of 4.x; the release number C is bug fixes only.
Sources and the reasoning per case: docs/mpi-abi.md. A module of its own below the parts (only
the standard library): kit.mpi.abi judges a pair by it, and kit image build (kit.image, a layer
below kit.mpi) refuses a recipe whose default Open MPI the site's host MPI cannot replace by it.
"""

from __future__ import annotations

import re
from typing import Callable

# fullmatch
VERSION_RE = re.compile(r"v?(\d{1,3})\.(\d{1,3})(?:\.(\d{1,4}))?(?:[a-z][a-z0-9]*)?", re.ASCII)
# (host major, image major) pairs Open MPI documents as C-ABI compatible across majors.
C_ABI_ACROSS_MAJORS = {(5, 4)}


def release_series(version: str | None) -> tuple[int, int, int] | None:
    """(A, B, C) from "4.1.4", "v5.0.3rc1" or "4.1"; None for anything else."""
    match = VERSION_RE.fullmatch(version or "")
    if not match:
        return None
    major, minor, release = match.groups()
    return int(major), int(minor), int(release or 0)


def openmpi_rule(
    host_version: str | None,
    image_version: str | None,
    mode: str,
    *,
    reason: Callable[[str], None],
    warn: Callable[[str], None],
    refuse: Callable[[str], None],
) -> None:
    """Judge one pair; each outcome is one line through reason/warn/refuse."""
    host, image = release_series(host_version), release_series(image_version)
    if host is None or image is None:
        side, value = ("host", host_version) if host is None else ("image", image_version)
        warn(
            f"the {side}'s Open MPI release ({value or 'unknown'}) is not A.B.C: "
            "only the SONAME was compared; give host_mpi.version as A.B.C or check the image's Open MPI"
        )
        return
    h, i = ".".join(map(str, host)), ".".join(map(str, image))
    if mode == "major":
        reason(f"major mode: Open MPI releases not compared (host {h}, image {i})")
        return
    (ha, hb, hc), (ia, ib, ic) = host, image
    if ha != ia:
        if (ha, ia) in C_ABI_ACROSS_MAJORS and mode == "full":
            warn(
                f"host Open MPI {h} runs programs built with {i} through its C ABI promise for {ia}.x; "
                "Fortran bindings only if both were built with the same Fortran compiler"
            )
        elif (ha, ia) in C_ABI_ACROSS_MAJORS:
            refuse(
                f"Open MPI majors differ: host {h}, image {i} (strict mode requires the same major.minor)"
            )
        elif ha < ia:
            refuse(
                f"the image's Open MPI {i} is of a newer major series than the host's {h}: "
                "Open MPI promises backward compatibility only (a newer library runs older programs)"
            )
        else:
            removed = " (4.0 removed the MPI-1 functions, e.g. MPI_Address)" if ia < 4 <= ha else ""
            refuse(
                f"Open MPI majors differ: host {h}, image {i}: "
                f"a new major series breaks backward compatibility{removed}"
            )
    elif hb < ib:
        refuse(
            f"the host's Open MPI {h} is older than the image's {i}: "
            f"programs built with {ia}.{ib} may call what the host lacks (Open MPI promises backward, "
            "not forward, compatibility)"
        )
    elif hb > ib and mode == "strict":
        refuse(
            f"Open MPI minors differ: host {h}, image {i} (strict mode requires the same major.minor)"
        )
    elif hb > ib:
        reason(f"host Open MPI {h} is newer in the image's major series ({i}): backward compatible")
    elif hc < ic:
        warn(
            f"host Open MPI {h} is an older release of the image's series {ia}.{ib} ({i}): same ABI, "
            "but the image's bug fixes are missing"
        )
    else:
        reason(f"same Open MPI series: host {h}, image {i}")
