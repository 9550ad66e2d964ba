"""The MPICH test image (tests/mpi builds and caches it) for the real container/bare pair."""

from tests.mpi.conftest import mpich_oci  # noqa: F401  (fixture)
