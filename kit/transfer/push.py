"""`kit transfer push`: resumable, verified upload of an image to the site, optional install.

Control goes through Fabric (host keys, the dry-run probe, sibling files, the install); the
bulk bytes go through the system's ssh(1) into the remote receiver, because OpenSSH's C
crypto is about twice as fast as paramiko's single SFTP stream (docs/benchmarks.md). Both
use the same resolved endpoint (kit.transfer.ssh).

The upload lands in `.NAME.part` next to a `.NAME.part.state` naming the image's sha256,
size and chunk size. On the next push both sides hash the complete chunks of the part and
only chunks that differ or are missing are sent. The receiver hashes the whole file in order
as it writes it (with O_DIRECT where the filesystem allows: no page cache to fill and flush),
makes it durable, and renames it into place only if the sha256 matches.
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import shutil
import stat
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Callable

import fabric
import paramiko

from kit.errors import KitError
from kit.excerpt import one_line
from kit.image_names import (
    MANIFEST,
    PAIR,
    SHA256,
    SIDECARS,
    SIF,
    is_pair_document,
    is_sha256_file,
    load_pair_document,
    sha256_file,
    sidecar,
)
from kit.interrupt import reap
from kit.runtime import runtime_of
from kit.site import load_site
from kit.transfer import remote
from kit.transfer.local_image import LocalImage, chunk_sha256, open_local_image, recorded_sha256
from kit.transfer.remote_common import (
    EXIT_MISMATCH,
    EXIT_NOSPACE,
    EXIT_REFUSED,
    EXIT_USAGE,
    HASHED_MARK,
    PROBE_MARK,
)
from kit.transfer.ssh import Endpoint, connect, site_endpoint, ssh_argv
from kit.transfer.watchdog import Watchdog

CHUNK = 64 << 20
BLOCK = 4 << 20
SPACE_MARGIN = 1 << 20
# s: the remote ch-convert is stopped after this long without reading or writing
INSTALL_STALL = 900
INSTALL_WAIT = 300  # s: how long an install waits for another one in the same image dir
# s: the whole remote install (hash, wait, ch-convert); --install-timeout
INSTALL_TIMEOUT = 4 * 3600
PROBE_TIMEOUT = 1800  # s: the dry-run probe's own work, plus its re-hash at REHASH_FLOOR
REHASH_FLOOR = 20e6  # B/s: slower than any working filesystem re-reads a partial upload
BANNER_LINES = 1000  # lines a login shell may print before the receiver's probe line
STREAM_STALL = 900  # s in which no byte moves and the remote re-hash reports no progress
OUTPUT_MAX = 1 << 16  # bytes of the receiver's stdout/stderr kept (its answer is the last line)
SFTP_TIMEOUT = 300  # s one SFTP request may take (siblings are small files)
# bytes of a remote sidecar read (kit.image.target)
SIDECAR_MAX = {
    SHA256: 4096,
    PAIR: 1 << 20,
    MANIFEST: 64 << 20,
}

# What the remote answers must hold (remote.parse checks the types)
PROBE = {
    "dir": str,
    "free": int,
    "final_matches": bool,
    "part_size": int,
    "chunk_hashes": list,
    "missing": list,
}
PUSHED = {"path": str, "sha256": str}
INSTALLED = {"target": str, "current": str, "prune": list}

# the fixes of the receiver's failures where the upload directory is --remote-dir's (remote.FIXES)
UPLOAD_FIXES = {
    EXIT_NOSPACE: "free space there (df -h on that host) or pass --remote-dir DIR with room, "
    "then run the same command again: it resumes",
    EXIT_USAGE: "check that the login user can write there (ls -ld on that host), "
    "or pass --remote-dir DIR",
    EXIT_REFUSED: "move what the line names aside on that host (the kit leaves it alone), "
    "or pass --remote-dir DIR",
}
CHECKING = "checking the upload directory"  # what the probe does, in its errors
# the installer's, in container.image_dir: the verified upload stays where it is
INSTALL_FIXES = {
    EXIT_NOSPACE: "free space in container.image_dir on that host (df -h there), "
    "or keep fewer versions (--keep N), then run the same command again: nothing is sent twice",
    EXIT_USAGE: "check that the login user can write container.image_dir on that host, "
    "then run the same command again",
    EXIT_MISMATCH: "run the same command again: it sends the image again and installs that",
}
RESUME = "run the same command again: it resumes from the last verified chunk"


@dataclass
class PushReport:
    """What a push did (or, with dry_run, would do)."""

    endpoint: str
    image: str
    remote_path: str
    size: int
    sha256: str
    bytes_sent: int = 0
    bytes_skipped: int = 0
    resent_chunks: list[int] = field(default_factory=list)
    siblings: list[str] = field(default_factory=list)
    direct_io: bool | None = None  # how the receiver wrote the bytes (None: nothing written)
    # the image's pair vs this site; sidecars unchecked
    pair_warnings: list[str] = field(default_factory=list)
    installed: str | None = None
    current: str | None = None
    pruned: list[str] = field(default_factory=list)
    # an earlier image's sidecars removed beside this one
    stale: list[str] = field(default_factory=list)
    dry_run: bool = False
    seconds: float = 0.0

    def lines(self) -> list[str]:
        verb = "would" if self.dry_run else "did"
        out = [
            (
                f"{self.image} ({self.size} bytes, "
                f"sha256 {self.sha256[:16]}...) -> {self.endpoint}:{self.remote_path}"
            ),
            f"{verb} send {self.bytes_sent} bytes; {self.bytes_skipped} bytes already there and verified",
        ]
        if self.resent_chunks:
            out.append(f"chunks re-sent after a failed check: {self.resent_chunks}")
        if self.siblings:
            out.append(f"{verb} copy alongside: {', '.join(self.siblings)}")
        if self.stale:
            out.append(f"removed an earlier image's {', '.join(self.stale)} (this image has none)")
        out += [f"warning: {w}" for w in self.pair_warnings]
        if self.installed:
            out.append(f"{verb} install {self.installed} and point {self.current} at it")
        if self.pruned:
            out.append(f"{verb} prune old versions: {', '.join(self.pruned)}")
        if not self.dry_run and self.seconds:
            rate = self.bytes_sent / self.seconds / 1e6
            how = (
                ""
                if self.direct_io is None
                else ", written with O_DIRECT"
                if self.direct_io
                else ", buffered writes"
            )
            out.append(f"took {self.seconds:.1f} s ({rate:.0f} MB/s sent{how})")
        return out


class StreamLost(KitError):
    """The ssh data session ended early; `answered` tells whether the receiver ever spoke."""

    def __init__(self, answered: bool, what: str, *, fix: str, where: str):
        super().__init__(what, fix=fix, where=where)
        self.answered = answered


@dataclass
class _Plan:
    keep: set[int]  # chunks of the remote part that match ours: not sent again
    resent: list[int]  # chunks of the remote part that did not match
    kept_bytes: int
    skip: bool  # the final file is already there and verified
    missing: list[str]  # host paths the pair binds that the site does not have


def _plan(probe: dict, img: LocalImage, chunk: int, where: str) -> _Plan:
    """Compare the remote chunk hashes with ours; refuse early if the space is not there
    (``where``: HOST:DIR of the upload)."""
    size = img.size
    if len(probe["chunk_hashes"]) > (size + chunk - 1) // chunk or not all(
        isinstance(x, str) for x in probe["chunk_hashes"] + probe["missing"]
    ):
        raise KitError(
            "the remote side answered a malformed probe; nothing was sent",
            fix=remote.ODD_ANSWER_FIX,
            where=where,
        )
    if probe["final_matches"]:
        return _Plan(set(range((size + chunk - 1) // chunk)), [], size, True, probe["missing"])
    theirs = probe["chunk_hashes"]
    ours = chunk_sha256(img.path, chunk, len(theirs))
    keep = {i for i, (a, b) in enumerate(zip(ours, theirs)) if a == b}
    need = size - min(probe["part_size"], size) + SPACE_MARGIN
    if probe["free"] < need:
        raise KitError(
            f"not enough space: {probe['free']} bytes free, the upload needs {need}; "
            "nothing was changed",
            fix=UPLOAD_FIXES[EXIT_NOSPACE],
            where=where,
        )
    kept = sum(min(chunk, size - i * chunk) for i in keep)
    return _Plan(
        keep, [i for i in range(len(theirs)) if i not in keep], kept, False, probe["missing"]
    )


def _stream(
    ep: Endpoint,
    img: LocalImage,
    directory: str,
    sha: str,
    chunk: int,
    direct_io: bool,
    paths: list[str],
    progress: Callable[[int], None] | None,
    stall: float,
) -> tuple[dict, _Plan, int]:
    """One ssh session: the receiver reports what it has, we answer with the plan and stream
    the chunks it lacks, then COMMIT. Returns (receiver's answer, plan, bytes sent). The
    watchdog ends it after `stall` s in which no byte moved and the receiver's re-hash of the
    kept part (before its probe line, and again as it reads kept chunks) reported no progress."""
    where = f"{ep.hostname}:{directory}"
    cmd = remote.command(
        "push", directory, img.path.name, img.size, sha, chunk, "1" if direct_io else "0", *paths
    )
    proc = subprocess.Popen(
        ssh_argv(ep) + [cmd], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    to_ssh, from_ssh, ssh_err = _pipes(proc)
    try:  # a 1 MiB pipe into ssh: fewer wake-ups per byte on a busy machine
        fcntl.fcntl(to_ssh.fileno(), fcntl.F_SETPIPE_SZ, 1 << 20)
    except OSError:
        pass
    dog = Watchdog(proc, stall)
    err: list[bytes] = []
    drain = threading.Thread(target=lambda: err.append(_drain(ssh_err, dog.tick)), daemon=True)
    drain.start()
    sent, broken, plan = 0, False, None
    try:
        first, lines = from_ssh.readline(1 << 20), 1
        while first and not first.startswith(PROBE_MARK.encode()) and lines < BANNER_LINES:
            first, lines = from_ssh.readline(1 << 20), lines + 1  # what a login shell printed
        dog.tick()
        if first.startswith(PROBE_MARK.encode()):
            probe = remote.parse(
                first[len(PROBE_MARK) :].decode(errors="replace"),
                "",
                0,
                what=CHECKING,
                where=where,
                schema=PROBE,
            )
            plan = _plan(probe, img, chunk, where)
            to_ssh.write(
                b"SKIP\n"
                if plan.skip
                else f"KEEP {','.join(map(str, sorted(plan.keep)))}\n".encode()
            )
            to_ssh.flush()
            if not plan.skip:
                sent = _send_chunks(to_ssh, img, chunk, plan.keep, _both(progress, dog.tick))
                to_ssh.write(f"COMMIT {sha}\n".encode())
        to_ssh.close()
    except BrokenPipeError:
        broken = True
    except BaseException:
        proc.kill()
        reap(proc)
        dog.stop()
        raise
    stdout = _tail(from_ssh).decode(errors="replace")
    code = proc.wait()
    dog.stop()
    drain.join()
    stderr = b"".join(err).decode(errors="replace")
    if dog.fired:
        raise StreamLost(
            plan is not None,
            f"the push to {ep} moved no byte for {stall:g} s after {sent} bytes, "
            "and the remote side reported no re-hash progress (a hung filesystem or receiver?); "
            "it was stopped",
            fix=f"check that host's filesystem, then {RESUME} (--stall SECONDS waits longer)",
            where=where,
        )
    if code == 255 or (broken and "KIT-ERROR" not in stderr):
        raise StreamLost(
            plan is not None,
            f"the connection to {ep} was lost after {sent} bytes of this push: "
            f"{one_line(stderr, tail=True) or 'no message'}",
            fix=RESUME,
            where=where,
        )
    upload = f"upload of {img.path.name}"
    try:
        answer = remote.parse(
            stdout, stderr, code, what=upload, where=where, schema=PUSHED, fixes=UPLOAD_FIXES
        )
    except remote.RemoteError as exc:
        if exc.code == EXIT_MISMATCH and img.sha_file:
            raise KitError(
                f"does not match {img.sha_file.name} ({exc.where}: {exc.what}): "
                "the image changed or is damaged; nothing was installed",
                fix=f"re-run kit image convert to write the image and its {SHA256} again",
                where=str(img.path),
            ) from exc
        raise
    if plan is None:  # an answer without the probe line that the plan answers
        raise KitError(
            f"{upload}: the receiver answered without first saying what it has; "
            "nothing it reported was checked",
            fix="run the same command again",
            where=where,
        )
    return answer, plan, sent


def _pipes(proc: subprocess.Popen) -> tuple[IO[bytes], IO[bytes], IO[bytes]]:
    """ssh's stdin, stdout and stderr: pipes, as Popen was asked (its types allow None)."""
    if proc.stdin is None or proc.stdout is None or proc.stderr is None:
        raise RuntimeError("ssh started without its pipes")
    return proc.stdin, proc.stdout, proc.stderr


def _tail(stream) -> bytes:
    """Everything `stream` says until it ends, keeping only the last OUTPUT_MAX bytes."""
    kept = b""
    while data := stream.read1(OUTPUT_MAX):
        kept = (kept + data)[-OUTPUT_MAX:]
    return kept


def _drain(stream, alive: Callable[[], None]) -> bytes:
    """The receiver's stderr until it ends: its re-hash progress lines call `alive` (they are
    not kept); of the rest, the last OUTPUT_MAX bytes are kept (its error line is the last)."""
    kept, mark = b"", HASHED_MARK.encode()
    while line := stream.readline(OUTPUT_MAX):
        if line.startswith(mark):
            alive()
        else:
            kept = (kept + line)[-OUTPUT_MAX:]
    return kept


def _both(
    first: Callable[[int], None] | None, second: Callable[[int], None]
) -> Callable[[int], None]:
    def call(n: int) -> None:
        if first:
            first(n)
        second(n)

    return call


def _send_chunks(
    to_ssh: IO[bytes],
    img: LocalImage,
    chunk: int,
    keep: set[int],
    progress: Callable[[int], None] | None,
) -> int:
    """sendfile() the chunks not in `keep`, in order, into ssh's stdin."""
    size, sent = img.size, 0
    pipe = to_ssh.fileno()
    with open(img.path, "rb") as fh:
        for index in range((size + chunk - 1) // chunk):
            if index in keep:
                continue
            offset, end = index * chunk, min(size, (index + 1) * chunk)
            while offset < end:
                n = os.sendfile(pipe, fh.fileno(), offset, min(BLOCK, end - offset))
                if n == 0:
                    raise KitError(
                        "shrank while being sent",
                        fix="leave the image unchanged during a push, "
                        "then run the same command again",
                        where=str(img.path),
                    )
                offset += n
                sent += n
                if progress:
                    progress(n)
    return sent


def _read_pair(site, img: LocalImage) -> tuple[list[str], list[str]]:
    """(host paths the image's pair file binds, warnings about the pair file itself). The
    paths go to the receiver's probe: a wrong host_mpi.prefix would otherwise only show when
    the job's ch-run cannot bind it."""
    path = next((p for p in img.siblings if p.name.endswith(PAIR)), None)
    if path is None:
        return [], []
    try:
        doc = load_pair_document(path, "re-run kit image convert --site", missing="gone").value
        binds = doc.get("binds") or []
        if not (isinstance(binds, list) and all(isinstance(b, str) for b in binds)):
            raise ValueError("binds is not a list of SRC:DST strings")
        sources = [b.split(":", 1)[0] for b in binds]
    except (KitError, ValueError) as exc:  # advisory: a warning
        reason = " ".join(str(exc).split())[:200]
        return [], [
            f"{path.name} is not a pair file kit mpi pair wrote ({reason}); re-run kit image convert --site"
        ]
    if doc.get("site") != site.name:
        return sources, [
            f"{path.name} pairs the image with site {doc.get('site')!r}, not {site.name!r}; "
            f"re-run kit image convert --site {site.name}"
        ]
    return sources, []


def _missing_warning(missing: list[str], host: str) -> list[str]:
    return (
        [
            f"the host paths the pair binds are missing on {host}: {', '.join(missing)}; "
            "fix host_mpi.prefix/library_dirs (or container.binds) in the site config, "
            "then re-pair (the transfer host may not see every compute-node path)"
        ]
        if missing
        else []
    )


def _put_siblings(
    conn: fabric.Connection, img: LocalImage, directory: str, sha: str
) -> tuple[list[str], list[str], list[str]]:
    """Small files go by SFTP to a new dot-temp name of this push (created exclusively: a link
    planted in a shared directory is not followed), then are renamed into place; a final name
    held by anything but a regular file is refused. Returns (copied, stale removed, warnings): a
    sidecar of an earlier image pushed under this name that this image lacks (its .sha256 would
    name the wrong digest, its pair another image's MPI) is removed if the kit wrote it, else
    refused. An image with no siblings needs no SFTP: where there is none (a login that prints on
    every session), that check is a warning."""
    names, stale, sftp = [], [], None
    try:
        try:
            sftp = _sftp(conn)
        except (OSError, EOFError, paramiko.SSHException, paramiko.SFTPError) as exc:
            if img.siblings:
                raise
            return (
                [],
                [],
                [
                    f"could not look for an earlier image's sidecars beside {img.path.name}: "
                    f"SFTP to {conn.host} failed ({one_line(str(exc), 200) or type(exc).__name__}); "
                    f"if another image under this name left a {SHA256} or {PAIR} there, "
                    "it does not describe this one: check that directory"
                ],
            )
        stale = _drop_stale_sidecars(sftp, conn.host, img, directory, sha)
        for sib in img.siblings:
            tmp, final = (
                f"{directory}/.{sib.name}.{secrets.token_hex(6)}.tmp",
                f"{directory}/{sib.name}",
            )
            try:
                mode = sftp.lstat(final).st_mode
            except FileNotFoundError:
                mode = None
            if mode is not None and not stat.S_ISREG(mode):
                raise KitError(
                    "exists and is not a regular file (a symlink?); "
                    "kit transfer does not replace it",
                    fix="remove it on that host, or pass --remote-dir DIR",
                    where=f"{conn.host}:{final}",
                )
            with open(sib, "rb") as src, sftp.open(tmp, "wx") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            sftp.posix_rename(tmp, final)
            names.append(sib.name)
    except (OSError, EOFError, paramiko.SSHException, paramiko.SFTPError) as exc:
        raise KitError(
            f"copying {img.path.name}'s sibling files failed: "
            f"{one_line(exc) or type(exc).__name__}",
            fix="run the same command again (the upload is kept: nothing is sent twice)",
            where=f"{conn.host}:{directory}",
        ) from exc
    finally:
        if sftp is not None:
            sftp.close()
    return names, stale, []


def _drop_stale_sidecars(
    sftp: paramiko.SFTPClient, host: str, img: LocalImage, directory: str, sha: str
) -> list[str]:
    """Remove the remote sidecars (either naming form) this image has none of, if the kit wrote
    them.
    """
    have = {p.name for p in img.siblings}
    removed = []
    for suffix in SIDECARS:
        for name in dict.fromkeys((sidecar(img.path, suffix).name, img.stem + suffix)):
            if name in have:
                continue
            path = f"{directory}/{name}"
            try:
                mode = sftp.lstat(path).st_mode
            except FileNotFoundError:
                continue
            data = None
            if stat.S_ISREG(mode):
                with sftp.open(path, "rb") as fh:
                    data = fh.read(SIDECAR_MAX[suffix] + 1)
            if suffix == SHA256 and data is not None and data.split()[:1] == [sha.encode()]:
                continue  # a checksum of this very image (e.g. sha256sum's): right, so kept
            if data is None or not _kit_sidecar(data, suffix, img.path.name, path):
                raise KitError(
                    f"{host}:{path} is beside the image but was not written by kit for it, "
                    f"and {img.path.name} has no {suffix} to replace it; it is left alone",
                    fix="remove it or use another --remote-dir (nothing was installed)",
                )
            sftp.remove(path)
            removed.append(name)
    return removed


def _kit_sidecar(data: bytes, suffix: str, image: str, path: str) -> bool:
    """Whether bytes read (bounded) are a sidecar `kit image convert` writes: the same test as
    kit.image.target's for a local OUT."""
    if len(data) > SIDECAR_MAX[suffix]:
        return False
    if suffix == SHA256:
        return is_sha256_file(data, image)
    if suffix == PAIR:
        return is_pair_document(data, path)
    try:
        doc = json.loads(data)
    except ValueError:
        return False
    return isinstance(doc, dict) and doc.get("tool") == "kit image convert"


def _sftp(conn: fabric.Connection) -> paramiko.SFTPClient:
    """An SFTP session on the control connection whose every wait gives up after SFTP_TIMEOUT s:
    a server that stops answering ends the push with an error instead of holding it forever."""
    chan = conn.client.get_transport().open_session(timeout=SFTP_TIMEOUT)
    chan.settimeout(SFTP_TIMEOUT)
    chan.invoke_subsystem("sftp")
    return paramiko.SFTPClient(chan)


def push(
    image: str | Path,
    site,
    *,
    host: str | None = None,
    user: str | None = None,
    port: int | None = None,
    remote_dir: str | None = None,
    install: bool = False,
    keep: int | None = None,
    accept_new_host_key: bool = False,
    dry_run: bool = False,
    progress: Callable[[int], None] | None = None,
    chunk_size: int = CHUNK,
    ssh_config: Path | None = None,
    install_as: str = "dir",
    direct_io: bool | None = None,
    stall: float | None = None,
    install_timeout: float | None = None,
) -> PushReport:
    """Upload `image` (+ its siblings) to the site's transfer host; resume, verify, install
    (as an unpacked directory, or with install_as="squash" a SquashFS file; a .sqfs or a .sif as
    it is).

    `progress(n)` is called with each block of bytes sent (the CLI draws a bar with it).
    `direct_io` (default: the site's transfer.direct_io) lets the receiver bypass the page cache.
    `stall` (default STREAM_STALL s): the data stream ends after this long with nothing moving;
    `install_timeout` (default INSTALL_TIMEOUT s): the most the remote install may take.
    """
    started = time.monotonic()
    site = load_site(site)
    img = open_local_image(image)
    t = site.transfer
    keep_n = t.keep_versions if keep is None else keep
    if keep_n < 0:
        raise KitError(
            f"--keep {keep_n}: the number of previous versions to keep must be >= 0",
            fix="give --keep 0 or more (its default: transfer.keep_versions in the site config)",
        )
    if install_as not in ("dir", "squash"):
        raise KitError(
            f"install format {install_as!r} is neither dir nor squash",
            fix="give --install-as dir or --install-as squash",
        )
    # what the site's runtime runs decides how it is installed (before any byte is sent)
    install_fmt = install_format(site, install_as, img.path.name) if install else ""
    stall = STREAM_STALL if stall is None else stall
    install_timeout = INSTALL_TIMEOUT if install_timeout is None else install_timeout
    if stall <= 0 or install_timeout <= 0:
        raise KitError(
            f"--stall {stall:g} / --install-timeout {install_timeout:g}: not a number of seconds > 0",
            fix="give each a number of seconds > 0, or leave it out for its default",
        )
    ep = site_endpoint(t, host=host, user=user, port=port, ssh_config=ssh_config)
    directory = remote.remote_path(remote_dir or t.image_dir)

    # With IMAGE.sha256 the file is not read twice: the receiver hashes every byte it gets
    # and refuses the rename unless the whole file matches the recorded digest.
    sha = recorded_sha256(img) or sha256_file(img.path)
    pair_paths, pair_warnings = _read_pair(site, img)
    pool = ThreadPoolExecutor(1)
    opening = pool.submit(connect, ep, accept_new_host_key=accept_new_host_key)
    try:
        if dry_run or accept_new_host_key:
            opening.result()  # settle the host key before ssh(1) checks the same known_hosts
        report = PushReport(
            endpoint=str(ep),
            image=str(img.path),
            size=img.size,
            sha256=sha,
            remote_path="",
            dry_run=dry_run,
        )
        if dry_run:
            where = f"{ep.hostname}:{directory}"
            probe = remote.run(
                opening.result(),
                "probe",
                directory,
                img.path.name,
                img.size,
                sha,
                chunk_size,
                *pair_paths,
                what=CHECKING,
                where=where,
                schema=PROBE,
                timeout=round(PROBE_TIMEOUT + img.size / REHASH_FLOOR),
                fixes=UPLOAD_FIXES,
            )
            plan = _plan(probe, img, chunk_size, where)
            report.remote_path = f"{probe['dir']}/{img.path.name}"
            report.siblings = [s.name for s in img.siblings]
            report.bytes_sent = img.size - plan.kept_bytes
        else:  # the data stream starts while Fabric is still logging in
            try:
                direct = t.direct_io if direct_io is None else direct_io
                answer, plan, report.bytes_sent = _stream(
                    ep, img, directory, sha, chunk_size, direct, pair_paths, progress, stall
                )
            except StreamLost as exc:
                # ssh(1) could not log in: Fabric's reason (host key, auth) is clearer
                if not exc.answered:
                    opening.result()
                raise
            report.remote_path, report.direct_io = answer["path"], answer.get("direct_io")
            report.siblings, report.stale, unchecked = _put_siblings(
                opening.result(), img, directory, sha
            )
            pair_warnings += unchecked
        report.bytes_skipped, report.resent_chunks = plan.kept_bytes, plan.resent
        report.pair_warnings = pair_warnings + _missing_warning(plan.missing, ep.hostname)
        if install:
            _install(
                opening.result(), site, img, report, keep_n, dry_run, install_fmt, install_timeout
            )
    finally:
        pool.shutdown(wait=True)
        if opening.exception() is None:
            opening.result().close()
    report.seconds = time.monotonic() - started
    return report


def install_format(site, install_as: str, source: str) -> str:
    """The remote installer's FMT for ``source`` on the site's runtime (kit.runtime). A SIF only
    where the runtime installs it as one (Apptainer): Charliecloud and udocker do not run it."""
    fmt = runtime_of(site).install_format(site, install_as, source)
    if source.endswith(SIF) and fmt != "sif":
        raise KitError(
            f"site {site.name}: {source} is a SIF, "
            f"which its runtime {site.container.runtime} does not run; nothing was sent",
            fix="convert the image for this site: "
            f"kit image convert SRC OUT.sqfs --site {site.name} (or OUT.tar.gz)",
        )
    return fmt


def _install(
    conn: fabric.Connection,
    site,
    img: LocalImage,
    report: PushReport,
    keep_n: int,
    dry_run: bool,
    install_fmt: str,
    timeout: float,
) -> None:
    """Unpack on the site as NAME@<sha12> (``install_fmt``: the runtime's, kit.runtime: with the
    site's ch-convert, or by the installer itself), switch NAME.current, prune.
    After `timeout` s the session is closed; the installer sees its stdin end (WATCH 1), stops
    ch-convert and removes its work dir: NAME.current still names the previous version."""
    imgdir = remote.remote_path(site.container.image_dir)
    answer = remote.run(
        conn,
        "install",
        report.remote_path,
        imgdir,
        img.stem,
        report.sha256[:12],
        keep_n,
        "1" if dry_run else "0",
        install_fmt,
        INSTALL_STALL,
        INSTALL_WAIT,
        "1",
        what=f"installing {img.stem}",
        where=f"{conn.host}:{imgdir}",
        schema=INSTALLED,
        timeout=timeout,
        on_timeout=f"the install (sha256 check, ch-convert, switch of {img.stem}.current) "
        f"was stopped there, {img.stem}.current is unchanged",
        timeout_fix="check that host (load, a hung filesystem, a stuck ch-convert), "
        "or allow more with --install-timeout SECONDS, "
        "then run the same command again (the upload is kept: nothing is sent twice)",
        fixes=INSTALL_FIXES,
    )
    report.installed, report.current, report.pruned = (
        answer["target"],
        answer["current"],
        answer["prune"],
    )
