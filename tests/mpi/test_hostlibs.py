"""kit.mpi.hostlibs: which host libraries go on the ranks' loader path, from the ELF closure. Small
ELF files made here (a dynamic section with SONAME and DT_NEEDED, as the linker writes them) stand
for a host MPI's libraries; the real Open MPI closure is tests/mpi/test_openmpi_check.py's."""

from __future__ import annotations

import re
import struct
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from kit.mpi.hostlibs import components, place, shadowed

OWNED = re.compile(r"libown\d+\.so\.1")
LINKS = "/opt/hostmpi/compat"


def write_elf(path: Path, soname: str, needed: list[str]) -> Path:
    """An ELF64 little-endian shared object with only .dynstr and .dynamic (what the reader
    reads).
    """
    strings = b"\0"
    offsets = {}
    for name in [soname, *needed]:
        offsets[name] = len(strings)
        strings += name.encode() + b"\0"
    dynamic = b"".join(struct.pack("<qQ", 1, offsets[n]) for n in needed)
    dynamic += struct.pack("<qQ", 14, offsets[soname]) + struct.pack("<qQ", 0, 0)
    dynstr_at = 64
    dynamic_at = dynstr_at + len(strings) + (-(dynstr_at + len(strings)) % 8)
    shoff = dynamic_at + len(dynamic)
    sections = [
        struct.pack("<IIQQQQIIQQ", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
        struct.pack("<IIQQQQIIQQ", 0, 3, 0, 0, dynstr_at, len(strings), 0, 0, 1, 0),
        struct.pack("<IIQQQQIIQQ", 0, 6, 0, 0, dynamic_at, len(dynamic), 1, 0, 8, 16),
    ]
    header = (
        b"\x7fELF"
        + bytes([2, 1, 1])
        + bytes(9)
        + struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 0, shoff, 0, 64, 0, 0, 64, len(sections), 0)
    )
    body = header + strings
    body += bytes(dynamic_at - len(body)) + dynamic + b"".join(sections)
    path.write_bytes(body)
    return path


def host(tmp_path: Path, graph: dict[str, list[str]]) -> Path:
    """A host library dir holding each library as NAME.1.2.3 with the SONAME link NAME beside it."""
    lib = tmp_path / "hostlib"
    lib.mkdir(exist_ok=True)
    for name, needs in graph.items():
        write_elf(lib / f"{name}.1.2.3", name, needs)
        (lib / name).symlink_to(f"{name}.1.2.3")
    return lib


def _place(lib: Path, image_has: set[str] | None, roots=("libown0.so.1",), comps=()):
    return place(
        list(roots),
        list(comps),
        [str(lib)],
        binds=[(str(lib), "/opt/hostmpi/lib0")],
        link_dir=LINKS,
        owned=OWNED,
        image_has=image_has,
        cache={},
    )


def test_the_runtime_and_what_the_image_lacks_are_linked_the_image_serves_the_rest(tmp_path):
    lib = host(
        tmp_path,
        {
            "libown0.so.1": ["libown1.so.1", "libc.so.6", "libz.so.1"],
            "libown1.so.1": ["libextra.so.1", "libc.so.6"],
            "libextra.so.1": ["libdeep.so.1", "libm.so.6"],
            "libdeep.so.1": [],
            "libc.so.6": [],
            "libm.so.6": [],
            "libz.so.1": ["libc.so.6"],
        },
    )
    got = _place(lib, {"libc.so.6", "libm.so.6", "libz.so.1", "libdeep.so.1"})
    assert got.links == {
        f"{LINKS}/{n}": f"/opt/hostmpi/lib0/{n}.1.2.3"
        for n in ("libown0.so.1", "libown1.so.1", "libextra.so.1")
    }
    assert sorted(got.from_image) == ["libc.so.6", "libdeep.so.1", "libm.so.6", "libz.so.1"]
    assert not got.problems
    # an image that knows nothing (no linker cache) gets only the runtime's own
    assert set(_place(lib, None).links) == {f"{LINKS}/libown0.so.1", f"{LINKS}/libown1.so.1"}


def test_components_bring_their_libraries_not_themselves(tmp_path):
    lib = host(tmp_path, {"libown0.so.1": [], "libown7.so.1": ["libnic.so.1"], "libnic.so.1": []})
    comps = tmp_path / "components"
    comps.mkdir()
    write_elf(comps / "mca_btl_x.so", "mca_btl_x.so", ["libown7.so.1", "libc.so.6"])
    (comps / "README").write_text("not a component")
    found = components([str(comps), None, str(tmp_path / "absent")])
    assert found == [comps / "mca_btl_x.so"]
    got = _place(lib, {"libc.so.6"}, comps=found)
    assert set(got.links) == {
        f"{LINKS}/libown0.so.1",
        f"{LINKS}/libown7.so.1",
        f"{LINKS}/libnic.so.1",
    }


def test_the_runtime_libraries_the_image_carries_are_the_hosts_where_the_host_has_them(tmp_path):
    """e.g. Open MPI's C++ bindings (libmpi_cxx), which Horovod links and nothing in libmpi's closure
    needs; one the host lacks stays the image's, without a complaint."""
    lib = host(
        tmp_path,
        {"libown0.so.1": [], "libown5.so.1": ["libown0.so.1", "libsys.so.1"], "libsys.so.1": []},
    )
    got = _place(lib, {"libown5.so.1", "libown6.so.1", "libsys.so.1"})
    assert set(got.links) == {f"{LINKS}/libown0.so.1", f"{LINKS}/libown5.so.1"}
    assert sorted(got.from_image) == ["libown6.so.1", "libsys.so.1"] and not got.problems


def test_what_cannot_be_placed_is_one_line_with_the_fix(tmp_path):
    lib = host(tmp_path, {"libown0.so.1": ["libgone.so.1", "libelse.so.1"]})
    elsewhere = tmp_path / "other"
    elsewhere.mkdir()
    write_elf(elsewhere / "libelse.so.1", "libelse.so.1", [])
    got = place(
        ["libown0.so.1"],
        [],
        [str(lib), str(elsewhere)],
        binds=[(str(lib), "/opt/hostmpi/lib0")],
        link_dir=LINKS,
        owned=OWNED,
        image_has={"libc.so.6"},
        cache={},
    )
    assert got.problems == [
        "libgone.so.1, needed by libown0.so.1, is neither in the image nor found on the host; fix: "
        "add its directory to host_mpi.library_dirs",
        f"libelse.so.1 ({elsewhere / 'libelse.so.1'}), needed by libown0.so.1, "
        "is outside host_mpi.library_dirs; "
        "fix: add its directory to host_mpi.library_dirs",
    ]
    assert set(got.links) == {f"{LINKS}/libown0.so.1"}


NAMES = [f"libown{i}.so.1" for i in range(3)] + [f"libsys{i}.so.1" for i in range(5)]


@settings(max_examples=60, deadline=None)
@given(
    edges=st.dictionaries(
        st.sampled_from(NAMES), st.lists(st.sampled_from(NAMES), max_size=4, unique=True)
    ),
    image_has=st.sets(st.sampled_from(NAMES)),
)
def test_the_links_are_the_closure_through_host_provided_libraries(
    tmp_path_factory, edges, image_has
):
    """Any dependency graph (cycles too): linked is exactly what is reached from libmpi (and from the
    runtime's libraries the image carries) through libraries the host provides, where a library is the
    host's if owned or missing from the image."""
    graph = {n: edges.get(n, []) for n in NAMES}
    lib = host(tmp_path_factory.mktemp("g"), graph)
    got = _place(lib, image_has)

    def from_host(name: str) -> bool:
        return bool(OWNED.fullmatch(name)) or name not in image_has

    expected, todo = set(), ["libown0.so.1", *(n for n in image_has if OWNED.fullmatch(n))]
    while todo:
        name = todo.pop()
        if name in expected or not from_host(name):
            continue
        expected.add(name)
        todo += graph[name]
    assert set(got.links) == {f"{LINKS}/{n}" for n in expected}
    assert not {n for n in image_has if not OWNED.fullmatch(n)} & {
        p.rsplit("/", 1)[1] for p in got.links
    }
    assert not got.problems


def test_a_dlopened_runtime_library_is_the_hosts_and_brings_its_needs(tmp_path):
    """Intel MPI dlopens libfabric by name: no DT_NEEDED names it, yet it must be the host's."""
    lib = host(tmp_path, {"libown0.so.1": [], "libown3.so.1": ["libsys0.so.1"], "libsys0.so.1": []})
    got = place(
        ["libown0.so.1"],
        [],
        [str(lib)],
        binds=[(str(lib), "/opt/hostmpi/lib0")],
        link_dir=LINKS,
        owned=OWNED,
        image_has=set(),
        cache={},
        dlopened=["libown3.so.1", "libown4.so.1"],
    )
    assert set(got.links) == {
        f"{LINKS}/{n}" for n in ("libown0.so.1", "libown3.so.1", "libsys0.so.1")
    }
    assert (
        got.from_image == ["libown4.so.1"] and not got.problems
    )  # absent on the host: nothing to link


@settings(max_examples=60, deadline=None)
@given(
    in_dirs=st.lists(st.sets(st.sampled_from(NAMES + ["libc.so.6"])), min_size=1, max_size=3),
    image_has=st.none() | st.sets(st.sampled_from(NAMES + ["libc.so.6"])),
)
def test_shadowed_is_what_the_dirs_hold_that_the_image_has_beyond_the_mpi(
    tmp_path_factory, in_dirs, image_has
):
    """Whole on the path, a dir overrides exactly the image's libraries it holds; the MPI's own do not
    count (they are meant to be the host's); an image without a linker cache is judged by its libc."""
    dirs = []
    for names in in_dirs:
        directory = tmp_path_factory.mktemp("d")
        for name in names:
            (directory / name).write_bytes(b"")
        dirs.append(str(directory))
    wanted = image_has if image_has is not None else {"libc.so.6"}
    expected = {n for names in in_dirs for n in names if n in wanted and not OWNED.fullmatch(n)}
    assert shadowed(
        [*dirs, str(tmp_path_factory.getbasetemp() / "absent")], image_has, OWNED
    ) == sorted(expected)
