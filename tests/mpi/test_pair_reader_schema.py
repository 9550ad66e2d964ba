"""read_pair_file checks IMAGE.pair.yaml against one schema: every bad key at once, each named by
its line, and values of the wrong type refused rather than read as something else."""

from __future__ import annotations

import pytest
import yaml

from kit.errors import KitError
from kit.mpi.pair_reader import read_pair_file
from kit.site import load_site

SITE = load_site("supermuc-ng")


def _pair(tmp_path, **changes) -> str:
    doc = {
        "kit_pair": 1,
        "site_image": "/images/img",
        "site": SITE.name,
        "verdict": {"ok": True, "status": "accepted", "reasons": [], "warnings": ["old glibc"]},
        "binds": ["/opt/intel:/opt/hostmpi"],
        "env": {
            "set": {"I_MPI_FABRICS": "shm:ofi", "N": 4},
            "prepend": {"PATH": ["/opt/hostmpi/bin"]},
        },
        "image_ready": {"ok": True, "missing": []},
        "image_environment": False,
        "launch": "srun ...",
    }
    doc.update(changes)
    path = tmp_path / "img.pair.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return str(path)


def test_a_written_pair_is_read_with_its_launch_settings(tmp_path):
    pair = read_pair_file(_pair(tmp_path), SITE)
    assert pair.site_image == "/images/img" and pair.warnings == ["old glibc"]
    assert pair.launch.env_set == {"I_MPI_FABRICS": "shm:ofi", "N": "4"}
    assert pair.launch.env_prepend == {"PATH": ["/opt/hostmpi/bin"]}
    assert pair.launch.image_env is False


def test_a_string_for_image_environment_is_refused_not_read_as_true(tmp_path):
    path = _pair(tmp_path, image_environment="no")
    line = open(path).read().splitlines().index("image_environment: 'no'") + 1
    with pytest.raises(KitError) as err:
        read_pair_file(path, SITE)
    assert str(err.value).startswith(f"{path}:{line}: image_environment: expected true or false")
    assert "; fix: re-run `kit image convert SRC OUT --site supermuc-ng`" in str(err.value)


def test_every_bad_key_is_listed_with_its_line(tmp_path):
    path = _pair(tmp_path, binds=["/a:/b", "nocolon"], env={"prepend": {"PATH": "/bin"}})
    with pytest.raises(KitError) as err:
        read_pair_file(path, SITE)
    text = str(err.value)
    assert "invalid pair file (2 problem(s))" in text and "\n" not in text
    lines = open(path).read().splitlines()
    assert f"{path}:{lines.index('- nocolon') + 1}: binds[1]: 'nocolon' is not SRC:DST" in text
    prepend = lines.index("    PATH: /bin") + 1
    assert f"{path}:{prepend}: env.prepend.PATH: expected a list of strings" in text


def test_warnings_of_the_wrong_type_are_refused_not_dropped(tmp_path):
    path = _pair(tmp_path, verdict={"ok": True, "warnings": "old glibc"})
    with pytest.raises(KitError, match=r"verdict.warnings: expected a list of values"):
        read_pair_file(path, SITE)
