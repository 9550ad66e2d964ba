"""Open MPI's pairing rules (docs/mpi-abi.md): one test per branch, and a property test over
release pairs against the rule as the docs state it."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kit.mpi.abi import AbiId, decide
from kit.openmpi_abi import release_series


def ompi(version: str, soname: str = "libmpi.so.40") -> AbiId:
    return AbiId("openmpi", version, soname, None)


@pytest.mark.parametrize(
    "host, image, mode, ok, words",
    [
        ("4.1.4", "4.1.4", "full", True, "same Open MPI series"),
        ("4.1.4", "4.0.7", "full", True, "newer in the image's major series"),
        ("4.1.4", "4.0.7", "strict", False, "strict mode requires the same major.minor"),
        ("4.0.7", "4.1.4", "full", False, "older than the image's 4.1.4"),
        ("4.0.7", "4.1.4", "major", True, "releases not compared"),
        ("5.0.3", "4.1.4", "full", True, "C ABI promise for 4.x"),
        ("5.0.3", "4.1.4", "strict", False, "Open MPI majors differ"),
        ("4.1.4", "3.1.6", "full", False, "4.0 removed the MPI-1 functions"),
        ("4.1.4", "5.0.3", "full", False, "newer major series than the host's"),
        ("5.0.3", "3.1.6", "full", False, "breaks backward compatibility"),
    ],
)
def test_each_branch_of_the_open_mpi_rule(host, image, mode, ok, words):
    v = decide(ompi(host), ompi(image), mode)
    assert v.ok is ok
    assert words in " ".join(v.reasons + v.warnings)
    if not ok:
        assert "Open MPI 5.x" not in v.advice and "Open MPI" in v.advice


def test_an_older_host_release_of_the_same_series_pairs_with_a_warning():
    v = decide(ompi("4.1.2"), ompi("4.1.4"), "full")
    assert v.ok and v.warnings == [
        "host Open MPI 4.1.2 is an older release of the image's series 4.1 (4.1.4): same ABI, "
        "but the image's bug fixes are missing"
    ]


def test_open_mpi_1_10_and_2_x_differ_in_soname_and_are_refused_before_the_versions():
    v = decide(ompi("4.1.4"), ompi("2.1.1", "libmpi.so.20"), "major")
    assert not v.ok and v.reasons == [
        "same ABI family: openmpi",
        "SONAME majors differ: host libmpi.so.40, image libmpi.so.20",
    ]


def test_an_unparsable_release_is_a_warning_not_a_guess():
    v = decide(ompi("4.1.4"), ompi(None), "full")
    assert v.ok and "image's Open MPI release (unknown) is not A.B.C" in v.warnings[0]
    assert release_series("v5.0.3rc1") == (5, 0, 3) and release_series("4.1") == (4, 1, 0)
    assert release_series("4.1.4\n") is None and release_series("four") is None


series = st.tuples(st.integers(3, 6), st.integers(0, 4), st.integers(0, 9))


@given(series, series, st.sampled_from(["major", "full", "strict"]))
def test_accepted_exactly_where_open_mpi_promises_compatibility(host, image, mode):
    v = decide(ompi(".".join(map(str, host))), ompi(".".join(map(str, image))), mode)
    same_series = host[:2] == image[:2]
    expected = {
        "major": True,
        "full": (host[0] == image[0] and host[1] >= image[1]) or (host[0], image[0]) == (5, 4),
        "strict": same_series,
    }[mode]
    assert v.ok is expected
    assert v.reasons[:2] == ["same ABI family: openmpi", "same SONAME major: .40"]
    assert len(v.reasons[2:]) + len(v.warnings) == 1  # one line says why, whatever the outcome
    assert (v.advice is None) is v.ok
