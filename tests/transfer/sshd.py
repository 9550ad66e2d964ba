"""A real OpenSSH sshd on a loopback port, for the transfer tests and benchmark.

Everything it needs lives in one temp directory: its host key, the client key it
authorizes, a known_hosts for the client and a ~/.ssh/config-style file naming it.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from tests.support.ports import free_port

SSHD = "/usr/sbin/sshd"


def sshd_available() -> bool:
    return (
        Path(SSHD).exists()
        and shutil.which("ssh-keygen") is not None
        and shutil.which("ssh") is not None
    )


@dataclass
class Sshd:
    """A running sshd and the client-side files that reach it."""

    root: Path
    port: int
    proc: subprocess.Popen
    client_key: Path
    known_hosts: Path
    host_pub: str  # "ssh-ed25519 AAAA..." of the server
    user: str = "root"
    host: str = "127.0.0.1"

    def write_ssh_config(
        self, path: Path, alias: str = "kit-test", known_hosts: Path | None = None, extra: str = ""
    ) -> Path:
        """An ssh_config block for `alias`, as a user would have in ~/.ssh/config."""
        kh = known_hosts or self.known_hosts
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            f"Host {alias}\n  HostName {self.host}\n  Port {self.port}\n  User {self.user}\n"
            f"  IdentityFile {self.client_key}\n  IdentitiesOnly yes\n"
            f"  UserKnownHostsFile {kh}\n{extra}"
        )
        return path

    def known_hosts_line(self) -> str:
        return f"[{self.host}]:{self.port} {self.host_pub}\n"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def kill_sessions(self) -> None:
        """Kill the per-connection sshd children (drops every live connection)."""
        out = subprocess.run(
            ["ps", "-o", "pid=", "--ppid", str(self.proc.pid)], capture_output=True, text=True
        ).stdout
        for pid in out.split():
            try:
                os.kill(int(pid), 9)
            except ProcessLookupError:
                pass


def start_sshd(root: Path, extra_config: str = "") -> Sshd:
    """Start sshd -D on 127.0.0.1:<free port> with keys generated under `root`; `extra_config`
    lines are appended to its sshd_config."""
    root.mkdir(parents=True, exist_ok=True)
    Path("/run/sshd").mkdir(parents=True, exist_ok=True)  # privilege-separation dir
    host_key, client_key = root / "host_ed25519", root / "client_ed25519"
    for key in (host_key, client_key):
        if not key.exists():
            subprocess.run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True
            )
    auth = root / "authorized_keys"
    auth.write_text((root / "client_ed25519.pub").read_text())
    port = free_port()
    conf = root / "sshd_config"
    conf.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {host_key}\n"
        f"PidFile {root / 'sshd.pid'}\nAuthorizedKeysFile {auth}\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nPubkeyAuthentication yes\n"
        "PermitRootLogin prohibit-password\nStrictModes no\nUsePAM no\nAllowTcpForwarding yes\n"
        "MaxStartups 50\nMaxSessions 50\nLogLevel ERROR\n"
        "Subsystem sftp internal-sftp\n" + extra_config
    )
    log = open(root / "sshd.log", "ab")
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(conf)], stdout=log, stderr=log)
    host_pub = " ".join((root / "host_ed25519.pub").read_text().split()[:2])
    server = Sshd(
        root=root,
        port=port,
        proc=proc,
        client_key=client_key,
        known_hosts=root / "known_hosts",
        host_pub=host_pub,
    )
    server.known_hosts.write_text(server.known_hosts_line())
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"sshd exited: {(root / 'sshd.log').read_text()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                if s.recv(64).startswith(b"SSH-"):
                    return server
        except OSError:
            time.sleep(0.1)
    server.stop()
    raise RuntimeError(f"sshd did not answer on port {port}")
