"""What this CPU can compute in bfloat16, read from the kernel's /proc/cpuinfo flags.

The development and CI machines change from one day to the next (Intel with AMX, AMD Zen 4
with AVX512-BF16 only), and the bf16 speed-up, peak and floors depend on which; so every
bf16 decision and every printed table asks here instead of assuming.
"""

from __future__ import annotations

from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")
MAX_CPUINFO_BYTES = 4 * 2**20  # a 512-CPU machine writes about 1 MB; read no further
BF16_FLAGS = ("amx_bf16", "amx_tile", "avx512_bf16")


def _first_cpu_field(text: str, field: str) -> str | None:
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == field:
            return value.strip()
    return None


def _read(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            return f.read(MAX_CPUINFO_BYTES).decode("utf-8", "replace")
    except OSError:
        return ""  # not Linux, or no /proc: no flag is known, so no bf16 is claimed


def _flags(text: str) -> frozenset[str]:
    flags = _first_cpu_field(text, "flags")
    return frozenset(flags.split()) if flags else frozenset()


def cpu_flags(path: Path = CPUINFO) -> frozenset[str]:
    """The feature flags of the first CPU listed (all cores of a node share them)."""
    return _flags(_read(path))


def cpu_model(path: Path = CPUINFO) -> str:
    """The model name of the first CPU listed ("unknown" if the kernel does not say)."""
    return _first_cpu_field(_read(path), "model name") or "unknown"


def bf16_support(flags: frozenset[str] | None = None) -> str | None:
    """ "amx" (AMX tiles with bf16), "avx512_bf16" (bf16 dot products in AVX-512) or None.

    None means bf16 would run emulated (converted to fp32 in software): slower than fp32.
    """
    flags = cpu_flags() if flags is None else flags
    if {"amx_bf16", "amx_tile"} <= flags:
        return "amx"
    if "avx512_bf16" in flags:
        return "avx512_bf16"
    return None


def describe(flags: frozenset[str] | None = None, path: Path = CPUINFO) -> str:
    """One line for tables and logs: model, bf16 unit and the flags that decide it."""
    text = _read(path)  # one read for the model and the flags
    flags = _flags(text) if flags is None else flags
    shown = [f for f in ("avx512f", *BF16_FLAGS) if f in flags]
    return (
        f"{_first_cpu_field(text, 'model name') or 'unknown'}; "
        f"bf16: {bf16_support(flags) or 'none (emulated)'}; "
        f"flags: {' '.join(shown) or 'none of avx512f/avx512_bf16/amx'}"
    )
