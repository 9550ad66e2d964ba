"""Property: any HDF5 file (random datasets, dtypes, shapes, chunks, groups, links) is either read
in full or refused with one DataError line naming it; never another exception, never a huge allocation."""

import tempfile
from pathlib import Path

import h5py
import numpy as np
from hypothesis import event, example, given
from hypothesis import strategies as st

from gan3d.data import DataError, ShowerFiles

NAMES = ["ECAL", "target", "energy", "other"]
DTYPES = ["<f4", "<f4", "<f8", "<f2", "<i2", "|u1", "|b1", "|S3", "<c8", "compound"]
TAILS = [(25, 25, 25), (25, 25, 5), (2,), (1,), (), (3, 2)]
FILLS = ["random", "random", "zeros", "nan", "inf", "negative"]

EVENTS = [0, 1, 2, 3, 10**11]


def _dataset(events, tails) -> st.SearchStrategy:
    return st.fixed_dictionaries(
        {
            "kind": st.just("dataset"),
            "dtype": st.sampled_from(DTYPES),
            "events": events,
            "tail": st.sampled_from(tails),
            "chunks": st.sampled_from([None, "small", "absurd"]),
            "fill": st.sampled_from(FILLS),
            "written": st.booleans(),
        }
    )


def _other(names: list[str]) -> st.SearchStrategy:
    return st.one_of(
        _dataset(st.sampled_from(EVENTS), TAILS),
        st.fixed_dictionaries({"kind": st.just("group"), "inner": st.booleans()}),
        st.fixed_dictionaries(
            {"kind": st.just("soft"), "target": st.sampled_from(names + ["/g/x", "/missing"])}
        ),
        st.fixed_dictionaries(
            {"kind": st.just("external"), "target": st.sampled_from(["missing.h5", "self"])}
        ),
        st.fixed_dictionaries({"kind": st.just("empty"), "dtype": st.sampled_from(["<f4", "|S3"])}),
    )


@st.composite
def _files(draw) -> dict:
    """Mostly near-valid CLIC files (so the reading paths are reached), with any entry possibly
    wrong.
    """
    n = draw(st.sampled_from(EVENTS))
    events = st.one_of(st.just(n), st.just(n), st.sampled_from(EVENTS))
    entries = {"ECAL": draw(st.one_of(_dataset(events, [(25, 25, 25)] * 6 + TAILS), _other(NAMES)))}
    if draw(st.booleans()):
        entries["target"] = draw(st.one_of(_dataset(events, [(2,)] * 6 + TAILS), _other(NAMES)))
    if draw(st.booleans()):
        entries["energy"] = draw(st.one_of(_dataset(events, [()] * 6 + TAILS), _other(NAMES)))
    if draw(st.booleans()):
        entries["other"] = draw(_other(NAMES))
    return entries


def _values(spec: dict, shape: tuple, rng: np.random.Generator) -> np.ndarray:
    data = {
        "zeros": np.zeros(shape),
        "random": rng.uniform(1, 500, shape),
        "negative": -rng.random(shape),
        "nan": np.full(shape, np.nan),
        "inf": np.full(shape, np.inf),
    }[spec["fill"]]
    if spec["fill"] in ("nan", "inf") and data.size > 1:
        data.flat[1:] = 7.0  # one bad value among good ones
    if spec["dtype"] == "compound":
        out = np.zeros(shape, [("a", "<f4"), ("b", "<i4")])
        out["a"] = np.nan_to_num(data).clip(-1e30, 1e30)
        return out
    if spec["dtype"] == "|S3":
        return np.full(shape, b"1.5")
    with np.errstate(invalid="ignore", over="ignore"):
        return (
            data.astype(spec["dtype"])
            if spec["dtype"][1] not in "iub"
            else np.nan_to_num(data).astype(spec["dtype"])
        )


def _build(path: Path, entries: dict) -> None:
    rng = np.random.default_rng(0)
    with h5py.File(path, "w") as h5:
        for name, spec in entries.items():
            kind = spec["kind"]
            if kind == "group":
                group = h5.create_group(name)
                if spec["inner"]:
                    group.create_dataset("x", data=np.ones((2, 25, 25, 25), np.float32))
            elif kind == "soft":
                h5[name] = h5py.SoftLink(spec["target"])
            elif kind == "external":
                h5[name] = h5py.ExternalLink(
                    str(path) if spec["target"] == "self" else spec["target"], "/ECAL"
                )
            elif kind == "empty":
                h5.create_dataset(name, data=h5py.Empty(spec["dtype"]))
            else:
                _dataset_into(h5, name, spec, rng)


def _dataset_into(h5, name: str, spec: dict, rng: np.random.Generator) -> None:
    shape = (spec["events"],) + spec["tail"]
    dtype = (
        np.dtype([("a", "<f4"), ("b", "<i4")])
        if spec["dtype"] == "compound"
        else np.dtype(spec["dtype"])
    )
    huge = spec["events"] > 10
    chunks, maxshape = None, None
    if spec["chunks"] == "small" or huge:
        chunks = tuple(max(1, min(d, 4)) for d in shape) if shape else None
    if spec["chunks"] == "absurd" and shape:
        chunks, maxshape = (20_000,) + tuple(max(1, d) for d in shape[1:]), (None,) + shape[1:]
    if shape and 0 in shape and chunks:
        maxshape = tuple(None if d == 0 else d for d in shape)
    ds = h5.create_dataset(name, shape, dtype, chunks=chunks if shape else None, maxshape=maxshape)
    if spec["written"] and not huge and spec["chunks"] != "absurd" and ds.size:
        ds[...] = _values(spec, shape, rng)


def _read_all(files: ShowerFiles) -> None:
    for k, count in enumerate(files.counts):
        for start in range(0, count, 2):
            files.read(k, start, min(count, start + 2))


@st.composite
def _near_valid(draw) -> dict:
    """A CLIC file of 1-3 events whose values (NaN/Inf/negative cells or energies), dtypes and
    chunking vary, with maybe one extra entry: the paths that read events."""
    n = draw(st.sampled_from([1, 2, 3]))
    cells = {
        "kind": "dataset",
        "dtype": draw(st.sampled_from(["<f4", "<f8", "<f2", "<i2"])),
        "events": n,
        "tail": (25, 25, 25),
        "chunks": draw(st.sampled_from([None, "small"])),
        "fill": draw(st.sampled_from(FILLS)),
        "written": True,
    }
    energy = {
        "kind": "dataset",
        "dtype": draw(st.sampled_from(["<f4", "<f8", "<i2"])),
        "events": n,
        "chunks": draw(st.sampled_from([None, "small"])),
        "fill": draw(st.sampled_from(FILLS)),
        "written": True,
    }
    name = draw(st.sampled_from(["target", "energy"]))
    entries = {"ECAL": cells, name: {**energy, "tail": (2,) if name == "target" else ()}}
    if draw(st.booleans()):
        entries[draw(st.sampled_from(NAMES))] = draw(_other(NAMES))
    return entries


@given(entries=st.one_of(_near_valid(), _files()), skip=st.booleans())
@example(
    entries={
        "ECAL": {"kind": "soft", "target": "ECAL"},
        "target": {"kind": "group", "inner": False},
    },
    skip=False,
)
@example(
    entries={
        "ECAL": {
            "kind": "dataset",
            "dtype": "<f4",
            "events": 10**11,
            "tail": (25, 25, 25),
            "chunks": "small",
            "fill": "zeros",
            "written": False,
        },
        "energy": {
            "kind": "dataset",
            "dtype": "<f8",
            "events": 10**11,
            "tail": (),
            "chunks": "small",
            "fill": "zeros",
            "written": False,
        },
    },
    skip=True,
)
@example(
    entries={
        "ECAL": {
            "kind": "dataset",
            "dtype": "<f8",
            "events": 3,
            "tail": (25, 25, 25),
            "chunks": None,
            "fill": "nan",
            "written": True,
        },
        "energy": {
            "kind": "dataset",
            "dtype": "<f4",
            "events": 3,
            "tail": (),
            "chunks": None,
            "fill": "random",
            "written": True,
        },
    },
    skip=False,
)
def test_any_hdf5_file_is_read_or_refused_in_one_line(entries: dict, skip: bool):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "EleEscan_1_0.h5"
        _build(path, entries)
        try:
            with ShowerFiles([path], skip_bad_events=skip) as files:
                _read_all(files)
                assert all(np.isfinite(e).all() and (e > 0).all() for e in files.energies)
            event(f"read {files.num_events} events, skipped {files.skipped_events}")
        except DataError as exc:
            message = str(exc)
            assert "\n" not in message and str(path) in message and "fix:" in message, message
            event("refused: " + message.removeprefix(f"data file {path}").split(";")[0][:40])
