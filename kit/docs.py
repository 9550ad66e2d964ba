"""The kit's documentation as topics that ship with it: `kit docs TOPIC` reads docs/TOPIC.md on a
login node with no network and no checkout.

A topic is a page's path under docs/ without `.md` (`howto/deploy`); a folder's README.md is the
folder's topic (`example-report`). The pages are found through kit/_data/docs (kit.data): the
checkout's docs/ through its link, a wheel's copy when installed.
"""

from __future__ import annotations

import difflib
import functools
import re
from dataclasses import dataclass
from pathlib import Path

from kit.data import shipped
from kit.errors import KitError
from kit.readfile import read_text

MAX_PAGE = 2 * 2**20  # the longest page is tens of kilobytes
INDEX = "index"
# Where a page that docs/index.md does not list is grouped: by its folder, the rest explanation.
FOLDER_GROUPS = (
    ("tutorial/", "Tutorials"),
    ("howto/", "How-to guides"),
    ("reference/", "Reference"),
)
OTHER_GROUP = "Explanation"
TOPIC_WORD = r"[a-z0-9/-]+"
# How a page names another: a relative link to it, or the command that prints it.
_NAMED = re.compile(rf"\]\(([A-Za-z0-9_./-]+?)\.md(?:#[^)]*)?\)|kit docs ({TOPIC_WORD})")
_HEADING = re.compile(r"#{1,6} +(.+?) *#* *")
FIX = "`kit docs` lists the topics"


@dataclass(frozen=True)
class Group:
    """A heading of the topic list and its topics, in reading order."""

    title: str
    topics: tuple[str, ...]


def root() -> Path:
    """The directory of the pages."""
    return shipped("docs")


def topics() -> dict[str, Path]:
    """Every topic and its page, sorted by topic."""
    return dict(_scan(root()))


@functools.lru_cache(maxsize=4)
def _scan(base: Path) -> tuple[tuple[str, Path], ...]:
    """The pages under ``base``, walked once per process (`kit docs` names each topic's title,
    which reads through topics(): one walk, not one per topic)."""
    found = {}
    for path in base.rglob("*.md"):
        rel = path.relative_to(base).with_suffix("").as_posix()
        found[rel[: -len("/README")] if rel.endswith("/README") else rel] = path
    return tuple(sorted(found.items()))


def page(topic: str) -> str:
    """The text of a topic's page (a known topic: `resolve` first)."""
    return read_text(topics()[topic], "documentation page", limit=MAX_PAGE)


def title(topic: str) -> str:
    """The page's first heading; its topic when it has none."""
    for line in page(topic).splitlines():
        match = _HEADING.fullmatch(line)
        if match:
            return match.group(1)
    return topic


def resolve(name: str) -> str:
    """The topic NAME means: a topic, or the end of exactly one (`site-config` for
    `howto/site-config` when no other topic ends so). `docs/x.md` is read as `x`."""
    known = topics()
    wanted = name.strip().removeprefix("docs/").removesuffix(".md").strip("/")
    if wanted in known:
        return wanted
    ends = [t for t in known if t.endswith("/" + wanted)]
    if len(ends) == 1:
        return ends[0]
    if ends:
        raise KitError(
            f"topic '{name}' could be any of {', '.join(ends)}",
            fix=f"give the whole topic, e.g. `kit docs {ends[0]}`",
        )
    spelled = {**{t.rsplit("/", 1)[-1]: t for t in known}, **{t: t for t in known}}
    close = difflib.get_close_matches(wanted, list(spelled), n=1, cutoff=0.6)
    hint = f"; did you mean '{spelled[close[0]]}'?" if close else ""
    raise KitError(f"no documentation topic '{name}'{hint}", fix=FIX)


def named_in(text: str) -> list[str]:
    """The topics a page names, in order: its links to other pages (relative to docs/) and the
    `kit docs TOPIC` commands in it."""
    found = []
    for link, command in _NAMED.findall(text):
        topic = command or link.removeprefix("./").removeprefix("docs/")
        found.append(topic[: -len("/README")] if topic.endswith("/README") else topic)
    return list(dict.fromkeys(found))


def groups() -> list[Group]:
    """The topic list as docs/index.md orders it: each of its `##` headings with the topics named
    under it; a page it does not name (or every page, without an index) goes by its folder into
    Tutorials, How-to guides, Reference or Explanation."""
    known = topics()
    listed: list[Group] = []
    if INDEX in known:
        listed.append(Group("Start here", (INDEX,)))
        for heading, body in _sections(page(INDEX)):
            named = [t for t in named_in(body) if t in known and t != INDEX]
            if named:
                listed.append(Group(heading, tuple(named)))
    seen = {t for g in listed for t in g.topics}
    rest: dict[str, tuple[str, ...]] = {}
    for topic in known:
        if topic not in seen:
            group = _folder_group(topic)
            rest[group] = (*rest.get(group, ()), topic)
    for name in [name for _, name in FOLDER_GROUPS] + [OTHER_GROUP]:
        if name in rest:  # the pages the index does not name join the group of their kind
            at = next((i for i, g in enumerate(listed) if g.title == name), len(listed))
            before = listed[at].topics if at < len(listed) else ()
            listed[at : at + 1] = [Group(name, before + rest[name])]
    return listed


def _folder_group(topic: str) -> str:
    return next((name for folder, name in FOLDER_GROUPS if topic.startswith(folder)), OTHER_GROUP)


def _sections(text: str) -> list[tuple[str, str]]:
    """The `## ` sections of a page: (heading, the text up to the next one)."""
    parts = re.split(r"^## +(.+?) *$", text, flags=re.MULTILINE)
    return list(zip(parts[1::2], parts[2::2]))
