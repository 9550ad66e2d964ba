"""docs/reference/site-config.md: every key of a site config, read from its schema
(kit.site.model.SCHEMA), so a key added there is listed here at the next regeneration."""

from __future__ import annotations

from kit.reference import keys
from kit.reference.markdown import GENERATED, paragraph, table


def render() -> str:
    from kit.site.model import SCHEMA

    intro = paragraph(
        "A site config is one YAML file per machine. `kit site validate FILE` checks one against these keys, "
        "`kit site probe --out FILE` drafts one for this host, "
        "and `kit site show NAME` prints one with what the kit derives from it. How to write one: "
        "`kit docs howto/site-config`. "
        "A nested key is written with dots (`scheduler.max_nodes` is `max_nodes:` under `scheduler:`); "
        "`NAME` stands for a name of your choice, `[]` for each entry of a list."
    )
    rows = table(keys.HEADERS, keys.rows(SCHEMA), keys.WIDTHS)
    return f"# Site config keys\n\n{paragraph(GENERATED)}\n\n{intro}\n\n{rows}"
