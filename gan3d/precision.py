"""Which compute precision a run may use on this CPU, and what it computes the model in.

`--precision bf16` is refused on a CPU without bfloat16 arithmetic (no avx512_bf16, no AMX):
there oneDNN converts every bf16 operand to fp32 in software, so the run would be slower than
fp32 and less exact. `bf16-emulated` asks for exactly that on purpose (to test bf16 numerics
on any machine); its results say so, so that nobody divides its rate by a bf16 peak.
"""

from __future__ import annotations

from gan3d import cpu
from gan3d.runtime import SettingsError

CHOICES = ("fp32", "bf16", "bf16-emulated")
# Horovod 0.28's allreduce op takes no bfloat16 tensor (its TF kernel allows uint8, int8,
# int32, int64, half, float, double), so the 16-bit option on the wire is fp16 compression.
ALLREDUCE_DTYPES = ("fp32", "fp16")


def model_precision(choice: str) -> str:
    """The precision the layers compute in: "fp32" or "bf16" (emulated or not)."""
    if choice not in CHOICES:
        raise SettingsError(f"--precision {choice!r}: choose one of {', '.join(CHOICES)}")
    return "fp32" if choice == "fp32" else "bf16"


def check_supported(choice: str, flags: frozenset[str] | None = None) -> str | None:
    """The CPU's bf16 unit ("amx", "avx512_bf16") for a bf16 run, None otherwise.

    Raises SettingsError (one line) for "bf16" on a CPU whose flags show no bf16 unit.
    """
    model_precision(choice)
    unit = cpu.bf16_support(cpu.cpu_flags() if flags is None else flags)
    if choice == "bf16" and unit is None:
        raise SettingsError(
            "--precision bf16: "
            "this CPU has no bfloat16 unit (/proc/cpuinfo flags show neither avx512_bf16 nor amx_bf16), "
            "bf16 would run emulated and slower than fp32; fix: use --precision fp32, "
            "or --precision bf16-emulated to run it anyway"
        )
    return unit if choice != "fp32" else None
