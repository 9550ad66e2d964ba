"""A real one-node Slurm for the tests: munged, slurmctld and slurmd on loopback, private to a dir.

Everything lives under `root` (slurm.conf, state, logs) and a short temporary directory (munge's
key and socket, the spool, TmpFS) that stop() removes, on free ports, so it neither needs nor
disturbs a system Slurm; clients find it through SLURM_CONF.
Cgroup-free plugins (proctrack/linuxproc, task/none) let it run in a VM or container as root.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.ports import free_port

DAEMONS = ("munged", "slurmctld", "slurmd", "srun", "sinfo")


def slurm_available() -> bool:
    return (
        all(shutil.which(d) or Path("/usr/sbin", d).exists() for d in DAEMONS) and os.geteuid() == 0
    )


@dataclass
class Slurm:
    root: Path
    conf: Path
    node: str
    cpus: int
    sockets: Path  # munge's socket, slurmd's spool, TmpFS: made apart from root (see start_slurm)
    pids: list[Path] = field(default_factory=list)

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    def log(self) -> str:
        return "\n".join(
            f"== {p.name}\n{p.read_text()[-2000:]}" for p in sorted(self.root.glob("*.log"))
        )

    def stop(self) -> None:
        for pid_file in reversed(self.pids):
            try:
                os.kill(int(pid_file.read_text()), signal.SIGTERM)
            except (OSError, ValueError):
                pass
        time.sleep(0.5)
        shutil.rmtree(self.sockets, ignore_errors=True)


def _sbin(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


def start_slurm(root: Path, cpus: int | None = None, first_job_id: int = 1) -> Slurm:
    """munged + slurmctld + slurmd with one partition `debug` on this host; waits until idle. Its job
    ids count from ``first_job_id``, as every fresh cluster's (and a controller's after a state reset)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "state").mkdir(mode=0o700, exist_ok=True)
    # The daemons' sockets (munge's; slurmstepd's SPOOL/vm_JOBID.STEP; pmix's under TmpFS) must
    # fit a socket path's 108 bytes, which a test's long tmp_path and an 8-digit job id do not
    sockets = Path(tempfile.mkdtemp(prefix="kit-slurm-", dir="/tmp"))
    for d in ("munge", "spool", "tmp"):  # tmp: TmpFS, where srun --mpi=pmix makes per-step dirs
        (sockets / d).mkdir(mode=0o700)
    key = sockets / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    sock = sockets / "munge" / "munge.socket"
    node = socket.gethostname().split(".")[0]
    cpus = cpus or os.cpu_count() or 1
    conf = root / "slurm.conf"
    conf.write_text(
        f"ClusterName=kittest\nSlurmctldHost={node}(127.0.0.1)\nSlurmUser=root\nFirstJobId={first_job_id}\n"
        f"SlurmctldPort={free_port()}\nSlurmdPort={free_port()}\n"
        f"AuthType=auth/munge\nCredType=cred/munge\nAuthInfo=socket={sock}\n"
        f"StateSaveLocation={root / 'state'}\nSlurmdSpoolDir={sockets / 'spool'}\nTmpFS={sockets / 'tmp'}\n"
        f"SlurmctldPidFile={root / 'slurmctld.pid'}\nSlurmdPidFile={root / 'slurmd.pid'}\n"
        f"SlurmctldLogFile={root / 'slurmctld.log'}\nSlurmdLogFile={root / 'slurmd.log'}\n"
        "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nJobAcctGatherType=jobacct_gather/none\n"
        "AccountingStorageType=accounting_storage/none\nSelectType=select/cons_tres\n"
        "SelectTypeParameters=CR_Core\nMpiDefault=none\nReturnToService=2\n"
        f"NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN\n"
        f"PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4\n"
    )
    cluster = Slurm(root, conf, node, cpus, sockets)
    env = dict(os.environ, SLURM_CONF=str(conf))
    starts = [
        (
            [
                _sbin("munged"),
                f"--socket={sock}",
                f"--key-file={key}",
                f"--pid-file={sockets / 'munge' / 'munged.pid'}",
                f"--log-file={root / 'munged.log'}",
                f"--seed-file={sockets / 'munge' / 'seed'}",
                "--force",
            ],
            sockets / "munge" / "munged.pid",
        ),
        ([_sbin("slurmctld"), "-c", "-f", str(conf)], root / "slurmctld.pid"),
        ([_sbin("slurmd"), "-f", str(conf)], root / "slurmd.pid"),
    ]
    for argv, pid_file in starts:
        done = subprocess.run(argv, env=env, capture_output=True, text=True)
        if done.returncode:
            cluster.stop()
            raise RuntimeError(f"{argv[0]} did not start: {done.stderr.strip()}\n{cluster.log()}")
        cluster.pids.append(pid_file)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        state = subprocess.run(["sinfo", "-h", "-o", "%t"], env=env, capture_output=True, text=True)
        if state.stdout.strip() == "idle":
            return cluster
        time.sleep(0.3)
    cluster.stop()
    raise RuntimeError(f"the test Slurm node did not become idle:\n{cluster.log()}")
