"""Property and fuzz tests of the archive parsers: generated multi-layer images in every
input form, converted into every output form, must either convert to exactly what an
independent model of layer application predicts or fail with one clean KitError; mutated
real archives must never end in anything but success or KitError.

Every failing example found is kept: as an @example, or under tests/corpus/archives/
(``*.json``: layers for the model check; anything else: raw bytes converted as a source).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from kit.errors import KitError
from kit.image import convert
from kit.image.sources import open_source_image
from tests.image import archives, refmodel
from tests.image.builders import oci_layout, run, tar_bytes
from tests.image.fuzz_strategies import event, layer_lists, mutate, mutation

CORPUS = Path(__file__).resolve().parent.parent / "corpus" / "archives"
OUT_NAMES = {"dir": "img", "tar": "img.tar", "tar.gz": "img.tar.gz", "sqfs": "img.sqfs"}


def check(
    layers: list[list[tuple]], form: str, fmt: str, tar_format: int = tarfile.GNU_FORMAT
) -> None:
    """Convert LAYERS (in FORM, to FMT) and hold the result against the model."""
    predicted = refmodel.predict(layers)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        src = archives.build(tmp / "src", form, [archives.layer_tar(l, tar_format) for l in layers])
        outdir = tmp / "out"
        outdir.mkdir()
        out = outdir / OUT_NAMES[fmt]
        try:
            convert(src, out, fmt=fmt)
        except KitError as exc:
            text = str(exc)
            event(
                "refused: "
                + (
                    "must fail"
                    if predicted.must_fail
                    else "conflict"
                    if predicted.conflicts
                    else "valid!"
                )
            )
            assert "\n" not in text, text
            assert list(outdir.iterdir()) == [], "a failed conversion left files behind"
            assert predicted.must_fail or predicted.conflicts, f"refused a valid image: {text}"
            return
        assert predicted.must_fail is None, f"accepted what must fail: {predicted.must_fail}"
        event("converted" + (" despite conflicts" if predicted.conflicts else ""))
        assert sorted(p.name for p in outdir.iterdir()) == sorted(
            [out.name, f"{out.name}.manifest.json"]
            + ([] if fmt == "dir" else [f"{out.name}.sha256"])
        )
        tree, links = refmodel.read_tree(out, fmt)
        for path, (kind, payload) in tree.items():
            if kind == "l":  # nothing points out of the image
                assert not payload.startswith("/") and not refmodel._climbs_out(path, payload), path
        if predicted.conflicts:
            return  # the model cannot say what the right tree is; the safety checks held
        diff = [
            f"{k}: model {predicted.tree.get(k)!r:.80} kit {tree.get(k)!r:.80}"
            for k in sorted(set(tree) | set(predicted.tree))
            if tree.get(k) != predicted.tree.get(k)
        ]
        assert not diff, "\n".join(diff)
        assert links == predicted.links


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(
    layers=layer_lists(),
    form=st.sampled_from(archives.FORMS),
    fmt=st.sampled_from(["dir", "tar", "tar.gz"]),
    tar_format=st.sampled_from([tarfile.GNU_FORMAT, tarfile.PAX_FORMAT]),
)
@example(
    layers=[
        [("a", "f", b"A"), ("b", "h", "a"), ("c", "h", "b")],
        [(".wh.a", "f", b""), (".wh.b", "f", b"")],
    ],
    form="oci-dir",
    fmt="dir",
    tar_format=tarfile.GNU_FORMAT,
)
@example(
    layers=[
        [("a", "f", b"old"), ("b", "h", "a")],
        [("a", "f", b"new"), ("c", "h", "a")],
        [(".wh.a", "f", b"")],
    ],
    form="docker",
    fmt="tar",
    tar_format=tarfile.PAX_FORMAT,
)
@example(
    layers=[[("l", "l", "/"), ("d", "d", None)], [("l/x", "f", b"")], [(".wh.l", "f", b"")]],
    form="oci-archive",
    fmt="tar.gz",
    tar_format=tarfile.GNU_FORMAT,
)
def test_generated_images_convert_as_the_model_predicts(layers, form, fmt, tar_format):
    check(layers, form, fmt, tar_format)


@settings(
    max_examples=max(6, settings.default.max_examples // 10),
    suppress_health_check=[HealthCheck.too_slow],
)
@given(layers=layer_lists(), form=st.sampled_from(archives.FORMS))
def test_generated_images_to_squashfs(layers, form):
    """The same property through the real mksquashfs / unsquashfs (few examples: slow)."""
    if not shutil.which("mksquashfs") or not shutil.which("unsquashfs"):
        pytest.skip("squashfs-tools not installed")
    check(layers, form, "sqfs")


# -- byte mutations of real archives ---------------------------------------------------------


@pytest.fixture(scope="module")
def seeds(tmp_path_factory) -> dict[str, bytes]:
    """Small real archives: skopeo-written docker-archive and OCI archive of a two-layer image
    (with a whiteout and a hard link), and a flat root filesystem tar."""
    root = tmp_path_factory.mktemp("seeds")
    layers = [
        tar_bytes(
            [
                ("bin", "d", None),
                ("bin/sh", "f", b"#!fake\n"),
                ("a", "f", b"A" * 700),
                ("h", "h", "a"),
                ("s", "l", "/bin/sh"),
            ]
        ),
        tar_bytes([(".wh.a", "f", b""), ("etc", "d", None), ("etc/x", "f", b"x")]),
    ]
    layout = oci_layout(root / "oci", layers, gzip_layers=False)
    out = {"rootfs.tar": layers[0]}
    if shutil.which("skopeo"):
        run("skopeo", "copy", f"oci:{layout}:t", f"docker-archive:{root}/d.tar:fuzz:1")
        run("skopeo", "copy", f"oci:{layout}:t", f"oci-archive:{root}/o.tar:t")
        out["docker.tar"], out["oci.tar"] = (
            (root / "d.tar").read_bytes(),
            (root / "o.tar").read_bytes(),
        )
    else:
        out["docker.tar"] = archives.docker_archive(root / "d.tar", layers).read_bytes()
    return out


def convert_bytes(data: bytes, name: str = "src.tar") -> bool:
    """Convert DATA as a source archive: success (True), or one clean KitError and nothing
    left (False); a flat root filesystem GNU tar refuses must be refused too."""
    with tempfile.TemporaryDirectory() as tmp:
        src, outdir = Path(tmp) / name, Path(tmp) / "out"
        src.write_bytes(data)
        outdir.mkdir()
        try:
            open_source_image(src)
            convert(src, outdir / "img.tar")
        except KitError as exc:
            assert "\n" not in str(exc), str(exc)
            assert list(outdir.iterdir()) == [], "a failed conversion left files behind"
            return False
        if name.startswith("rootfs"):
            tar = subprocess.run(["tar", "-tf", str(src)], capture_output=True, timeout=60)
            assert tar.returncode == 0, f"converted what GNU tar refuses: {tar.stderr[-300:]!r}"
        return True


@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(
    which=st.sampled_from(["docker.tar", "oci.tar", "rootfs.tar"]),
    ops=st.lists(mutation, min_size=1, max_size=4),
)
@example(which="rootfs.tar", ops=[("flip", 1685, 1)])  # a's header checksum: a, h, s kept
def test_mutated_archives_end_in_success_or_kit_error(seeds, which, ops):
    assume(which in seeds)
    convert_bytes(mutate(seeds[which], ops), which)


@settings(
    max_examples=max(30, settings.default.max_examples // 2),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    index=st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=70),
        lambda inner: (
            st.lists(inner, max_size=3)
            | st.dictionaries(
                st.sampled_from(
                    [
                        "manifests",
                        "digest",
                        "mediaType",
                        "annotations",
                        "platform",
                        "size",
                        "org.opencontainers.image.ref.name",
                    ]
                ),
                inner,
                max_size=4,
            )
        ),
        max_leaves=12,
    )
)
def test_arbitrary_index_json_ends_in_success_or_kit_error(tmp_path_factory, index):
    root = tmp_path_factory.mktemp("idx")
    layout = oci_layout(root / "oci", [tar_bytes([("a", "f", b"a")])])
    (layout / "index.json").write_text(json.dumps(index))
    with tempfile.TemporaryDirectory() as tmp:
        try:
            convert(layout, Path(tmp) / "img.tar")
        except KitError as exc:
            assert "\n" not in str(exc)


# -- the kept corpus of archives -------------------------------------------------------------


def corpus_files() -> list[Path]:
    return sorted(CORPUS.glob("*")) if CORPUS.is_dir() else []


@pytest.mark.parametrize("path", corpus_files(), ids=lambda p: p.name)
def test_corpus(path):
    """Every example a property test found, replayed."""
    if path.suffix == ".json":
        case = json.loads(path.read_text())
        layers = [
            [(n, k, p.encode("latin-1") if k == "f" else p) for n, k, p in layer]
            for layer in case["layers"]
        ]
        check(
            layers,
            case["form"],
            case["fmt"],
            getattr(tarfile, case.get("tar_format", "GNU_FORMAT")),
        )
    else:
        convert_bytes(path.read_bytes(), path.name.split("-", 1)[-1])
