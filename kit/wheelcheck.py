"""Whether every pin of constraints.txt has a wheel for each login node the kit promises.

A login node with glibc older than 2.28 (SLES 15, RHEL/CentOS 7) takes only manylinux2014
wheels; a pin without one makes `make wheelhouse` stop with pip's bare ResolutionImpossible.
`make lock` runs `lock` over every (Python, platform) pair of PROMISED and refuses a pin list
where one fails, naming the package, version, platform and the newest version that has such a
wheel; `make wheelhouse` runs `wheelhouse` when its download fails, for one line with the fix.

pip answers (the same finder `make wheelhouse` uses): `pip install --dry-run --no-deps` of the
pins for one pair, with --platform/--python-version, reading wheel metadata through HTTP range
requests (fast-deps), so index pages and metadata are fetched, never whole wheels. A pin found
to have a wheel is remembered per (package, version, platform, Python) in KIT_CACHE/wheel-check/
(a release's files do not go away); a missing one is asked again on every run.
Run as `python -m kit.wheelcheck` with the checkout on PYTHONPATH; standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kit import markers, pins, readfile
from kit.atomic import atomic_write_text
from kit.boundedrun import run_bounded
from kit.cachedir import kit_cache
from kit.errors import KitError

PYTHONS = ("3.9", "3.10", "3.11", "3.12")  # README: the core on Python 3.9-3.12
# README: glibc >= 2.17, glibc >= 2.28
PLATFORMS = (
    "manylinux2014_x86_64",
    "manylinux_2_28_x86_64",
)
PROMISED = tuple((python, platform) for python in PYTHONS for platform in PLATFORMS)
# built on the site against its own MPI from the pinned sdist (horovod/BUILD.sh)
SOURCE_ONLY = ("horovod",)
# Markers and Requires-Python are judged at a late patch release of each minor version, as a site's
# Python is (pip's "--python-version 3.9" means 3.9.0, which some releases exclude).
PATCH = 99
TAG = re.compile(
    r"(?P<base>manylinux1|manylinux2010|manylinux2014|manylinux_2_(?P<minor>[0-9]+))_(?P<arch>[a-z0-9_]+)"
)
LEGACY_GLIBC = {"manylinux1": 5, "manylinux2010": 12, "manylinux2014": 17}
MISSING = re.compile(
    r"ERROR: No matching distribution found for (?P<name>[A-Za-z0-9._-]+)==(?P<version>\S+)"
)
FOUND = re.compile(
    r"ERROR: Could not find a version that satisfies the requirement (?P<name>[A-Za-z0-9._-]+)==\S+ "
    r"\(from versions: (?P<versions>[^)]*)\)"
)
RELEASE = re.compile(r"[0-9]+(?:\.[0-9]+)*")
CACHE_LINE = re.compile(r"(?P<name>[a-z0-9-]+)==(?P<version>[A-Za-z0-9.+!_-]+)")
MAX_CACHE = 1 << 20  # a few hundred lines per pair
MAX_REPORT = 64 << 20  # pip's report of ~100 pins is ~1 MB
PIP_TIMEOUT = 900
# older pips judge a wheel's Requires-Python by the Python running them, not --python-version
PIP_MAJOR = 24
# Reaching the index is pip's own business (a mirror, certificates, a proxy); nothing else of this
# machine's pip set-up (find-links, extra indexes, constraints) may change what the lock is checked
# against.
PIP_KEEP = (
    "PIP_INDEX_URL",
    "PIP_CERT",
    "PIP_CLIENT_CERT",
    "PIP_PROXY",
    "PIP_TRUSTED_HOST",
    "PIP_DEFAULT_TIMEOUT",
    "PIP_RETRIES",
    "PIP_CACHE_DIR",
)


class CheckError(KitError):
    """pip could not answer at all (no network, a broken pip): one line with the fix."""


@dataclass(frozen=True)
class Missing:
    """A pin with no wheel for one (Python, platform); ``newest`` is the newest release that has
    one.
    """

    name: str
    version: str
    python: str
    platform: str
    newest: str | None


def glibc_minor(tag: str) -> int | None:
    """The glibc 2.N a manylinux tag needs (manylinux2014: 17); None for another kind of tag."""
    match = TAG.fullmatch(tag)
    if not match:
        return None
    return int(match["minor"]) if match["minor"] else LEGACY_GLIBC[match["base"]]


def platform_tags(platform: str) -> list[str]:
    """pip --platform values for PLATFORM (comma list): a glibc 2.N system also runs every older
    manylinux wheel, so manylinux_2_N expands to 2_(N-1) ... 2_17 and manylinux2014 (pip itself
    expands only the legacy names); other tags (musllinux_1_2_x86_64, ...) pass as they are."""
    out: list[str] = []
    for tag in platform.split(","):
        if not re.fullmatch(r"[a-z0-9_]{1,80}", tag):
            raise CheckError(
                f"PLATFORM={platform}: {tag!r} is no wheel platform tag",
                fix="give the login node's tag, "
                "e.g. manylinux2014_x86_64 (glibc >= 2.17) or manylinux_2_28_x86_64 (glibc >= 2.28)",
            )
        out.append(tag)
        match = TAG.fullmatch(tag)
        if match and match["minor"]:
            out += [
                f"manylinux_2_{m}_{match['arch']}" for m in range(int(match["minor"]) - 1, 16, -1)
            ]
            out.append(f"manylinux2014_{match['arch']}")
    return list(dict.fromkeys(out))


def newer_platforms(platform: str) -> list[str]:
    """The README's platforms for the same machine that need a newer glibc than all of PLATFORM."""
    tags = platform.split(",")
    matches = [m for m in (TAG.fullmatch(tag) for tag in tags) if m]
    if len(matches) < len(tags) or len({m["arch"] for m in matches}) != 1:
        return []
    floor = max(glibc_minor(m.group(0)) or 0 for m in matches)
    arch = matches[0]["arch"]
    named = [TAG.fullmatch(p) for p in PLATFORMS]
    return [f"{m['base']}_{arch}" for m in named if m and (glibc_minor(m.group(0)) or 0) > floor]


def pins_for(all_pins: Sequence[pins.Pin], python: str, machine: str = "x86_64") -> list[pins.Pin]:
    """The pins pip installs on CPython ``python`` (a late patch release) on Linux, without the
    source-only ones."""
    env = markers.linux_env(python, PATCH, machine)
    chosen = {}
    for pin in all_pins:
        if pins.normalize(pin.name) in SOURCE_ONLY:
            continue
        if pin.marker is None or markers.evaluate(pin.marker, env):
            chosen[(pins.normalize(pin.name), pin.version)] = pin
    return list(chosen.values())


def pip_env(isolated: bool) -> dict[str, str]:
    env = dict(os.environ)
    if isolated:
        env = {k: v for k, v in env.items() if not k.startswith("PIP_") or k in PIP_KEEP}
        env["PIP_CONFIG_FILE"] = os.devnull
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def cache_file(cache: Path, python: str, platform: str) -> Path:
    return cache / "wheel-check" / f"{platform}-cp{python.replace('.', '')}.txt"


def read_cache(path: Path) -> set[tuple[str, str]]:
    """The pins known to have a wheel; an unreadable or foreign line only costs a new question."""
    try:
        data = readfile.read_bytes(path, "wheel-check cache", limit=MAX_CACHE)
    except (OSError, KitError):
        return set()
    out = set()
    for line in data.decode("utf-8", "replace").splitlines():
        match = CACHE_LINE.fullmatch(line.strip())
        if match:
            out.add((match["name"], match["version"]))
    return out


def newest_release(versions: str) -> str | None:
    """The last final release of pip's ascending "from versions: ..." list."""
    finals = [v.strip() for v in versions.split(",")[:10000] if RELEASE.fullmatch(v.strip())]
    return finals[-1] if finals else None


def _pip(
    pip: Sequence[str],
    todo: Sequence[tuple[str, str]],
    python: str,
    platform: str,
    env: dict[str, str],
    fast: bool,
) -> tuple[subprocess.CompletedProcess, dict | None]:
    with tempfile.TemporaryDirectory(prefix="kit-wheelcheck-") as tmp:
        reqs, report = Path(tmp) / "pins.txt", Path(tmp) / "report.json"
        reqs.write_text("".join(f"{n}=={v}\n" for n, v in todo))
        cmd = [
            *pip,
            "install",
            "--dry-run",
            "--ignore-installed",
            "--no-deps",
            "--only-binary=:all:",
            "--target",
            str(Path(tmp) / "target"),
            "--python-version",
            f"{python}.{PATCH}",
            "--implementation",
            "cp",
            "--progress-bar",
            "off",
            "--report",
            str(report),
            "-r",
            str(reqs),
        ]
        cmd += ["--use-feature=fast-deps"] if fast else []
        for tag in platform_tags(platform):
            cmd += ["--platform", tag]
        try:
            ran = run_bounded(cmd, timeout=PIP_TIMEOUT, env=env)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise CheckError(
                f"{' '.join(pip)} did not answer for Python {python} on {platform} ({exc})",
                fix="check the network and pip",
            ) from None
        done = subprocess.CompletedProcess(cmd, ran.returncode, ran.out, ran.err)
        data = None
        if done.returncode == 0:
            try:
                data = json.loads(readfile.read_bytes(report, "pip report", limit=MAX_REPORT))
            except (OSError, ValueError, KitError):
                data = None
        return done, data


def reported(report: object) -> set[tuple[str, str]]:
    """(name, version) of every distribution in pip's --report (format 1); anything else, none."""
    items = report.get("install") if isinstance(report, dict) else None
    metas = (
        [item.get("metadata") for item in items if isinstance(item, dict)]
        if isinstance(items, list)
        else []
    )
    return {
        (pins.normalize(m["name"]), m["version"])
        for m in metas
        if isinstance(m, dict)
        and isinstance(m.get("name"), str)
        and isinstance(m.get("version"), str)
    }


def check_pair(
    all_pins: Sequence[pins.Pin],
    python: str,
    platform: str,
    *,
    pip: Sequence[str],
    cache: Path,
    isolated: bool = True,
) -> tuple[int, list[Missing]]:
    """(pins with a wheel, pins without) for CPython ``python`` on ``platform``. Each pip run stops
    at the first pin without a wheel; that one is set aside and the rest asked again."""
    wanted = sorted({(pins.normalize(p.name), p.version) for p in pins_for(all_pins, python)})
    path = cache_file(cache, python, platform)
    known = read_cache(path)
    todo = [key for key in wanted if key not in known]
    missing: list[Missing] = []
    env, fast = pip_env(isolated), True
    for _ in range(len(wanted) + 2):  # one pin fewer per round
        if not todo:
            break
        done, report = _pip(pip, todo, python, platform, env, fast)
        if done.returncode == 0:
            found = reported(report)
            if not set(todo) <= found:
                raise CheckError(
                    f"pip's report for Python {python} on {platform} lacks "
                    f"{', '.join(f'{n}=={v}' for n, v in sorted(set(todo) - found)[:5])}",
                    fix="upgrade pip (22.2 or newer writes --report)",
                )
            known |= set(todo)
            todo = []
            break
        if fast and "fast-deps" in done.stderr and "invalid choice" in done.stderr:
            fast = False  # a pip without range requests: it reads the whole wheels instead
            continue
        lines = done.stderr.splitlines()
        gone = [m for m in (MISSING.fullmatch(line.strip()) for line in lines) if m]
        if "no such option" in done.stderr:
            raise CheckError(
                f"pip is too old to check Python {python} on {platform} (it lacks --dry-run/--report)",
                fix=f"{' '.join(pip)} install --upgrade pip (22.2 or newer)",
            )
        if not gone:
            last = next(
                (line.strip() for line in reversed(lines) if line.strip()),
                f"exit {done.returncode}",
            )
            raise CheckError(
                f"pip could not check Python {python} on {platform}: {last[:300]}",
                fix="check the network (the index must be reachable)",
            )
        name, version = pins.normalize(gone[-1]["name"]), gone[-1]["version"]
        if (name, version) not in todo:
            raise CheckError(
                f"pip named {name}=={version}, which was not asked for",
                fix="run with a current pip",
            )
        versions = next(
            (
                m["versions"]
                for m in (FOUND.fullmatch(line.strip()) for line in lines)
                if m and pins.normalize(m["name"]) == name
            ),
            "",
        )
        missing.append(
            Missing(
                name=name,
                version=version,
                python=python,
                platform=platform,
                newest=newest_release(versions),
            )
        )
        todo.remove((name, version))
    if todo:
        raise CheckError(f"pip did not settle for Python {python} on {platform}", fix="run again")
    if known != read_cache(path):
        atomic_write_text(path, "".join(f"{n}=={v}\n" for n, v in sorted(known)))
    return len(wanted) - len(missing), missing


def lock_problem(miss: Missing) -> KitError:
    """A pin without a wheel, and how to lock another version (printed after "lock: ")."""
    newest = f" (the newest with one: {miss.newest})" if miss.newest else ""
    cap = f"{miss.name}<={miss.newest}" if miss.newest else f"a {miss.name} version that has one"
    return KitError(
        f"{miss.name} {miss.version} has no wheel for Python {miss.python} on "
        f"{miss.platform}{newest}",
        fix=f"require {cap} in pyproject.toml (with a python_version marker only if some Pythons "
        f"need another) and run scripts/lock.sh --upgrade-package {miss.name}",
    )


def wheelhouse_problem(misses: Sequence[Missing], other: str | None) -> KitError:
    """The first pin pip stopped at, the others it would stop at next, and the fixes (printed
    after "wheelhouse: ")."""
    first = misses[0]
    also = f" (nor {', '.join(f'{m.name} {m.version}' for m in misses[1:])})" if misses[1:] else ""
    fixes = []
    if other:
        fixes.append(
            f"PLATFORM={other} if the login node's glibc is >= 2.{glibc_minor(other)} (ldd --version)"
        )
    newest = (
        f"{first.name} {first.newest}, the newest with such a wheel,"
        if first.newest
        else f"a {first.name} version with such a wheel"
    )
    fixes.append(
        f"pin {newest} in pyproject.toml and run scripts/lock.sh --upgrade-package {first.name}"
    )
    return KitError(
        f"{first.name} {first.version} (constraints.txt) "
        f"has no wheel for Python {first.python} on {first.platform}{also}",
        fix=", or ".join(fixes),
    )


def diagnose(
    all_pins: Sequence[pins.Pin],
    python: str,
    platform: str,
    *,
    pip: Sequence[str],
    cache: Path,
    pip_log: str,
) -> KitError:
    """Why `make wheelhouse`'s download failed, in one line (printed after "wheelhouse: "). The
    pins without a wheel that pip's log names come first (pip stops at those the chosen extras
    need); a newer platform of the README's that has wheels for all of them is offered."""
    words = {
        pins.normalize(w) for w in re.findall(r"[A-Za-z0-9][A-Za-z0-9._-]*", pip_log[-200000:])
    }
    mentioned = [p for p in all_pins if pins.normalize(p.name) in words]
    named = (
        check_pair(mentioned, python, platform, pip=pip, cache=cache, isolated=False)[1]
        or check_pair(all_pins, python, platform, pip=pip, cache=cache, isolated=False)[1]
    )
    if not named:
        last = next(
            (
                line.strip()
                for line in reversed(pip_log.splitlines())
                if line.strip().startswith("ERROR")
            ),
            "no error line",
        )
        return KitError(
            f"pip download failed for Python {python} on {platform} although every pin has a "
            f"wheel there ({last[:200]})",
            fix="run make lock (pyproject.toml changed since constraints.txt?)",
        )
    other = None
    for candidate in newer_platforms(platform):
        pinned = [
            p
            for p in all_pins
            if (pins.normalize(p.name), p.version) in {(m.name, m.version) for m in named}
        ]
        if not check_pair(pinned, python, candidate, pip=pip, cache=cache, isolated=False)[1]:
            other = candidate
            break
    return wheelhouse_problem(named, other)


def require_pip(pip: Sequence[str]) -> None:
    """The lock check asks about every Python from one: its pip must honour --python-version."""
    try:
        done = run_bounded([*pip, "--version"], timeout=120, limit=64 << 10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CheckError(
            f"{' '.join(pip)} --version did not answer ({exc})", fix="install pip"
        ) from None
    match = re.match(r"pip ([0-9]+)\.", done.out)
    if done.returncode or not match:
        raise CheckError(
            f"{' '.join(pip)} is no pip ({(done.err or done.out).strip()[:200]})",
            fix="install pip",
        )
    if int(match[1]) < PIP_MAJOR:
        raise CheckError(
            f"pip {match[1]} judges Requires-Python by the Python running it, not the one checked",
            fix=f"pip {PIP_MAJOR} or newer (scripts/lock.sh keeps one in KIT_CACHE/uv-venv)",
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m kit.wheelcheck", description=__doc__.split("\n")[0]
    )
    sub = ap.add_subparsers(dest="command", required=True)
    lock = sub.add_parser("lock", help="check every promised (Python, platform) pair")
    lock.add_argument("lock", type=Path)
    lock.add_argument(
        "--python", action="append", choices=PYTHONS, help="default: all of " + ", ".join(PYTHONS)
    )
    lock.add_argument("--platform", action="append", help="default: " + ", ".join(PLATFORMS))
    house = sub.add_parser("wheelhouse", help="one line on why make wheelhouse's download failed")
    house.add_argument("lock", type=Path)
    house.add_argument("--python", required=True)
    house.add_argument("--platform", required=True)
    house.add_argument("--pip-log", type=Path, required=True)
    tags = sub.add_parser("tags", help="pip --platform values for a PLATFORM comma list")
    tags.add_argument("platform")
    for p in (lock, house):
        p.add_argument(
            "--cache",
            type=Path,
            default=kit_cache(),
        )
    args = ap.parse_args(argv)
    pip = [sys.executable, "-m", "pip"]
    try:
        if args.command == "tags":
            print("\n".join(platform_tags(args.platform)))
            return 0
        if args.command == "wheelhouse":
            if not re.fullmatch(r"3\.[0-9]{1,2}", args.python):
                raise CheckError(
                    f"Python {args.python!r} is not 3.N", fix="give the site's Python version"
                )
            log = args.pip_log.read_bytes()[-(1 << 20) :].decode("utf-8", "replace")
            why = diagnose(
                pins.read_pins(args.lock),
                args.python,
                args.platform,
                pip=pip,
                cache=args.cache,
                pip_log=log,
            )
            print(f"wheelhouse: {why}", file=sys.stderr)
            return 1
        all_pins = pins.read_pins(args.lock)
        require_pip(pip)
        bad = 0
        for python in args.python or PYTHONS:
            for platform in args.platform or PLATFORMS:
                ok, misses = check_pair(all_pins, python, platform, pip=pip, cache=args.cache)
                for miss in misses:
                    print(f"lock: {lock_problem(miss)}", file=sys.stderr)
                bad += len(misses)
                state = "ok" if not misses else f"{len(misses)} without a wheel"
                print(f"lock: Python {python} on {platform}: {ok} pins have wheels, {state}")
        return 1 if bad else 0
    except OSError as exc:
        refused = KitError(
            str(exc.strerror),
            where=None if exc.filename is None else str(exc.filename),
            fix="give the pin list (constraints.txt)",
        )
        print(f"wheelcheck: error: {refused}", file=sys.stderr)
        return 1
    except (CheckError, pins.PinError, markers.MarkerError) as exc:
        print(
            f"{'wheelhouse' if args.command == 'wheelhouse' else 'wheelcheck: error'}: {exc}",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
