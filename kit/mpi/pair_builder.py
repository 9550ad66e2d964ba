"""Build and write IMAGE.pair.yaml: which host MPI replaces the image's, and how to bind it."""

from __future__ import annotations

import contextlib
import errno
import os
import posixpath
import stat
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from kit import interrupt
from kit.atomic import exchange_if, fsync_dir, rename_noreplace
from kit.errors import KitError
from kit.image_names import PAIR_FORMAT, is_pair_document, pair_path
from kit.mpi.abi import DEFAULT_SONAME, AbiId, Verdict, advice_for, decide
from kit.mpi.discover import ImageMPI, file_version_of, inspect_root
from kit.mpi.imagefs import open_image_tree
from kit.mpi.launch import DEFAULT_COMMAND, FIX_MISSING, Launch, translate
from kit.mpi.openmpi_launch import openmpi_binds
from kit.mpi.runtimes import runtime_links, ucx_module_env
from kit.rootfs import Root, RootError
from kit.runtime.imageenv import environment_in
from kit.site import Site, load_site
from kit.site.model import FAMILY_OF_VENDOR

COMPAT_DIR = "compat"  # in-image dir (inside mpi_target) of alias links; never a mount point
PAIR_MAX = 1 << 20  # bytes a pair file the kit wrote may have (kit.image.target's bound)


@dataclass
class Pair:
    """The decided pair; `document()` is what goes into IMAGE.pair.yaml."""

    site: Site
    image: str
    host: AbiId
    container: AbiId
    found: ImageMPI
    verdict: Verdict
    binds: list[tuple[str, str]]
    env_set: dict[str, str]
    env_prepend: dict[str, list[str]]
    links: dict[str, str]
    missing: list[str] = field(default_factory=list)  # mount points / links the image lacks
    site_image: str | None = None  # where the image will be on the site, if not at `image`
    image_env: bool = True  # the image has /ch/environment (its ENV) for ch-run to import
    # IMAGE as make_pair read it (write_pair: still the same?)
    image_id: tuple[int, ...] | None = None
    # the image's ch/environment as read with the pair (None: not read)
    environment: dict[str, str] | None = None

    @property
    def warnings(self) -> list[str]:
        """The verdict's warnings, and what the image still lacks."""
        lacks = (
            [f"the image lacks {', '.join(self.missing)}: {FIX_MISSING}"] if self.missing else []
        )
        return self.verdict.warnings + lacks

    @property
    def mount_points(self) -> list[str]:
        return [dst for _src, dst in self.binds]

    def ch_run_args(self, image: str | None = None, join: list[str] | None = None) -> list[str]:
        """`ch-run` with the pair's binds and environment (values expanded by ch-run)."""
        return self.ch_run_options(join) + [image or self.image, "--"]

    @property
    def launch(self) -> Launch:
        return Launch(
            site=self.site,
            binds=self.binds,
            env_set=self.env_set,
            env_prepend=self.env_prepend,
            image_env=self.image_env,
            environment=self.environment,
        )

    def ch_run_options(self, join: list[str] | None = None) -> list[str]:
        return self.launch.ch_run_options(join)

    def launch_line(self, command: str = DEFAULT_COMMAND, **how) -> str:
        return self.launch.line(self.site_image or self.image, command, **how)

    def document(self) -> dict:
        v = self.verdict
        status = (
            "refused" if not v.ok else ("accepted with warnings" if self.warnings else "accepted")
        )
        primary = self.found.primary
        return {
            "kit_pair": PAIR_FORMAT,
            "image": self.image,
            "site_image": self.site_image or self.image,
            "site": self.site.name,
            "host_mpi": _side(self.host)
            | {"prefix": self.site.host_mpi.prefix, "library_dirs": self.site.host_mpi.lib_dirs},
            "container_mpi": _side(self.container)
            | {
                "library": primary.path if primary else None,
                "real_file": primary.real_path if primary else None,
                "found_via": self.found.source,
                "used_by": sorted(self.found.users),
            },
            "verdict": {
                "ok": v.ok,
                "mode": v.mode,
                "status": status,
                "reasons": v.reasons,
                "warnings": self.warnings,
            },
            "binds": [f"{src}:{dst}" for src, dst in self.binds],
            "env": {
                "set": dict(self.env_set),
                "prepend": {k: list(d) for k, d in self.env_prepend.items()},
            },
            "mount_points": self.mount_points,
            "links": dict(self.links),
            "image_ready": {"ok": not self.missing, "missing": list(self.missing)},
            "image_environment": self.image_env,
            "launch": self._launch_shown(),
        }

    def _launch_shown(self) -> str | None:
        """The launch line, or None where the runtime needs what is not here yet (udocker: the
        image's environment, before a conversion has put the image in place)."""
        try:
            return self.launch_line()
        except KitError:
            return None


def _side(abi: AbiId) -> dict:
    return {
        "vendor": abi.vendor,
        "version": abi.version,
        "abi_family": abi.family,
        "soname": abi.soname,
        "abi_version": abi.file_version,
        "major": abi.major,
        "minor": abi.minor,
    }


def host_abi(site: Site) -> AbiId:
    """The host MPI's ABI from the site config; missing minor is read from the host if present."""
    mpi = site.host_mpi
    family = FAMILY_OF_VENDOR[mpi.vendor]
    soname = mpi.soname or DEFAULT_SONAME[family]
    version = mpi.library_version
    if version is None:
        for directory in mpi.lib_dirs:
            path = Path(directory) / soname
            if path.is_file():
                version = file_version_of(path.resolve(), soname)
                break
    return AbiId(mpi.vendor, mpi.version, soname, version)


def image_abi(found: ImageMPI) -> AbiId:
    """The image's MPI; KitError with the fix when there is none or it is linked statically."""
    lib = found.primary
    if lib is None:
        if found.static:
            raise KitError(
                f"{found.image}: MPI is linked statically into {', '.join(found.static[:3])}: "
                "a host MPI cannot be bound in",
                fix="rebuild them against a shared MPI library (libmpi.so.12 for an MPICH-ABI "
                "host)",
            )
        raise KitError(
            f"{found.image}: "
            f"no MPI library found (searched the image's {found.source} for libmpi.so.N / libmpich.so.N)",
            fix="install the MPI the site's ABI needs into the image",
        )
    if lib.vendor is None:
        raise KitError(
            f"{found.image}: {lib.real_path} has MPI symbols but no known vendor banner",
            fix="install MPICH, Intel MPI, Open MPI or MVAPICH2 into the image",
        )
    return AbiId(lib.vendor, lib.mpi_version, lib.soname or lib.name, lib.file_version)


def make_pair(site: Site | str | os.PathLike, image: str | os.PathLike, mode: str = "full") -> Pair:
    """Decide the pair for ``image`` at ``site``; raises KitError if they cannot pair."""
    site = load_site(site)
    seen = _identity(image)
    with open_image_tree(image) as tree:
        pair = pair_from_root(site, tree.root, str(image), mode=mode, notes=tree.notes)
    if _identity(image) != seen:
        raise _replaced(image)
    pair.image_id = seen
    return pair


def _identity(image: str | os.PathLike) -> tuple[int, ...] | None:
    """What tells a replaced IMAGE from the one read: device, inode, size and mtime (through a
    link such as NAME.current, of what it points at)."""
    try:
        st = os.stat(image)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def _replaced(image: str | os.PathLike) -> KitError:
    return KitError(
        "was replaced or changed while it was being paired; no pair file was written",
        where=str(image),
        fix="run kit mpi pair again once it is in place",
    )


def pair_from_root(
    site: Site, root: Path, image: str, *, mode: str = "full", notes: Sequence[str] = ()
) -> Pair:
    """The pair for the image tree at ``root`` (all of it, or at least its MPI files)."""
    found = inspect_root(root, image, notes)
    host, container = host_abi(site), image_abi(found)
    verdict = decide(host, container, mode)
    if not verdict.ok:
        raise KitError(
            f"{image}: "
            f"cannot bind {host.describe()} from site {site.name} over the image's {container.describe()}: "
            f"{', '.join(r for r in verdict.reasons if 'same' not in r)}",
            fix=f"put {advice_for(host)} into the image instead",
        )
    target = site.container.mpi_target.rstrip("/")
    lib_dirs = site.host_mpi.lib_dirs
    binds = [(d, f"{target}/lib{i}") for i, d in enumerate(lib_dirs)]
    extra_env: dict[str, str] = {}
    if host.family == "openmpi":  # its components and help files too: none of the image's may load
        more, extra_env = openmpi_binds(site.host_mpi.ompi, target)
        binds += more
    binds += [(src, dst) for src, _, dst in (b.partition(":") for b in site.container.binds)]
    host_lib_dir = next(
        (dst for src, dst in binds[: len(lib_dirs)] if (Path(src) / host.soname).exists()),
        binds[0][1],
    )
    links = {
        f"{target}/{COMPAT_DIR}/{name}": f"{host_lib_dir}/{real}"
        for name, real in verdict.aliases.items()
    }
    prepend = ([f"{target}/{COMPAT_DIR}"] if links else []) + [
        dst for _s, dst in binds[: len(lib_dirs)]
    ]
    # a shared system dir (the host's libc beside its MPI)
    # is not put on the loader's path: links are
    placed = runtime_links(
        site.host_mpi,
        host.family,
        host.soname,
        lib_binds=binds[: len(lib_dirs)],
        link_dir=f"{target}/{COMPAT_DIR}",
        root=root,
    )
    if placed is not None:
        verdict.warnings.extend(placed.problems)
        if placed.shadowed:
            # the one that hurts first
            first = sorted(placed.shadowed, key=lambda n: not n.startswith("libc.so"))
            shown = ", ".join(first[:5]) + (", ..." if len(first) > 5 else "")
            verdict.reasons.append(
                f"the host's library dirs also hold {len(placed.shadowed)} libraries the image has "
                f"({shown}): only the MPI's go on the loader's path, as links in {target}/{COMPAT_DIR}"
            )
        if placed.links:
            links |= placed.links
            prepend = [f"{target}/{COMPAT_DIR}"]
    env_set = (
        {k: translate(v, binds) for k, v in site.host_mpi.launch_env.items()}
        | extra_env
        | ucx_module_env(links, binds)
    )
    pair = Pair(
        site=site,
        image=image,
        host=host,
        container=container,
        found=found,
        verdict=verdict,
        binds=binds,
        env_set=env_set,
        env_prepend={"LD_LIBRARY_PATH": prepend},
        links=links,
    )
    with Root(root) as tree:
        pair.missing = missing_in_root(pair, tree)
        pair.image_env = _quietly(tree.is_file, "ch/environment")
        if pair.image_env:
            try:
                pair.environment = environment_in(tree)
            except (
                KitError,
                OSError,
            ):  # unreadable: read again where a runtime needs it (kit.runtime.udocker)
                pair.environment = None
    return pair


def _quietly(test, path: str) -> bool:
    """A yes/no question about an image path; a symlink loop there answers no."""
    try:
        return test(path)
    except RootError:
        return False


def missing_in_root(pair: Pair, tree: Root) -> list[str]:
    """Mount points and alias links the image tree lacks (its own symlinks followed inside it:
    what points out of the image is missing)."""
    missing = [p for p in pair.mount_points if not _quietly(tree.is_dir, p)]
    for link, target in pair.links.items():
        try:
            points_to = tree.readlink(link)
        except RootError:  # a link loop on the way
            points_to = None
        if (
            points_to is None
            or posixpath.normpath(posixpath.join(posixpath.dirname(link), points_to)) != target
        ):
            missing.append(f"{link} -> {target}")
    return missing


def pair_target(pair: Pair, out: str | os.PathLike | None = None) -> Path:
    """Where write_pair writes (OUT, else IMAGE.pair.yaml), refused before any work (e.g. --prepare)
    if something the kit did not write is there: a user's file, a link, a directory."""
    path = Path(out) if out else pair_path(pair.image)
    with _directory(path) as dir_fd:
        _pair_file_at(dir_fd, path)
    return path


def write_pair(pair: Pair, out: str | os.PathLike | None = None) -> Path:
    """Write the pair atomically; what is at that name is replaced only if it is a pair file the
    kit wrote (checked again after the swap, which is undone if another file slipped in), and
    only while IMAGE is still the image that was paired."""
    path = Path(out) if out else pair_path(pair.image)
    text = yaml.safe_dump(pair.document(), sort_keys=False, width=100)
    with _directory(path) as dir_fd:
        old = _pair_file_at(dir_fd, path)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
        part = os.path.basename(tmp)
        name: str | None = part  # what is left to remove: None once renamed or swapped in
        try:
            with os.fdopen(fd, "w") as fh:
                fh.write(text)
                fh.flush()
                os.fchmod(fh.fileno(), 0o644)
                os.fsync(fh.fileno())
            if pair.image_id is not None and _identity(pair.image) != pair.image_id:
                raise _replaced(pair.image)
            # Ctrl-C and SIGTERM wait for the swap, its check and the removal of what it swapped
            # out: cut between them, the cleanup below removed whatever the swap had put at NAME.
            with interrupt.held():
                if old is None:
                    try:
                        rename_noreplace(dir_fd, part, path.name)
                        name = None
                    except (
                        FileExistsError
                    ):  # another run wrote it meanwhile: replaced if it is a pair
                        old = _pair_file_at(dir_fd, path)
                        if old is None:  # and removed it again
                            raise KitError(
                                f"{path}: changed while the pair was written; nothing was replaced",
                                fix="run again",
                            ) from None
                if name is not None and old is not None:
                    _swap_in(dir_fd, part, path, old)
                    with contextlib.suppress(FileNotFoundError):  # renamed, where no exchange
                        os.unlink(part, dir_fd=dir_fd)  # the old pair file, swapped out
                    name = None
                fsync_dir(dir_fd)
        except OSError as exc:
            raise KitError(
                f"{path}: cannot write it ({exc.strerror or exc})",
                fix=f"check the free space and permissions of {path.parent}",
            ) from None
        finally:
            if name is not None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(name, dir_fd=dir_fd)
    return path


def _swap_in(dir_fd: int, name: str, path: Path, old: int) -> None:
    """Exchange the new file NAME with the pair file (inode OLD) at PATH; the new file's name
    then holds the old one, which the caller removes. Where the filesystem cannot exchange (NFS),
    a check then a rename: one system call's window."""
    try:
        swapped = exchange_if(dir_fd, name, path.name, expected=old)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOSYS):
            raise
        if _pair_file_at(dir_fd, path) != old:
            raise KitError(
                f"{path}: changed while the pair was written; nothing was replaced", fix="run again"
            ) from None
        os.rename(name, path.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        return
    if not swapped:  # not the file that was checked: exchange_if put it back
        raise KitError(
            f"{path}: changed while the pair was written; nothing was replaced", fix="run again"
        )


@contextlib.contextmanager
def _directory(path: Path):
    """An fd on the pair file's directory (made if needed), for calls that cannot be redirected."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise KitError(
            f"{path}: cannot use the directory {path.parent} ({exc.strerror or exc})",
            fix="create it or name another file with --out",
        ) from None
    try:
        yield dir_fd
    finally:
        os.close(dir_fd)


def _pair_file_at(dir_fd: int, path: Path) -> int | None:
    """The inode of a pair file the kit wrote at PATH, None if nothing is there; anything else
    raises KitError: it is neither followed nor replaced."""
    try:
        fd = os.open(
            path.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd
        )
    except FileNotFoundError:
        return None
    except OSError as exc:
        kind = "a symlink" if exc.errno == errno.ELOOP else f"unreadable ({exc.strerror})"
        raise _not_ours(path, kind) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _not_ours(
                path, "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
            )
        data = os.read(fd, PAIR_MAX + 1)
    finally:
        os.close(fd)
    if len(data) > PAIR_MAX or not is_pair_document(data, path):
        raise _not_ours(path, "a file that is not a pair file (no kit_pair: 1)")
    return st.st_ino


def _not_ours(path: Path, kind: str) -> KitError:
    return KitError(
        f"is {kind}, which kit mpi pair did not write; it is left alone",
        where=str(path),
        fix="move it away or name another file with --out",
    )


def prepare_image_dir(pair: Pair, rootfs: str | os.PathLike) -> list[str]:
    """Create the pair's mount points and alias links in a writable image tree. The image's
    own symlinks are followed inside it only (kit.rootfs), so nothing outside it is created,
    changed or deleted; a stale alias link is replaced, anything else in the way refused.
    Preparing the image that was paired keeps its identity current for write_pair."""
    ours = pair.image_id is not None and os.path.abspath(rootfs) == os.path.abspath(pair.image)
    if ours and _identity(rootfs) != pair.image_id:
        raise _replaced(rootfs)
    made = []
    with Root(rootfs) as tree:
        for dst in pair.mount_points:
            tree.makedirs(dst, 0o755)
            made.append(dst)
        for link, target in pair.links.items():
            tree.symlink(
                link,
                posixpath.relpath(target, posixpath.dirname(link)),
                through_links=True,
                replace_link=True,
                make_parents=0o755,
            )
            made.append(link)
    if ours:
        pair.image_id = _identity(rootfs)
    return made
