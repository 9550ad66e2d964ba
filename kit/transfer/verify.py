#!/usr/bin/env python3
"""Check a `kit transfer bundle` against its MANIFEST: every file present, full size, same sha256.

This file is copied into each bundle as verify.py, so it must run on the secure side with
nothing but a stock python3 (>= 3.6, standard library only). `kit transfer verify` imports
the same functions. MANIFEST lines are `<sha256> <size> <name>`.

Usage: python3 verify.py [BUNDLE_DIR]     (exit 0: all good, 1: problems, 2: no manifest)
"""
import hashlib
import os
import re
import sys

MANIFEST = "MANIFEST"
_LINE = re.compile(r"^([0-9a-f]{64}) ([0-9]+) ([A-Za-z0-9][A-Za-z0-9._+-]*)\Z")


class ManifestError(Exception):
    pass


def read_manifest(directory):
    """[(sha256, size, name)] from DIR/MANIFEST; a malformed line is an error naming it."""
    path = os.path.join(directory, MANIFEST)
    try:
        with open(path) as fh:
            lines = fh.read().splitlines()
    except OSError as exc:
        raise ManifestError("%s: cannot read the bundle manifest (%s); is %s a bundle made by "
                            "kit transfer bundle?" % (path, exc.strerror, directory))
    entries = []
    for number, line in enumerate(lines, 1):
        found = _LINE.match(line)
        if not found:
            raise ManifestError("%s line %d: expected '<sha256> <size> <name>', got %r"
                                % (path, number, line[:120]))
        entries.append((found.group(1), int(found.group(2)), found.group(3)))
    return entries


def sha256_of(path, progress=None):
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while True:
            data = fh.read(1 << 20)
            if not data:
                return h.hexdigest()
            h.update(data)
            if progress:
                progress(len(data))


def check(directory, progress=None):
    """[(name, problem, detail)] for every missing, truncated, oversized or altered file;
    `progress(n)` is told of each block of bytes hashed."""
    problems = []
    for sha, size, name in read_manifest(directory):
        path = os.path.join(directory, name)
        if not os.path.isfile(path):
            problems.append((name, "missing", "not in the bundle"))
            continue
        actual = os.path.getsize(path)
        if actual != size:
            kind = "truncated" if actual < size else "oversized"
            problems.append((name, kind, "%d bytes, manifest says %d" % (actual, size)))
            continue
        got = sha256_of(path, progress)
        if got != sha:
            problems.append((name, "altered", "sha256 %s, manifest says %s" % (got, sha)))
    return problems


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
