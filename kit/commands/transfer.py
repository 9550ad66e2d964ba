"""`kit transfer push|bundle|verify`: thin CLI over kit.transfer."""

from __future__ import annotations

import argparse
import time
from contextlib import ExitStack
from pathlib import Path

from kit.commands.common import (
    add_dry_run,
    add_group,
    add_made_dir,
    add_read_dir,
    add_site,
    deprecated,
    number,
)
from kit.commands.progress import byte_bar
from kit.errors import KitError
from kit.excerpt import printable
from kit.jsonout import add_json, emit
from kit.verbosity import quiet

VERSIONS_SCHEMA = "kit-transfer-versions/1"


def _transfer():
    """kit.transfer, imported when a command runs: push, versions and rollback need the [transfer]
    extra (Fabric, paramiko), which `kit --help` must not import."""
    import kit.transfer

    return kit.transfer


def register(sub: argparse._SubParsersAction) -> None:
    leaves = add_group(sub, "transfer", "move images into the secure site (SSH push, bundles)")
    _add_push(leaves)
    _add_versions_and_rollback(leaves)
    _add_bundle(leaves)
    _add_verify(leaves)


def _add_push(leaves: argparse._SubParsersAction) -> None:
    p = leaves.add_parser(
        "push",
        extra="transfer",
        help="resumable, verified upload to the site (optionally install)",
        description="Upload IMAGE and its .sha256/.manifest.json/.pair.yaml siblings to the site's "
        "transfer host over SSH (your ~/.ssh/config, agent and keys). An interrupted push resumes; "
        "the remote checks sha256 before renaming into place.",
    )
    p.add_argument(
        "image",
        type=Path,
        metavar="IMAGE",
        help="IMAGE.tar.gz, IMAGE.tar, IMAGE.sqfs or IMAGE.sif (an Apptainer site)",
    )
    _add_endpoint_args(p)
    p.add_argument("--remote-dir", help="upload directory (default: transfer.image_dir)")
    p.add_argument(
        "--install",
        action="store_true",
        help="unpack into container.image_dir as NAME@SHA (with the site's ch-convert; a udocker site: "
        "by the installer itself; a .sif: as it is, NAME@SHA.sif) and point NAME.current at it",
    )
    p.add_argument(
        "--install-as",
        choices=("dir", "squash"),
        default="dir",
        help="installed form: unpacked directory or SquashFS file",
    )
    p.add_argument(
        "--keep",
        type=number(0, int, 10**6),
        metavar="N",
        help="previous installed versions to keep (default: transfer.keep_versions)",
    )
    p.add_argument(
        "--direct-io",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="remote writes bypass the page cache where the filesystem allows it (default: "
        "transfer.direct_io, true)",
    )
    p.add_argument(
        "--stall",
        type=number(1, float, 366 * 86400),
        metavar="SECONDS",
        help="stop the upload after this long with no byte moving and no remote re-hash progress (default: "
        "15 minutes)",
    )
    p.add_argument(
        "--install-timeout",
        type=number(1, float, 366 * 86400),
        metavar="SECONDS",
        help="stop the remote install (hash check, ch-convert) after this long (default: 4 hours)",
    )
    add_dry_run(p, "say what would happen; change nothing")
    p.set_defaults(func=_push)


def _add_versions_and_rollback(leaves: argparse._SubParsersAction) -> None:
    for name, func, text in (
        ("versions", _versions, "list the installed versions of an image on the site"),
        ("rollback", _rollback, "point NAME.current back at the version before it"),
    ):
        r = leaves.add_parser(name, extra="transfer", help=text)
        r.add_argument(
            "name", metavar="NAME", help="image name (gan3d), or the image file pushed (gan3d.sqfs)"
        )
        _add_endpoint_args(r)
        if name == "rollback":
            r.add_argument(
                "--to",
                metavar="VERSION",
                help="this version (NAME@SHA or a SHA prefix) "
                "instead of the one installed before the current",
            )
            add_dry_run(r, "say what would happen; change nothing")
        else:
            add_json(r, VERSIONS_SCHEMA)
        r.set_defaults(func=func)


def _add_bundle(leaves: argparse._SubParsersAction) -> None:
    b = leaves.add_parser(
        "bundle",
        help="write a self-checking removable-media bundle",
        description="Copy images (+ siblings) into the new directory DIR with a MANIFEST, "
        "verify.sh / verify.py checkers and SHA256SUMS (sha256sum -c).",
    )
    b.add_argument(
        "images",
        type=Path,
        nargs="+",
        metavar="IMAGE",
        help="IMAGE.tar.gz, IMAGE.tar, IMAGE.sqfs or IMAGE.sif; its .sha256, "
        ".manifest.json and .pair.yaml come along",
    )
    add_made_dir(b, "the new bundle directory; required")
    b.add_argument(
        "--with-kit",
        action="store_true",
        help="also carry the kit's own offline wheelhouse under DIR/kit/ (install it there "
        "with sh DIR/kit/install.sh)",
    )
    b.add_argument(
        "--kit-wheelhouse",
        type=Path,
        default=Path("dist/wheelhouse"),
        metavar="PATH",
        help="the wheelhouse `make wheelhouse` wrote",
    )
    b.set_defaults(func=_bundle)


def _add_verify(leaves: argparse._SubParsersAction) -> None:
    v = leaves.add_parser(
        "verify",
        help="check a bundle: names missing, truncated, "
        "altered files and every file its manifest does not list",
    )
    add_read_dir(v, "the bundle directory (kit transfer bundle wrote it)")
    v.set_defaults(func=_verify)


def _push(args: argparse.Namespace) -> int:
    with ExitStack() as stack:
        bar = (
            None
            if args.dry_run
            else byte_bar(
                stack,
                f"pushing {args.image.name}",
                args.image.stat().st_size if args.image.is_file() else None,
            )
        )
        progress = bar and bar.advance
        report = _transfer().push(
            args.image,
            args.site,
            remote_dir=args.remote_dir,
            install=args.install,
            keep=args.keep,
            install_as=args.install_as,
            direct_io=args.direct_io,
            dry_run=args.dry_run,
            progress=progress,
            stall=args.stall,
            install_timeout=args.install_timeout,
            **_endpoint_args(args),
        )
    if args.dry_run and not quiet():
        print("dry run: nothing was changed")
    _print_lines(report.lines())
    return 0


def _print_lines(lines: list[str]) -> None:
    """A report's lines, each escaped and bounded: they quote names from a bundle's SHA256SUMS,
    a pair file and the remote host's listing, none of which the kit wrote."""
    print("\n".join(printable(line, 1000) for line in lines))


def _add_endpoint_args(p: argparse.ArgumentParser) -> None:
    add_site(p)
    p.add_argument("--host", help="transfer host or ~/.ssh/config alias (default: transfer.host)")
    p.add_argument("--user", help="login user (default: transfer.user, then ~/.ssh/config)")
    p.add_argument("--port", type=number(1, int, 65535), help="SSH port")
    p.add_argument(
        "--accept-new-host-key",
        action="store_true",
        help="record an unknown host key in known_hosts (verify its fingerprint first)",
    )


def _endpoint_args(args: argparse.Namespace) -> dict:
    return dict(
        host=args.host, user=args.user, port=args.port, accept_new_host_key=args.accept_new_host_key
    )


def _versions(args: argparse.Namespace) -> int:
    found = _transfer().installed_versions(args.name, args.site, **_endpoint_args(args))
    if args.json:
        emit(VERSIONS_SCHEMA, found.document())
        return 0
    if not found.versions:
        print(f"no version of {printable(found.name)} installed in {printable(found.where)}")
        return 0
    print(f"{printable(found.where)}:")
    for v in found.versions:  # the remote host's listing: printed escaped
        when = _when(v.installed)
        entry, form = printable(v.entry), printable(v.format)
        print(f"  {'*' if v.current else ' '} {entry}  ({form}, installed {when})")
    print("  (* = current)" if found.current else "  no current version is set")
    return 0


def _when(seconds: float) -> str:
    """An install time from the remote listing; one out of any calendar's range is unknown."""
    try:
        return time.strftime("%Y-%m-%d %H:%M", time.localtime(seconds))
    except (OverflowError, OSError, ValueError):
        return "at an unknown time"


def _rollback(args: argparse.Namespace) -> int:
    done = _transfer().rollback(
        args.name, args.site, to=args.to, dry_run=args.dry_run, **_endpoint_args(args)
    )
    verb = "would point" if done.dry_run else "pointed"
    print(
        printable(f"{verb} {done.current} at {done.target} (was {done.previous or 'unset'})", 1000)
    )
    return 0


def _bundle(args: argparse.Namespace) -> int:
    if args.dir is None:  # `kit transfer bundle IMAGE... DIR`, the old spelling
        if len(args.images) < 2:
            raise KitError("kit transfer bundle: no bundle directory", fix="give --dir DIR")
        deprecated("kit transfer bundle IMAGE... DIR", "kit transfer bundle IMAGE... --dir DIR")
        args.dir = args.images.pop()
    with ExitStack() as stack:
        bar = byte_bar(stack, f"copying into {args.dir.name}")
        out = _transfer().bundle(
            args.images,
            args.dir,
            progress=bar.update if bar else None,
            kit_wheelhouse=args.kit_wheelhouse if args.with_kit else None,
        )
    with ExitStack() as stack:  # read back from the medium (the copies left the page cache)
        bar = byte_bar(stack, f"verifying {args.dir.name}")
        report = _transfer().verify_bundle(out, progress=bar and bar.update)
    if not report.ok:
        _print_lines(report.lines())
        return 1
    print(
        f"wrote {out}: {report.files} files; check it on the other side with 'sh {out}/verify.sh', "
        f"'python3 {out}/verify.py' or 'cd {out} && sha256sum -c SHA256SUMS'"
    )
    if args.with_kit:
        print(
            f"the kit's wheelhouse is in {out}/kit: on the login node, "
            f"sh {out}/kit/install.sh [VENV] [EXTRAS]"
        )
    return 0


def _verify(args: argparse.Namespace) -> int:
    with ExitStack() as stack:
        bar = byte_bar(stack, f"verifying {args.dir.name}")
        report = _transfer().verify_bundle(args.dir, progress=bar and bar.update)
    _print_lines(report.lines())
    return 0 if report.ok else 1
