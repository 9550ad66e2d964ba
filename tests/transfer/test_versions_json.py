"""`kit transfer versions --json` against the loopback sshd: the library's answer, as one
document.
"""

from __future__ import annotations

import json

from kit.cli import main
from kit.transfer import installed_versions, push
from tests.support.transfer import busybox_image, have_charliecloud


def versions_json(capsys, site, name: str) -> dict:
    assert main(["transfer", "versions", name, "--site", str(site), "--json"]) == 0
    out, err = capsys.readouterr()
    return json.loads(out)


def test_versions_json_matches_installed_versions(sshd, user_home, make_site, tmp_path, capsys):
    site = make_site()
    empty = versions_json(capsys, site, "app")
    assert empty["schema"] == "kit-transfer-versions/1" and empty["name"] == "app"
    assert empty["versions"] == [] and empty["current"] is None
    have_charliecloud()
    for content in (b"a", b"b"):
        push(busybox_image(tmp_path / "src" / "app.tar.gz", content), site, install=True)
    doc = versions_json(capsys, site, "app.tar.gz")  # the pushed file's name names the image too
    found = installed_versions("app", site)
    assert doc["where"] == found.where and doc["current"] == found.current
    assert doc["versions"] == [
        {"entry": v.entry, "current": v.current, "format": v.format, "installed": v.installed}
        for v in found.versions
    ]
    assert [v["current"] for v in doc["versions"]] == [True, False]


def test_versions_json_error_is_one_line_and_nothing_on_stdout(capsys):
    assert main(["transfer", "versions", "../etc", "--site", "laptp", "--json"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and json.loads(err)["error"]["exit"] == 1


def test_the_document_is_built_by_the_library_newest_first():
    """The CLI prints Versions.document(); a field renamed or dropped there would change the
    format.
    """
    from kit.transfer.versions import Installed, Versions

    found = Versions(
        "app",
        "host:/images",
        "app@bbbb",
        [Installed("app@bbbb", True, "dir", 2.0), Installed("app@aaaa.sqfs", False, "squash", 1.0)],
    )
    doc = json.loads(json.dumps(found.document()))
    assert doc == {
        "name": "app",
        "where": "host:/images",
        "current": "app@bbbb",
        "versions": [
            {"entry": "app@bbbb", "current": True, "format": "dir", "installed": 2.0},
            {"entry": "app@aaaa.sqfs", "current": False, "format": "squash", "installed": 1.0},
        ],
    }
