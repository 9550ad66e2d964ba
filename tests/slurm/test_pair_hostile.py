"""Hostile IMAGE.pair.yaml given to `kit slurm render --image`: refused in one line naming the line
and the key, without blocking on a FIFO or reading /dev/zero, and no pair value may break a line of
the batch script."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from kit.cli import main
from tests.support.pairs import GOOD
from tests.support.sites import slurm_site_dict, write_site


def render(tmp_path: Path, capsys, pair: Path) -> tuple[int, str]:
    site = write_site(tmp_path, slurm_site_dict())
    rc = main(
        [
            "slurm",
            "render",
            "--site",
            str(site),
            "--image",
            str(pair),
            "--dir",
            str(tmp_path / "runs"),
            "--dry-run",
        ]
    )
    return rc, capsys.readouterr().err


def refused(tmp_path: Path, capsys, pair: Path, *words: str) -> None:
    rc, err = render(tmp_path, capsys, pair)
    assert rc == 1 and err.count("\n") == 1 and err.startswith("kit: error: "), err
    for word in words:
        assert word in err, err


@pytest.mark.timeout(30)
def test_a_fifo_or_dev_zero_as_pair_file_is_refused_without_blocking(tmp_path, capsys):
    fifo = tmp_path / "img.pair.yaml"
    os.mkfifo(fifo)
    refused(tmp_path, capsys, fifo, f"{fifo}: is a FIFO, not the regular file a pair file is")
    zero = tmp_path / "zero.pair.yaml"
    zero.symlink_to("/dev/zero")
    refused(tmp_path, capsys, zero, "is a character device")


@pytest.mark.parametrize(
    "change, key",
    [
        (lambda p: p["binds"].append("/data:/data\n#SBATCH --uid=0"), "binds[1]"),
        (lambda p: p["env"]["set"].update(FI_PROVIDER="psm2\nrm -rf ~"), "env.set"),
        (lambda p: p["env"]["prepend"].update(PATH=["/bin\r"]), "env.prepend.PATH"),
        (lambda p: p.update(site_image="/images/gan3d\u2028x"), "site_image"),
    ],
)
def test_a_line_break_in_any_pair_value_is_refused(tmp_path, capsys, change, key):
    path = tmp_path / "img.pair.yaml"
    path.write_text(yaml.safe_dump(GOOD))
    rc, err = render(
        tmp_path, capsys, path
    )  # the clean pair is read: only the run dir is then refused
    assert rc == 1 and "is not under any directory img.pair.yaml binds" in err
    pair = yaml.safe_load(path.read_text())
    change(pair)
    path.write_text(yaml.safe_dump(pair))
    refused(tmp_path, capsys, path, f"{path}:", f" {key}: ", "contains a control character")


@pytest.mark.parametrize(
    "text, words",
    [
        (
            "kit_pair: 1\nsite: localslurm\nimage_ready: [1]\nbinds: []\nenv: {}\n"
            "verdict: {ok: true}\nsite_image: /x\n",
            ("img.pair.yaml:3: image_ready: expected a mapping",),
        ),
        (
            "kit_pair: 1\nsite: localslurm\nbinds: " + "[" * 5000 + "]" * 5000 + "\n",
            ("img.pair.yaml:3: YAML refused: nested deeper",),
        ),
        (
            "kit_pair: 1\nsite: !!python/object/apply:os.system [true]\n",
            ("img.pair.yaml:2: YAML refused: tag",),
        ),
    ],
)
def test_a_malformed_pair_names_line_and_key(tmp_path, capsys, text, words):
    path = tmp_path / "img.pair.yaml"
    path.write_text(text)
    refused(tmp_path, capsys, path, *words)
