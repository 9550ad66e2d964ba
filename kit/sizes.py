"""Byte sizes as people write them on a command line (64G, 500M, 1.5TiB): one parser, so that a
limit given in any command means the same number of bytes."""

from __future__ import annotations

import re

UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
MAX_TEXT = 32  # a size is a few characters; longer text is not read
SIZE_RE = re.compile(r"([0-9]+(?:\.[0-9]*)?)([kmgt]?)(?:i?b)?")


def parse_size(text: str) -> int:
    """Bytes from a number with an optional binary unit (K, M, G, T; B or iB after it, any case).
    ValueError, with the text and an example, for anything else (a sign, an exponent, inf, nan)."""
    folded = text.strip().lower()
    match = SIZE_RE.fullmatch(folded) if len(folded) <= MAX_TEXT else None
    if match is None:
        raise ValueError(f"{text[:MAX_TEXT]!r} is not a size (e.g. 64G, 500M)")
    return int(float(match.group(1)) * UNITS[match.group(2)])  # at most 32 digits: always finite
