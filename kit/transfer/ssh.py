"""Reaching the site: one resolved SSH endpoint used by both Fabric (control) and ssh(1) (data).

The endpoint is resolved once from the user's ~/.ssh/config (paramiko's SSHConfig) plus
the site config and command-line overrides, so the control connection and the bulk data
stream go to the same host, as the same user, with the same keys, known_hosts and jump
host. Host keys are checked against known_hosts; an unknown key is refused unless the user
opts in, and then it is recorded (never paramiko's AutoAddPolicy).
"""

from __future__ import annotations

import base64
import getpass
import hashlib
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import fabric
import paramiko

from kit.atomic import atomic_write_text
from kit.errors import KitError
from kit.excerpt import one_line


@dataclass
class Endpoint:
    """Where and how to log in; `alias` is the name as written (a ~/.ssh/config Host)."""

    alias: str
    hostname: str
    port: int
    user: str
    identity_files: list[str] = field(default_factory=list)
    identities_only: bool = False
    known_hosts: list[Path] = field(default_factory=list)
    config_file: Path | None = None
    ciphers: str | None = None  # the user's own Ciphers line, if any: it wins
    jump: Endpoint | None = None

    @property
    def host_key_name(self) -> str:
        """The name known_hosts files use for this host (OpenSSH and paramiko agree)."""
        return self.hostname if self.port == 22 else f"[{self.hostname}]:{self.port}"

    def __str__(self) -> str:
        via = f" via {self.jump}" if self.jump else ""
        return f"{self.user}@{self.hostname}:{self.port}{via}"


def default_ssh_config() -> Path:
    return Path(os.path.expanduser("~/.ssh/config"))


def _split_target(text: str) -> tuple[str | None, str, int | None]:
    """'[user@]host[:port]' as used by ProxyJump and the site's jump_host."""
    user, _, rest = text.rpartition("@")
    host, port = rest, None
    if rest.count(":") == 1:
        host, _, p = rest.partition(":")
        if not p.isdigit():
            raise KitError(
                f"jump host {text!r}: port {p!r} is not a number",
                fix="write it as [user@]host[:port] "
                "(transfer.jump_host, or ProxyJump in ~/.ssh/config)",
            )
        port = int(p)
    return user or None, host, port


def resolve(
    host: str,
    *,
    user: str | None = None,
    port: int | None = None,
    jump: str | None = None,
    ssh_config: Path | None = None,
) -> Endpoint:
    """Apply ~/.ssh/config to `host`; explicit arguments win over the file."""
    if not host:
        raise KitError(
            "no SSH host given", fix="set transfer.host in the site config, or pass --host HOST"
        )
    cfg_path = ssh_config if ssh_config is not None else default_ssh_config()
    cfg = (
        paramiko.SSHConfig.from_path(str(cfg_path)) if cfg_path.is_file() else paramiko.SSHConfig()
    )
    found = cfg.lookup(host)
    known = found.get("userknownhostsfile", "~/.ssh/known_hosts").split()
    ep = Endpoint(
        alias=host,
        hostname=found.get("hostname", host),
        port=int(port or found.get("port", 22)),
        user=user or found.get("user") or getpass.getuser(),
        identity_files=[os.path.expanduser(p) for p in found.get("identityfile", [])],
        identities_only=found.get("identitiesonly", "no").lower() == "yes",
        known_hosts=[Path(os.path.expanduser(p)) for p in known],
        config_file=cfg_path if cfg_path.is_file() else None,
        ciphers=found.get("ciphers"),
    )
    hops = jump if jump is not None else found.get("proxyjump")
    if hops and hops.lower() != "none":
        *earlier, last = [h.strip() for h in hops.split(",")]
        juser, jhost, jport = _split_target(last)
        ep.jump = resolve(
            jhost, user=juser, port=jport, jump=",".join(earlier) or "none", ssh_config=ssh_config
        )
    return ep


def site_endpoint(
    transfer,
    *,
    host: str | None = None,
    user: str | None = None,
    port: int | None = None,
    ssh_config: Path | None = None,
) -> Endpoint:
    """The endpoint of a site's `transfer` section, with command-line overrides."""
    # The site's port applies to the site's host unless it is the default 22, which leaves
    # room for a Port line in ~/.ssh/config (e.g. for a tunnel alias).
    site_port = transfer.port if not host and transfer.port != 22 else None
    return resolve(
        host or transfer.host,
        user=user or transfer.user,
        port=port or site_port,
        jump=transfer.jump_host,
        ssh_config=ssh_config,
    )


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH's SHA256 fingerprint, as `ssh-keygen -lf` prints it."""
    digest = base64.b64encode(hashlib.sha256(key.asbytes()).digest()).decode().rstrip("=")
    return f"SHA256:{digest}"


class _KnownHostsPolicy(paramiko.MissingHostKeyPolicy):
    """Unknown host: refuse with the fingerprint and the way to opt in, or record it if asked."""

    def __init__(self, ep: Endpoint, accept_new: bool):
        self.ep, self.accept_new = ep, accept_new

    def missing_host_key(
        self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey
    ) -> None:
        files = ", ".join(map(str, self.ep.known_hosts))
        if not self.accept_new:
            kind = key.get_name().split("-")[-1]
            raise KitError(
                f"unknown SSH host key for {self.ep.host_key_name}: "
                f"{key.get_name()} {fingerprint(key)} (not in {files})",
                fix="verify this fingerprint with the site's administrators, "
                f"on the host: ssh-keygen -lf /etc/ssh/ssh_host_{kind}_key.pub; "
                "then run the same command again with --accept-new-host-key to record it",
            )
        target = self.ep.known_hosts[0]
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        old = target.read_text() if target.exists() else ""
        if old and not old.endswith("\n"):
            old += "\n"
        atomic_write_text(
            target, f"{old}{hostname} {key.get_name()} {key.get_base64()}\n", perm=0o600
        )
        client.get_host_keys().add(hostname, key.get_name(), key)


def connect(
    ep: Endpoint, *, accept_new_host_key: bool = False, timeout: int = 20
) -> fabric.Connection:
    """An open Fabric connection with known_hosts enforced (through the jump host if any)."""
    gateway = (
        connect(ep.jump, accept_new_host_key=accept_new_host_key, timeout=timeout)
        if ep.jump
        else False
    )
    conn = fabric.Connection(
        ep.hostname,
        user=ep.user,
        port=ep.port,
        gateway=gateway,
        connect_timeout=timeout,
        config=fabric.Config(ssh_config=paramiko.SSHConfig()),  # already resolved above
        connect_kwargs={
            "allow_agent": True,
            "look_for_keys": not ep.identities_only,
            **({"key_filename": ep.identity_files} if ep.identity_files else {}),
        },
    )
    for path in ep.known_hosts:
        if path.is_file():
            conn.client.load_host_keys(str(path))
    conn.client.set_missing_host_key_policy(_KnownHostsPolicy(ep, accept_new_host_key))
    try:
        conn.open()
    except paramiko.BadHostKeyException as exc:
        raise KitError(
            f"the SSH host key of {ep.host_key_name} ({fingerprint(exc.key)}) "
            f"does NOT match the one in {', '.join(map(str, ep.known_hosts))}: "
            "possible man-in-the-middle",
            fix="if the site really changed its key, verify the new fingerprint with its administrators, "
            f"then remove the old entry with ssh-keygen -R {shlex.quote(ep.host_key_name)}",
        ) from exc
    except paramiko.AuthenticationException as exc:
        raise KitError(
            f"SSH authentication as {ep.user} to {ep.hostname}:{ep.port} failed ({one_line(exc)}); "
            f"keys tried: {', '.join(ep.identity_files) or 'default ~/.ssh/id_*'} and the agent",
            fix="set IdentityFile for this host in ~/.ssh/config, "
            "or add the key to ssh-agent (ssh-add KEY)",
        ) from exc
    except (OSError, paramiko.SSHException) as exc:
        raise KitError(
            f"cannot reach {ep} over SSH: {one_line(exc) or type(exc).__name__}",
            fix="check the host and port (transfer.host and transfer.port in the site config, "
            "--host, --port, ~/.ssh/config) and that ssh to it works from here",
        ) from exc
    return conn


# OpenSSH's default list with AES-GCM first: with AES instructions it is about twice as fast
# as the default chacha20-poly1305 (docs/benchmarks.md); spelled out for pre-8.6 clients.
FAST_CIPHERS = (
    "aes128-gcm@openssh.com,aes256-gcm@openssh.com,chacha20-poly1305@openssh.com,"
    "aes128-ctr,aes192-ctr,aes256-ctr"
)


def _cpu_has_aes() -> bool:
    try:
        with open("/proc/cpuinfo") as fh:
            return any(line.startswith(("flags", "Features")) and " aes" in line for line in fh)
    except OSError:
        return False


def ssh_argv(ep: Endpoint) -> list[str]:
    """ssh(1) arguments reproducing `ep` exactly (the bulk data path: OpenSSH's C crypto)."""
    argv = [
        "ssh",
        "-F",
        str(ep.config_file or os.devnull),
        "-T",
        "-x",
        "-a",
        "-o",
        f"HostName={ep.hostname}",
        "-p",
        str(ep.port),
        "-l",
        ep.user,
        "-o",
        "BatchMode=yes",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "UserKnownHostsFile=" + " ".join(str(p) for p in ep.known_hosts),
        "-o",
        "ServerAliveInterval=15",
        "-o",
        "ServerAliveCountMax=4",
        "-o",
        "ClearAllForwardings=yes",
    ]
    for key in ep.identity_files:
        argv += ["-i", key]
    if ep.identities_only:
        argv += ["-o", "IdentitiesOnly=yes"]
    if not ep.ciphers and _cpu_has_aes():
        argv += ["-o", f"Ciphers={FAST_CIPHERS}"]
    if ep.jump:
        hop = ssh_argv(ep.jump)
        hop[-1:-1] = ["-W", "%h:%p"]
        argv += ["-o", "ProxyCommand=" + " ".join(shlex.quote(a) for a in hop)]
    else:
        argv += ["-o", "ProxyJump=none"]
    return argv + [ep.alias]
