"""Paths of a site's MPI section that end up in ch-run's --bind=SRC:DST and in the ranks'
LD_LIBRARY_PATH: a ':' in them would split a bind or the loader's path (the ranks would search
directories nobody named), a '~', '.' or '..' component in the in-image target would place the
host MPI nowhere meant. Each is refused by the config's check, in one line naming file, line,
key and fix, so `kit mpi pair` never writes a pair from it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kit.site import SiteError, load_site
from tests.mpi.hostile import mpich_tree

REPO = Path(__file__).resolve().parents[2]
LAPTOP = REPO / "site-configs" / "laptop.yaml"


@pytest.mark.parametrize(
    ("section", "key", "value"),
    [
        ("container", "mpi_target", "/opt/a:/opt/b"),
        ("container", "mpi_target", "/"),
        ("container", "mpi_target", "~/hostmpi"),
        ("container", "mpi_target", "/opt/../etc"),
        ("container", "mpi_target", "/opt/host mpi"),
        ("host_mpi", "library_dirs", ["/usr/lib/x86_64-linux-gnu:/tmp/evil"]),
        ("container", "binds", ["/scratch:/scratch:/tmp"]),
    ],
)
def test_a_path_that_would_split_a_bind_or_the_loader_path_is_refused(
    tmp_path, section, key, value
):
    doc = yaml.safe_load(LAPTOP.read_text())
    doc[section][key] = value
    site = tmp_path / "bad.yaml"
    site.write_text(yaml.safe_dump(doc, sort_keys=False))
    line = next(
        i
        for i, text in enumerate(site.read_text().splitlines(), 1)
        if text.strip().startswith(f"{key}:")
    )
    with pytest.raises(SiteError) as err:
        load_site(site)
    message = str(err.value)
    assert "\n" not in message and f"{site}:" in message and f"{section}.{key}" in message, message
    assert f"{site}:{line}:" in message or f"{site}:{line + 1}:" in message, message
    assert "fix:" in message or "must be SRC:DST" in message, message

    image = mpich_tree(tmp_path / "img")
    run = subprocess.run(
        [sys.executable, "-m", "kit", "-q", "mpi", "pair", "--site", str(site), str(image)],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    assert (
        run.returncode == 1 and run.stderr.count("\n") == 1 and f"{section}.{key}" in run.stderr
    ), run.stderr
    assert not (tmp_path / "img.pair.yaml").exists()
