"""The cluster's network: a bridge on the host, one namespace per node joined to it by a veth pair.

Every `ip` call is bounded; the subnet is one no interface or route of the host uses yet."""

from __future__ import annotations

import fcntl
import ipaddress
import json
import os
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kit.boundedrun import run_bounded
from kit.excerpt import one_line
from kit.vcluster.state import VclusterError

NODE_IFACE = "vc0"  # the veth end inside every node: MPI's interface settings name it
# private, /24 each; none of it routed here by default
POOL = ipaddress.IPv4Network("10.213.0.0/16")
TIMEOUT = 30


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    try:
        ran = run_bounded(["ip", *args], timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        raise VclusterError(
            f"`ip {' '.join(args)}` did not finish in {TIMEOUT} s",
            fix="check the host's network stack",
        ) from None
    done = subprocess.CompletedProcess(["ip", *args], ran.returncode, ran.out, ran.err)
    if check and done.returncode:
        raise VclusterError(
            f"`ip {' '.join(args)}` failed: {one_line(done.stderr, 300)}", fix="the cause ip names"
        )
    return done


def link_exists(name: str) -> bool:
    return ip("link", "show", "dev", name, check=False).returncode == 0


def netns_exists(name: str) -> bool:
    return Path("/run/netns", name).exists()


def netns_pids(name: str) -> list[int]:
    """The processes inside a node: only the cluster's (its slurmd, job steps and ranks)."""
    done = ip("netns", "pids", name, check=False)
    return [int(p) for p in done.stdout.split() if p.isdigit()] if done.returncode == 0 else []


def _used_networks() -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    used = []
    for args in (["-4", "-j", "addr"], ["-4", "-j", "route", "show", "table", "all"]):
        for entry in json.loads(ip(*args).stdout or "[]"):
            for info in entry.get("addr_info", []):
                used.append(
                    ipaddress.ip_network(f"{info['local']}/{info['prefixlen']}", strict=False)
                )
            dst = entry.get("dst")
            if dst and dst != "default":
                try:
                    used.append(
                        ipaddress.ip_network(dst if "/" in dst else f"{dst}/32", strict=False)
                    )
                except ValueError:  # "broadcast", "local" entries name addresses we already have
                    pass
    return used


def check_subnet(text: str) -> ipaddress.IPv4Network:
    try:
        net = ipaddress.ip_network(text)
    except ValueError:
        net = None
    if not isinstance(net, ipaddress.IPv4Network) or net.prefixlen != 24 or not net.is_private:
        raise VclusterError(
            f"--subnet {text!r}: not a private IPv4 /24", fix="give one such as 10.213.5.0/24"
        )
    clash = [u for u in _used_networks() if u.overlaps(net)]
    if clash:
        raise VclusterError(
            f"--subnet {net}: overlaps {clash[0]} on this host",
            fix="choose another (or leave --subnet out: a free one is picked)",
        )
    return net


def free_subnet() -> ipaddress.IPv4Network:
    """The first /24 of POOL that no address or route of the host touches."""
    used = _used_networks()
    for net in POOL.subnets(new_prefix=24):
        if not any(u.overlaps(net) for u in used):
            return net
    raise VclusterError(
        f"no free /24 left in {POOL}", fix="kit vcluster down the clusters you no longer use"
    )


@contextmanager
def allocation_lock() -> Iterator[None]:
    """One `up` at a time picks a subnet and claims it (by addressing its bridge)."""
    where = Path("/run/lock") if Path("/run/lock").is_dir() else Path(tempfile.gettempdir())
    fd = os.open(
        where / "kit-vcluster.lock", os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644
    )
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def add_bridge(name: str) -> None:
    """Fails if the name is taken (then nothing was made): the caller's record of it goes."""
    ip("link", "add", name, "type", "bridge")


def configure_bridge(name: str, address: str, prefixlen: int) -> None:
    ip("addr", "add", f"{address}/{prefixlen}", "dev", name)
    ip("link", "set", name, "up")


def add_veth(netns: str, veth: str) -> None:
    """Fails if the name is taken (then nothing was made): the caller's record of it goes."""
    ip("link", "add", veth, "type", "veth", "peer", "name", NODE_IFACE, "netns", netns)


def configure_node(netns: str, veth: str, bridge: str, *, address: str, prefixlen: int) -> None:
    ip("link", "set", veth, "master", bridge, "up")
    ip("-n", netns, "addr", "add", f"{address}/{prefixlen}", "dev", NODE_IFACE)
    ip("-n", netns, "link", "set", NODE_IFACE, "up")
    ip("-n", netns, "link", "set", "lo", "up")


def delete_link(name: str) -> None:
    if link_exists(name):
        ip("link", "del", name, check=False)


def delete_netns(name: str) -> None:
    if netns_exists(name):
        ip("netns", "del", name)
