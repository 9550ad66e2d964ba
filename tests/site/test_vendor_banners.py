"""One table of how each MPI vendor's library names itself (kit.site.model.VENDOR_BANNERS): the
ELF reader, the report's series and kit mpi check all read it."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kit.site.model import MPI_VENDORS, VENDOR_BANNERS, vendor_named_in

# Around a banner: text that cannot hold another (every banner starts with a capital letter).
NOISE = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789 .:()\n", max_size=80)


def test_every_vendor_a_site_may_name_has_its_banner():
    assert set(VENDOR_BANNERS) == set(MPI_VENDORS)


@given(vendor=st.sampled_from(MPI_VENDORS), before=NOISE, after=NOISE)
def test_a_banner_is_read_back_as_a_vendor_that_prints_it(vendor, before, after):
    """Most specific first: Cray MPICH's "CRAY MPICH version 8.1" is cray-mpich, not the mpich
    its text also contains; ParaStation's plain "MPICH" can only be read as mpich."""
    text = f"{before}{VENDOR_BANNERS[vendor]} version 8.1{after}".encode()
    found = vendor_named_in(text)
    assert VENDOR_BANNERS[found] == VENDOR_BANNERS[vendor]
    assert found == ("mpich" if vendor == "parastation" else vendor)


@given(NOISE)
def test_text_without_a_banner_names_no_vendor(text):
    assert vendor_named_in(text.encode()) is None
