"""Reads constraints.txt, the one pin list, for the scripts that install from it.

pip takes hashes only from pinned top-level requirements, and evaluates a pin list's markers
with the Python that runs it, so the scripts need three views of the list: whole blocks for
`pip install --require-hashes --no-deps -r`, bare pins for `pip download -c` (for a site's
platform), and a check of downloaded files against the hashes; setup.sh also asks which
installed distribution the list replaced by another that owns the same files. Standard library
only: it runs as `python3 kit/pins.py ...` before anything is installed, on any Python >= 3.9.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
from dataclasses import dataclass
from pathlib import Path

MAX_BYTES = 8 << 20  # a lock of every extra is ~250 KB
PIN = re.compile(
    r"(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[A-Za-z0-9.+!_-]+)\s*(?:;\s*(?P<marker>.+?))?\s*\Z"
)
_TERM = r"\(*\s*[a-z_]+\s*(?:==|!=|<=|>=|<|>|~=|not in|in)\s*'[^']*'\s*\)*"
MARKER = re.compile(rf"{_TERM}(?:\s+(?:and|or)\s+{_TERM})*")
HASH = re.compile(r"--hash=sha256:(?P<hex>[0-9a-f]{64})\Z")
# name-version(-build)?-python-abi-platform.whl, or name-version.tar.gz / .zip
WHEEL = re.compile(r"(?P<name>[^-]+)-(?P<version>[^-]+)(?:-[^-]+)?-[^-]+-[^-]+-[^-]+\.whl\Z")
SDIST = re.compile(r"(?P<name>.+)-(?P<version>[^-]+)\.(?:tar\.gz|zip)\Z")
# Distributions that install the same files under different names: TensorFlow's builds all write
# site-packages/tensorflow/, so uninstalling one deletes the files of another installed beside it.
SAME_FILES = (("tensorflow", "tensorflow-cpu"),)


class PinError(Exception):
    """One line naming the file, the entry and the fix: kit.errors.KitError's parts and line, here
    again because this file runs alone (a wheelhouse carries it without the kit)."""

    def __init__(self, what: str, *, fix: str | None = None):
        self.what, self.fix = what, fix
        super().__init__(f"{what}; fix: {fix}" if fix else what)


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Pin:
    name: str
    version: str
    marker: str | None
    hashes: tuple[str, ...]

    def block(self, with_hashes: bool = True) -> str:
        head = f"{self.name}=={self.version}" + (f" ; {self.marker}" if self.marker else "")
        return (
            " \\\n".join([head] + [f"    --hash=sha256:{h}" for h in self.hashes])
            if with_hashes
            else head
        )


def read_pins(path: Path) -> list[Pin]:
    """Every pin of a uv/pip-compile style file; anything else there is an error, not skipped."""
    data = path.read_bytes()
    if len(data) > MAX_BYTES:
        raise PinError(
            f"{path}: {len(data)} bytes, more than a pin list has ({MAX_BYTES})",
            fix="regenerate it with scripts/lock.sh",
        )
    logical, pins = [], []
    current = ""
    for line in data.decode("utf-8").splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        current += " " + stripped.rstrip("\\").strip()
        if not stripped.endswith("\\"):
            logical.append(current.strip())
            current = ""
    if current:
        logical.append(current.strip())
    for entry in logical:
        words = entry.split(" --hash=")
        match = PIN.fullmatch(words[0])
        hashes = [HASH.fullmatch("--hash=" + w.strip()) for w in words[1:]]
        bad_marker = (
            match is not None
            and match["marker"] is not None
            and not MARKER.fullmatch(match["marker"])
        )
        hexes = tuple(h["hex"] for h in hashes if h is not None)
        if not match or not hashes or len(hexes) < len(hashes) or bad_marker:
            raise PinError(
                f"{path}: entry {entry[:80]!r} is not NAME==VERSION [; MARKER] --hash=sha256:HEX...",
                fix="regenerate it with scripts/lock.sh",
            )
        pins.append(Pin(match["name"], match["version"], match["marker"], hexes))
    return pins


def select(pins: list[Pin], only: list[str], exclude: list[str]) -> list[Pin]:
    wanted, unwanted = {normalize(n) for n in only}, {normalize(n) for n in exclude}
    missing = wanted - {normalize(p.name) for p in pins}
    if missing:
        raise PinError(
            f"no pin for {', '.join(sorted(missing))}",
            fix="add it to pyproject.toml and run scripts/lock.sh",
        )
    return [
        p
        for p in pins
        if (not wanted or normalize(p.name) in wanted) and normalize(p.name) not in unwanted
    ]


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify(pins: list[Pin], directory: Path, skip: list[str]) -> int:
    """Every wheel and sdist in ``directory`` is a pinned version with one of its pinned hashes."""
    by_pin: dict[tuple[str, str], set[str]] = {}
    for pin in pins:
        by_pin.setdefault((normalize(pin.name), pin.version), set()).update(pin.hashes)
    skipped = {normalize(n) for n in skip}
    checked = 0
    for path in sorted(directory.iterdir()):
        match = WHEEL.fullmatch(path.name) or SDIST.fullmatch(path.name)
        if not match or not path.is_file():
            continue
        key = (normalize(match["name"]), match["version"])
        if key[0] in skipped:
            continue
        if key not in by_pin:
            raise PinError(
                f"{path}: {key[0]} {key[1]} is not in the pin list",
                fix="run scripts/lock.sh, or remove the file",
            )
        if sha256(path) not in by_pin[key]:
            raise PinError(
                f"{path}: sha256 differs from every hash pinned for {key[0]}=={key[1]}",
                fix="delete it and download it again",
            )
        checked += 1
    return checked


def replaced(pins: list[Pin], installed: list[str]) -> list[tuple[str, str]]:
    """(old, new) for each installed distribution the pin list no longer names while it names
    another of the same files: setup.sh uninstalls old BEFORE installing new, never after."""
    pinned = {normalize(p.name) for p in pins}
    have = {normalize(n) for n in installed}
    out = []
    for group in SAME_FILES:
        chosen = [n for n in group if n in pinned]
        if len(chosen) == 1:
            out += [(old, chosen[0]) for old in group if old in have and old not in pinned]
    return out


def installed_distributions() -> list[str]:
    """The distributions of the Python running this script (setup.sh runs it with the venv's)."""
    from importlib import metadata

    return [d.metadata["Name"] for d in metadata.distributions() if d.metadata["Name"]]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="pins.py", description=__doc__.split("\n")[0])
    ap.add_argument(
        "command", choices=("requirements", "constraints", "version", "verify", "replaced")
    )
    ap.add_argument("lock", type=Path)
    ap.add_argument("arg", nargs="?", help="version: NAME; verify: DIR")
    ap.add_argument("--only", action="append", default=[], metavar="NAME")
    ap.add_argument("--exclude", action="append", default=[], metavar="NAME")
    args = ap.parse_args(argv)
    try:
        pins = read_pins(args.lock)
        if args.command == "requirements":  # whole blocks: pip checks the hashes itself
            print("\n".join(p.block() for p in select(pins, args.only, args.exclude)))
        elif args.command == "constraints":  # bare pins: pip download -c for another platform
            print(
                "\n".join(p.block(with_hashes=False) for p in select(pins, args.only, args.exclude))
            )
        elif args.command == "version":
            versions = sorted({p.version for p in select(pins, [args.arg or ""], [])})
            print(versions[-1] if len(versions) == 1 else " ".join(versions))
        # "OLD NEW" lines: what this Python has that the list replaced
        elif args.command == "replaced":
            for old, new in replaced(pins, installed_distributions()):
                print(old, new)
        else:
            count = verify(pins, Path(args.arg or "."), args.exclude)
            print(f"pins: {count} files match the pin list", file=sys.stderr)
    except (PinError, OSError, UnicodeDecodeError) as exc:
        print(f"pins.py: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
