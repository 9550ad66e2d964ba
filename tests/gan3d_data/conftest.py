"""Fixtures of the gan3d data tests: simulator output written once per session."""

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def sim_dir(tmp_path_factory) -> Path:
    """Three real simulator files of 400 showers each (10-500 GeV)."""
    from gan3d.simulate import write_files

    out = tmp_path_factory.mktemp("showers")
    write_files(out, files=3, events_per_file=400, seed=5)
    return out
