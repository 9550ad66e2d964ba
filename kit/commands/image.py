"""`kit image build|convert|inspect`: thin CLI over kit.image (whose codecs, the [convert] extra,
are imported when a command runs, not for --help)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

from kit.commands.common import add_dry_run, add_group, add_mpi_mode, add_site, number
from kit.commands.progress import byte_bar
from kit.excerpt import printable
from kit.image import Limits, convert
from kit.image.convert import DEFAULT_LEVEL, ConversionReport
from kit.image.flatten import NOTE_CAP
from kit.image.writers import FORMATS
from kit.image_names import SIF
from kit.jsonout import add_json, emit
from kit.mpi.inspect import inspect_image
from kit.sizes import parse_size
from kit.verbosity import quiet, verbose

INSPECT_SCHEMA = "kit-image-inspect/1"


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def register(sub: argparse._SubParsersAction) -> None:
    leaves = add_group(sub, "image", "build, convert and inspect container images, offline")
    _add_convert(leaves)
    _add_build(leaves)
    _add_inspect(leaves)


def _add_convert(leaves: argparse._SubParsersAction) -> None:
    conv = leaves.add_parser(
        "convert",
        extra="convert",
        help="docker-archive / OCI / rootfs -> Charliecloud image",
        description="Convert SRC into a Charliecloud image OUT without a daemon; "
        "writes OUT.sha256 and OUT.manifest.json beside it.",
    )
    conv.add_argument(
        "src",
        type=Path,
        metavar="SRC",
        help="docker-archive, OCI layout dir/archive, rootfs tar/dir",
    )
    conv.add_argument(
        "out",
        type=Path,
        metavar="OUT",
        help="OUT.tar.gz, OUT.tar, OUT.sqfs, OUT.sif (Apptainer) or a directory",
    )
    conv.add_argument(
        "--format", choices=FORMATS, help="output format (default: from OUT's suffix)"
    )
    conv.add_argument("--image", metavar="TAG|DIGEST", help="which image, if SRC holds several")
    conv.add_argument(
        "--mount-point",
        action="append",
        default=[],
        metavar="PATH",
        help="create an empty directory for a ch-run -b target (repeatable)",
    )
    conv.add_argument(
        "--level",
        type=number(0, int, 9),
        default=DEFAULT_LEVEL,
        help="compression level 0-9 (tar.gz: 0-3 ISA-L, 4-9 zlib-ng; sqfs, sif: 1-9)",
    )
    conv.add_argument(
        "--max-size",
        type=_size,
        default=f"{Limits.max_size >> 30}G",  # argparse parses a text default with _size
        metavar="SIZE",
        help="stop past this many uncompressed bytes (e.g. 500M, 64G)",
    )
    conv.add_argument(
        "--max-members",
        type=number(1, int, 10**9),
        default=Limits.max_members,
        help="stop past this many tar members",
    )
    add_site(
        conv,
        required=False,
        more="in the same pass, "
        "pair the image's MPI with this site's host MPI (an image that cannot pair fails the conversion: "
        "nothing is written), create the pair's mount points and links, write OUT.pair.yaml",
    )
    add_mpi_mode(conv, "with --site")
    conv.add_argument(
        "--force",
        action="store_true",
        help="replace OUT if it is an earlier kit image convert output of the same form "
        "(never anything else)",
    )
    add_dry_run(conv, "report what would be dropped or changed; write nothing")
    conv.set_defaults(func=_convert)


def _add_build(leaves: argparse._SubParsersAction) -> None:
    bld = leaves.add_parser(
        "build",
        help="build the site's training image from its recipe in images/",
        description="Outside the perimeter: pick the recipe whose MPI the site's host MPI can replace, "
        "pass the site's build arguments, build with buildah (or podman, docker) "
        "and write a docker-archive/oci-archive ready for `kit image convert`.",
    )
    bld.add_argument("out", type=Path, metavar="OUT", help="the archive to write, e.g. gan3d.tar")
    add_site(bld)
    bld.add_argument(
        "--recipe",
        type=Path,
        help="a Dockerfile (default: images/gan3d-<host ABI family>.Dockerfile)",
    )
    bld.add_argument(
        "--context",
        type=Path,
        help="build context (default: the installed kit's files, staged beside OUT)",
    )
    bld.add_argument(
        "--builder",
        choices=("buildah", "podman", "docker"),
        help="the image builder (default: the first installed)",
    )
    bld.add_argument(
        "--format",
        dest="fmt",
        choices=("docker-archive", "oci-archive"),
        default="docker-archive",
        help="the archive's form (both are what kit image convert reads)",
    )
    bld.add_argument(
        "--tag", default="gan3d:latest", help="the image's name in the builder's storage"
    )
    bld.add_argument(
        "--build-arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override or add a recipe ARG (e.g. BASE=...)",
    )
    bld.add_argument(
        "--storage-driver",
        choices=("overlay", "vfs"),
        help="buildah's storage driver (default: overlay where it works, "
        "i.e. as root with the kernel's overlay on the storage's filesystem; else vfs)",
    )
    bld.add_argument(
        "--storage",
        type=Path,
        metavar="DIR",
        help="buildah's storage (DIR/root, DIR/run; default: buildah's own)",
    )
    bld.add_argument(
        "--itex",
        action="store_true",
        help="the variant with Intel Extension for TensorFlow: "
        "its stack from constraints-itex.txt (full tensorflow in place of tensorflow-cpu), "
        "tagged gan3d-itex:latest unless --tag",
    )
    add_dry_run(bld, "print the commands; build nothing")
    bld.set_defaults(func=_build)


def _add_inspect(leaves: argparse._SubParsersAction) -> None:
    insp = leaves.add_parser(
        "inspect", extra="convert", help="config, layers and MPI libraries of an image"
    )
    insp.add_argument(
        "src",
        type=Path,
        metavar="SRC",
        help="docker-archive, OCI layout dir/archive, rootfs tar/dir, or a SIF (header, objects, "
        "labels, definition)",
    )
    insp.add_argument("--image", metavar="TAG|DIGEST", help="which image, if SRC holds several")
    add_json(insp, INSPECT_SCHEMA)
    insp.set_defaults(func=_inspect)


def _build(args: argparse.Namespace) -> int:
    from kit.image.build import parse_build_args, plan_build, run_build

    extra = parse_build_args(args.build_arg)
    options = {"context": args.context} if args.context else {}
    plan = plan_build(
        args.site,
        args.out,
        recipe=args.recipe,
        builder=args.builder,
        fmt=args.fmt,
        tag=args.tag,
        extra_args=extra,
        storage=args.storage,
        storage_driver=args.storage_driver,
        itex=args.itex,
        **options,
    )
    if not quiet():
        print(
            f"recipe {plan.recipe}; build arguments: "
            + printable(" ".join(f"{k}={v}" for k, v in plan.build_args.items()), 2000)
        )
        if plan.storage_driver:
            print(f"storage driver {plan.storage_driver} ({plan.driver_reason})")
    if args.dry_run:
        print(plan.shell())
        print(f"dry run: nothing built; would write {plan.out}")
        return 0
    # without echo the builder's own output is not shown either
    out = run_build(plan, echo=None if quiet() else lambda line: print(f"$ {line}", flush=True))
    print(f"wrote {out}; next: kit image convert {out} IMAGE.sqfs --site {args.site}")
    return 0


def _convert(args: argparse.Namespace) -> int:
    limits = Limits(max_size=args.max_size, max_members=args.max_members)
    options = dict(
        fmt=args.format,
        image=args.image,
        mount_points=args.mount_point,
        level=args.level,
        limits=limits,
        dry_run=args.dry_run,
        force=args.force,
    )
    paired = None
    with ExitStack() as stack:
        bar = byte_bar(stack, f"converting {args.src.name}")
        if args.site:
            from kit.mpi import convert_paired

            paired = convert_paired(
                args.src,
                args.out,
                args.site,
                mode=args.mpi_mode,
                progress=bar.update if bar else None,
                **options,
            )
            report = paired.report
        else:
            report = convert(args.src, args.out, progress=bar.update if bar else None, **options)
    _print_report(report)
    if paired:
        pair = paired.pair
        if not quiet():
            container, host = printable(pair.container.describe()), printable(pair.host.describe())
            print(
                f"MPI pair for site {pair.site.name}: {container} in the image, "
                f"{host} bound in from the host ({pair.document()['verdict']['status']})"
            )
        for warning in pair.warnings:  # they name the image's libraries
            print(f"  warning: {printable(warning, 400)}")
        print(f"would write {args.out}.pair.yaml" if args.dry_run else f"wrote {paired.pair_file}")
    return 0


def _print_report(r: ConversionReport) -> None:
    """One line per rule, so that an image with thousands of device nodes still reads at a
    glance; the paths go to -v and to the manifest; -q keeps only what was written."""
    if not quiet():
        _print_notes(r)
    if r.dry_run:
        print(f"dry run: would write {r.entries} entries as {r.format}; nothing written")
    else:
        print(f"wrote {r.output} ({r.format}, {r.size} bytes, {r.entries} entries)")
        if r.sha256:
            print(f"sha256 {r.sha256}  (also {r.output}.sha256, {r.output}.manifest.json)")


def _print_notes(r: ConversionReport) -> None:
    """The image's own names (its ref, its member paths) print escaped and bounded."""
    img = r.image
    ref = f", {printable(img.ref)}" if img.ref else ""
    print(f"source: {r.source} ({img.kind}{ref}), {len(img.layers)} layer(s)")
    for key, n in r.counts.items():
        action, sep, rule = key.partition(": ")
        if sep and action in ("dropped", "changed"):
            print(f"  {action} {n} path{'s' if n != 1 else ''}: {printable(rule, 400)}")
        else:
            print(f"  {printable(key, 400)}: {n}")
    if verbose():
        for note in r.dropped:
            where = f"/{note.path}{_layer(note.layer)}"
            print(f"  dropped {printable(where, 400)}: {printable(note.reason, 400)}")
        for note in r.changed:
            where = f"/{note.path}{_layer(note.layer)}"
            print(f"  changed {printable(where, 400)}: {printable(note.reason, 400)}")
    noted = sum(n for key, n in r.counts.items() if key.startswith(("dropped: ", "changed: ")))
    listed = len(r.dropped) + len(r.changed)
    if noted and not verbose():
        also = "" if r.dry_run else f", as does {r.output}.manifest.json"
        print(f"  (-v lists the paths{also})")
    elif noted > listed:
        print(f"  ... and {noted - listed} more (only the first {NOTE_CAP} of each kind are kept)")
    if r.mount_points:
        print(f"  mount points created: {printable(' '.join(r.mount_points), 2000)}")
    if r.links:
        print(f"  links created: {printable(', '.join(r.links), 2000)}")


def _layer(index: int | None) -> str:
    return "" if index is None else f" (layer {index})"


def _inspect(args: argparse.Namespace) -> int:
    if args.src.name.endswith(SIF):
        from kit.image.sif import describe, read_sif, summary

        found = read_sif(args.src)
        if args.json:
            emit(INSPECT_SCHEMA, {"source": str(args.src), **describe(found)})
        else:
            print("\n".join(summary(found, args.src)))
        return 0
    info = inspect_image(args.src, args.image)
    if args.json:
        emit(INSPECT_SCHEMA, info)
        return 0
    _print_inspected(info)
    return 0


def _print_inspected(info: dict) -> None:
    """Every value comes from the image's config, manifest or libraries, none of which the kit
    wrote: each prints escaped and bounded, each list at most LISTED long (--json has them all)."""
    p = printable
    print(f"{info['source']}: {info['kind']} {p(info['ref'] or '')}".rstrip())
    print(f"  architecture: {p(info['architecture'])}  os: {p(info['os'])}")
    print(
        f"  entrypoint: {p(info['entrypoint'])}  cmd: {p(info['cmd'])}  workdir: "
        f"{p(info['workdir'])}"
    )
    for line in _listed(info["env"], "env"):
        print(f"  env {p(line, 400)}")
    for key, value in _listed(sorted(info["labels"].items()), "label"):
        print(f"  label {p(key)}={p(value, 400)}")
    for layer in _listed(info["layers"], "layer"):
        print(
            f"  layer {layer['index']}: "
            f"{p(layer['digest'])} {p(layer['media_type'])} {layer['size']} bytes"
        )
    libs = info["mpi_libraries"]
    if not libs:
        print("  MPI libraries: none found")
    for lib in _listed(libs, "MPI library"):
        vendor = " ".join(v for v in (lib["vendor"], lib["mpi_version"]) if v) or "vendor unknown"
        print(
            f"  MPI library {p(lib['path'])}: SONAME {p(lib['soname'])}, "
            f"version {p(lib['version'])}, {p(vendor)}; found as {p(' '.join(lib['names']), 400)}"
        )


LISTED = 200  # of each kind of entry `kit image inspect` prints


def _listed(items: list, kind: str) -> Iterator:
    """The first LISTED items, then a line saying how many more --json would give."""
    yield from items[:LISTED]
    if len(items) > LISTED:
        print(f"  ... and {len(items) - LISTED} more {kind} entries (--json lists them all)")
