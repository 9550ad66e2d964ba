#!/usr/bin/env python3
"""Check a `kit transfer bundle` against its MANIFEST: every file present, full size, same sha256,
and nothing in the bundle that MANIFEST does not list (an extra script beside the images).

This file is copied into each bundle as verify.py, so it must run on the secure side with
nothing but a stock python3 (>= 3.6, standard library only). `kit transfer verify` imports
the same functions. MANIFEST lines are `<sha256> <size> <name>`; a name is a path of at most
four plain components (`kit/secure_site_kit-0.1.0-py3-none-any.whl`), none of them a link.

Usage: python3 verify.py [BUNDLE_DIR]     (exit 0: all good, 1: problems, 2: no manifest)
"""

import errno
import hashlib
import os
import re
import stat
import sys

MANIFEST = "MANIFEST"
MANIFEST_MAX = 1 << 20  # bytes: ~10000 lines; a larger MANIFEST is not one kit wrote
_PART = r"[A-Za-z0-9][A-Za-z0-9._+-]{0,254}"
# no dot-led part (no `..`), no space, backslash or newline: sha256sum reads every name back as is
NAME = re.compile(r"%s(?:/%s){0,3}" % (_PART, _PART))
_LINE = re.compile(r"([0-9a-f]{64}) ([0-9]{1,19}) (%s)" % NAME.pattern)
# the bundle's own files: the checkers, the manifests and SHA256SUMS (which lists them)
OWN = ("MANIFEST", "MANIFEST.json", "SHA256SUMS", "verify.py", "verify.sh")
WALK_MAX = 100000  # entries of the bundle looked at for unlisted ones; a bundle holds a few dozen
_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


class ManifestError(Exception):
    pass


def _kind(mode):
    return (
        "a symlink"
        if stat.S_ISLNK(mode)
        else "a FIFO"
        if stat.S_ISFIFO(mode)
        else "a directory"
        if stat.S_ISDIR(mode)
        else "a device or socket"
    )


def open_file(path, dir_fd=None):
    """(fd, size) of a regular file; never through a symlink, never blocking on a FIFO.
    None if nothing is there; ValueError naming what is there instead of a file."""
    try:
        fd = os.open(path, _OPEN, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return None
        if exc.errno == errno.ELOOP:
            raise ValueError("a symlink, not a file in the bundle") from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise ValueError("%s, not a file in the bundle" % _kind(st.st_mode))
    return fd, st.st_size


def open_in(directory, name):
    """open_file of the relative path `name` under `directory`, each directory on the way opened
    without following a link: a linked `kit/` cannot send the check (or a copy) off the medium."""
    parts = name.split("/")
    dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    try:
        for part in parts[:-1]:
            try:
                nfd = os.open(
                    part,
                    os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0),
                    dir_fd=dfd,
                )
            except OSError as exc:
                if exc.errno == errno.ENOENT:
                    return None
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise ValueError("%s is a symlink or no directory" % part) from None
                raise
            os.close(dfd)
            dfd = nfd
        return open_file(parts[-1], dir_fd=dfd)
    finally:
        os.close(dfd)


def read_manifest(directory):
    """[(sha256, size, name)] from DIR/MANIFEST; a malformed line is an error naming it."""
    path = os.path.join(directory, MANIFEST)
    try:
        found = open_file(path)
        if found is None:
            raise ValueError("no such file")
        with os.fdopen(found[0], "rb") as fh:
            data = fh.read(MANIFEST_MAX + 1)
    except (OSError, ValueError) as exc:
        raise ManifestError(
            "%s: cannot read the bundle manifest (%s); is %s a bundle made by kit transfer bundle?"
            % (path, getattr(exc, "strerror", None) or exc, directory)
        ) from None
    if len(data) > MANIFEST_MAX:
        raise ManifestError(
            "%s: larger than %d bytes; not a manifest kit transfer bundle wrote"
            % (path, MANIFEST_MAX)
        )
    entries = []
    for number, line in enumerate(data.split(b"\n"), 1):
        if not line and number > data.count(b"\n"):
            break  # after the last newline
        found = _LINE.fullmatch(line.decode("ascii", "replace"))
        if not found:
            raise ManifestError(
                "%s line %d: expected '<sha256> <size> <name>', got %r" % (path, number, line[:120])
            )
        entries.append((found.group(1), int(found.group(2)), found.group(3)))
    return entries


def sha256_of(fd, size, progress=None):
    """sha256 of the first `size` bytes of fd (closed after): the read is bounded by the
    manifest.
    """
    h = hashlib.sha256()
    with os.fdopen(fd, "rb") as fh:
        left = size
        while left:
            data = fh.read(min(1 << 20, left))
            if not data:
                break
            h.update(data)
            left -= len(data)
            if progress:
                progress(len(data))
    return h.hexdigest()


def check(directory, progress=None):
    """[(name, problem, detail)] for every missing, truncated, oversized or altered file, and every
    entry MANIFEST does not list;
    `progress(n)` is told of each block of bytes hashed."""
    problems = []
    entries = read_manifest(directory)
    for sha, size, name in entries:
        try:
            found = open_in(directory, name)
        except (OSError, ValueError) as exc:
            problems.append((name, "missing", getattr(exc, "strerror", None) or str(exc)))
            continue
        if found is None:
            problems.append((name, "missing", "not in the bundle"))
            continue
        fd, actual = found
        if actual != size:
            os.close(fd)
            kind = "truncated" if actual < size else "oversized"
            problems.append((name, kind, "%d bytes, manifest says %d" % (actual, size)))
            continue
        try:
            got = sha256_of(fd, size, progress)
        except OSError as exc:
            problems.append((name, "missing", "unreadable: %s" % exc.strerror))
            continue
        if got != sha:
            problems.append((name, "altered", "sha256 %s, manifest says %s" % (got, sha)))
    return problems + unlisted(directory, [name for _, _, name in entries])


def _shown(name):
    """A name as one printable line: a hostile name (newline, escape, non-UTF-8) escaped."""
    return name if NAME.fullmatch(name) else ascii(name)


def unlisted(directory, names):
    """[(name, "unlisted", what)] for every entry of the bundle that `names` (MANIFEST) and OWN do
    not account for: files, links, FIFOs, directories (named once, not walked). Only directories on
    the way to a listed name are walked, never through a link; at most WALK_MAX entries are looked
    at."""
    dirs = set()
    for name in names:
        parts = name.split("/")
        dirs.update("/".join(parts[:i]) for i in range(1, len(parts)))
    known = set(names) | set(OWN)
    problems, todo, seen = [], [""], 0
    while todo:
        prefix = todo.pop()
        try:
            listing = sorted(
                (e.name, e.is_dir(follow_symlinks=False), e.is_symlink())
                for e in os.scandir(os.path.join(directory, prefix) if prefix else directory)
            )
        except OSError:
            continue  # a listed name under it is reported missing already
        for entry, is_dir, is_link in listing:
            seen += 1
            if seen > WALK_MAX:
                problems.append(
                    (
                        "...",
                        "unlisted",
                        "more than %d entries in the bundle; not all looked at" % WALK_MAX,
                    )
                )
                return problems
            rel = prefix + "/" + entry if prefix else entry
            if rel in dirs:
                if is_dir:
                    todo.append(rel)  # a link there: its listed files are reported missing
            elif rel not in known:
                what = "a symlink" if is_link else "a directory" if is_dir else "a file"
                problems.append((_shown(rel), "unlisted", "%s the manifest does not list" % what))
    return sorted(problems)


def main(argv):
    directory = argv[1] if len(argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    try:
        entries = read_manifest(directory)
        problems = check(directory)
    except ManifestError as exc:
        sys.stderr.write("verify: %s\n" % exc)
        return 2
    for name, kind, detail in problems:
        print("%s: %s (%s)" % (kind.upper(), name, detail))
    print("%s: %d files, %d problem(s)" % (directory, len(entries), len(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
