"""The site config's schema errors: kit.schema's mechanism, raising SiteError."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kit.errors import KitError
from kit.schema import INT_MAX, MAX_LISTED, Bad, Field, Section, check_yaml

__all__ = ["INT_MAX", "MAX_LISTED", "Bad", "Field", "Section", "SiteError", "check_document"]

FIX = "correct the site config at that line (`kit docs reference/site-config` lists every key)"


class SiteError(KitError):
    """A site config that cannot be read or does not satisfy the schema."""


def check_document(text: str, file: str | Path, schema: Section) -> dict[str, Any]:
    """Parse ``text`` (bounded: depth, aliases, tags) and validate it; one SiteError line lists the
    problems with their lines."""
    return check_yaml(text, file, schema, what="site config", fix=FIX, error=SiteError)
