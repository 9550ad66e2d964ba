"""`kit transfer rollback --to` over the loopback sshd with two installed SquashFS versions: a --to
that names nothing (empty, as from a script's unset variable, or blank) or no installed version is
one line and switches nothing (never a rollback to the version before, as if --to were not
given). NAME@SHA, as --help offers, names a SquashFS version too."""

from __future__ import annotations

import os

import pytest

from kit.errors import KitError
from kit.transfer import push, rollback
from tests.support.transfer import random_image

MiB = 1 << 20


def test_a_to_that_names_no_version_switches_nothing(sshd, user_home, make_site, tmp_path):
    site = make_site()
    shas = [
        push(
            random_image(tmp_path / "src" / "app.sqfs", MiB, seed=seed),
            site,
            install=True,
            chunk_size=MiB,
        ).sha256[:12]
        for seed in (1, 2)
    ]
    current = tmp_path / "images" / "app.current"
    assert os.readlink(current) == f"app@{shas[1]}.sqfs"
    for to in ("", " ", "ffffffffffff", f"app@{shas[0][:6]}"):
        with pytest.raises(
            KitError, match=rf"--to {to}: matches no version of app in .*; installed: app@"
        ):
            rollback("app", site, to=to)
        assert os.readlink(current) == f"app@{shas[1]}.sqfs"
    assert (
        rollback("app", site, to=shas[0][:6]).target == f"app@{shas[0]}.sqfs"
    )  # a prefix still names one
    assert (
        rollback("app", site, to=f"app@{shas[1]}").target == f"app@{shas[1]}.sqfs"
    )  # NAME@SHA, as --help says
    assert os.readlink(current) == f"app@{shas[1]}.sqfs"
