"""Virtual clusters for the tests: each with its own name (interfaces, namespaces, Slurm names) and a
free subnet, so that tests, the one-node test Slurm and a user's cluster never meet."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from pathlib import Path

from tests.support.parts import require


def require_namespaces() -> None:
    """Skip (fail under CI) where this machine cannot make the cluster: not root, tools missing, or
    network/UTS namespaces refused (an unprivileged container)."""
    from kit.vcluster.daemons import missing_tools

    require(os.geteuid() == 0, "the virtual cluster needs root (network namespaces, a bridge)")
    missing = missing_tools()
    require(
        not missing,
        f"{', '.join(missing)} not installed (scripts/setup.sh installs Slurm, munge, iproute2)",
    )
    probe = subprocess.run(
        [shutil.which("unshare") or "unshare", "--net", "--uts", "true"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    require(
        probe.returncode == 0, f"network/UTS namespaces not allowed here: {probe.stderr.strip()}"
    )


def fresh_name() -> str:
    """t + 5 hex digits: unique per test, within the 8 characters interface names leave."""
    return "t" + secrets.token_hex(3)[:5]


def cluster_links(name: str) -> list[str]:
    """Interfaces and namespaces on the host that a cluster of this name would have made."""
    links = subprocess.run(["ip", "-br", "link"], capture_output=True, text=True, timeout=30).stdout
    found = [
        line.split()[0].split("@")[0]
        for line in links.splitlines()
        if line.startswith(f"kvc-{name}")
    ]
    found += (
        [p.name for p in Path("/run/netns").glob(f"kvc-{name}-*")]
        if Path("/run/netns").is_dir()
        else []
    )
    return found
