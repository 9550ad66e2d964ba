"""`kit docs`: the topics as the pages' paths, grouped as the index orders them; a page printed
plain or through the pager; an unknown or ambiguous topic in one line; and every `kit docs TOPIC`
the code and the pages tell a reader to run names a page that exists."""

from __future__ import annotations

import re
import sys

import pytest

from kit import docs
from kit.cli import main
from kit.errors import KitError
from tests.support.paths import REPO

NAMED = re.compile(r"kit docs ([a-z0-9/-]+)")


@pytest.fixture
def pages(tmp_path, monkeypatch):
    """A docs tree of its own: kit.docs reads it instead of the shipped pages."""
    root = tmp_path / "docs"
    for rel, heading in {
        "tutorial/laptop.md": "Laptop tutorial",
        "howto/site-config.md": "Write a site config",
        "reference/site-config.md": "Site config keys",
        "reference/cli.md": "Command reference",
        "security.md": "Security",
        "physics.md": "Physics",
        "example/README.md": "Example report",
    }.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(f"# {heading}\n\nText of {rel}.\n")
    monkeypatch.setattr(docs, "root", lambda: root)
    return root


def test_a_topic_is_the_pages_path_and_a_folders_readme_is_the_folder(pages):
    assert list(docs.topics()) == [
        "example",
        "howto/site-config",
        "physics",
        "reference/cli",
        "reference/site-config",
        "security",
        "tutorial/laptop",
    ]
    assert docs.title("example") == "Example report"


@pytest.mark.parametrize(
    "given, topic",
    [
        ("security", "security"),
        ("reference/cli", "reference/cli"),
        ("cli", "reference/cli"),  # the one topic ending so
        ("laptop", "tutorial/laptop"),
        ("docs/security.md", "security"),
    ],
)
def test_a_topic_or_a_unique_end_of_one_resolves(pages, given, topic):
    assert docs.resolve(given) == topic


def test_an_ambiguous_end_names_every_topic_it_could_be(pages):
    with pytest.raises(KitError) as caught:
        docs.resolve("site-config")
    assert "howto/site-config, reference/site-config" in caught.value.what
    assert caught.value.fix == "give the whole topic, e.g. `kit docs howto/site-config`"


@pytest.mark.parametrize("given, meant", [("securty", "security"), ("laptpo", "tutorial/laptop")])
def test_an_unknown_topic_suggests_the_closest(pages, given, meant):
    with pytest.raises(KitError) as caught:
        docs.resolve(given)
    assert str(caught.value) == (
        f"no documentation topic '{given}'; did you mean '{meant}'?; fix: `kit docs` lists the topics"
    )


def test_without_an_index_the_topics_are_grouped_by_their_folder(pages):
    assert [(g.title, g.topics) for g in docs.groups()] == [
        ("Tutorials", ("tutorial/laptop",)),
        ("How-to guides", ("howto/site-config",)),
        ("Reference", ("reference/cli", "reference/site-config")),
        ("Explanation", ("example", "physics", "security")),
    ]


def test_the_index_orders_the_groups_and_the_pages_it_does_not_name_join_their_kind(pages):
    (pages / "index.md").write_text(
        "# Docs\n\n## Tutorials\n\n- [laptop](tutorial/laptop.md)\n\n"
        "## Reference\n\n- [keys](reference/site-config.md#keys), then `kit docs reference/cli`\n"
        "- [outside](../README.md), [gone](gone.md)\n\n"
        "## Explanation\n\n- [security](./security.md)\n"
    )
    assert [(g.title, g.topics) for g in docs.groups()] == [
        ("Start here", ("index",)),
        ("Tutorials", ("tutorial/laptop",)),
        ("Reference", ("reference/site-config", "reference/cli")),
        ("Explanation", ("security", "example", "physics")),
        ("How-to guides", ("howto/site-config",)),
    ]


def test_a_page_larger_than_any_page_is_refused_in_one_line(pages):
    (pages / "huge.md").write_bytes(b"#" * (docs.MAX_PAGE + 1))
    with pytest.raises(KitError, match="larger than 2 MiB") as caught:
        docs.page("huge")
    assert "\n" not in str(caught.value)


def test_kit_docs_lists_every_shipped_topic_once_with_its_heading(capsys):
    assert main(["docs"]) == 0
    out = capsys.readouterr().out
    listed = [line.split()[0] for line in out.splitlines() if line.startswith("  ")]
    assert sorted(listed) == sorted(docs.topics())
    assert re.search(r"^  security +Security", out, re.MULTILINE)


def test_kit_docs_topic_prints_the_page_plain_when_stdout_is_no_terminal(capsys, monkeypatch):
    monkeypatch.setenv("PAGER", "false")  # would print nothing, were it run
    assert main(["docs", "security"]) == 0
    assert capsys.readouterr().out == (REPO / "docs" / "security.md").read_text()


def test_on_a_terminal_the_page_goes_through_the_pager(capsys, monkeypatch, tmp_path):
    seen = tmp_path / "seen"
    copy = f"import sys; open({str(seen)!r}, 'w').write(sys.stdin.read())"
    monkeypatch.setenv("PAGER", f"{sys.executable} -c {copy!r}")
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    assert main(["docs", "physics"]) == 0
    assert capsys.readouterr().out == ""
    assert seen.read_text() == (REPO / "docs" / "physics.md").read_text()


@pytest.mark.parametrize("pager", ["", "/nonexistent/pager"])
def test_on_a_terminal_with_no_pager_or_one_that_cannot_start_the_page_is_plain(
    capsys, monkeypatch, pager
):
    monkeypatch.setenv("PAGER", pager)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    assert main(["docs", "physics"]) == 0
    assert capsys.readouterr().out == (REPO / "docs" / "physics.md").read_text()


def test_kit_docs_path_prints_the_file_of_the_page(capsys):
    assert main(["docs", "--path", "security"]) == 0
    assert capsys.readouterr().out == f"{(REPO / 'docs' / 'security.md').resolve()}\n"


def test_an_unknown_topic_is_one_line_and_exit_1(capsys):
    assert main(["docs", "securty"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        "kit: error: no documentation topic 'securty'; did you mean 'security'?; "
        "fix: `kit docs` lists the topics\n"
    )


def _sources() -> list:
    code = [*REPO.glob("kit/**/*.py"), *REPO.glob("gan3d/**/*.py")]
    return sorted([*code, REPO / "README.md", *REPO.glob("docs/**/*.md")])


def test_every_kit_docs_topic_named_in_the_code_and_the_pages_exists():
    named = {
        f"{path.relative_to(REPO)}: kit docs {topic}"
        for path in _sources()
        for topic in NAMED.findall(path.read_text())
    }
    assert len(named) > 10  # the walk found the mentions
    missing = []
    for mention in sorted(named):
        try:
            docs.resolve(mention.rsplit(" ", 1)[1])
        except KitError as exc:
            missing.append(f"{mention} ({exc.what})")
    assert missing == []
