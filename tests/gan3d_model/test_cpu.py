"""CPU flag detection that decides whether bf16 runs natively (gan3d.cpu)."""

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from gan3d import cpu

ZEN4 = "fpu sse2 avx2 fma avx512f avx512bw avx512_bf16 avx512_vnni"
SAPPHIRE = "fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile amx_int8"


def _cpuinfo(tmp_path: Path, flags: str, model: str = "Test CPU", cpus: int = 2) -> Path:
    block = f"processor\t: {{i}}\nmodel name\t: {model}\nflags\t\t: {flags}\n\n"
    path = tmp_path / "cpuinfo"
    path.write_text("".join(block.format(i=i) for i in range(cpus)))
    return path


def test_flags_of_a_zen4_and_an_amx_machine(tmp_path):
    zen4 = cpu.cpu_flags(_cpuinfo(tmp_path, ZEN4, "AMD EPYC 9554"))
    assert "avx512_bf16" in zen4 and "amx_bf16" not in zen4
    assert cpu.bf16_support(zen4) == "avx512_bf16"
    assert cpu.bf16_support(cpu.cpu_flags(_cpuinfo(tmp_path, SAPPHIRE))) == "amx"
    assert cpu.bf16_support(frozenset({"avx2", "avx512f"})) is None
    # amx_bf16 without tiles enabled (amx_tile missing) is not AMX compute
    assert cpu.bf16_support(frozenset({"amx_bf16", "avx512_bf16"})) == "avx512_bf16"


def test_describe_names_model_unit_and_flags(tmp_path):
    path = _cpuinfo(tmp_path, ZEN4, "AMD EPYC 9554")
    line = cpu.describe(path=path)
    assert line.startswith("AMD EPYC 9554; bf16: avx512_bf16;")
    assert "avx512f" in line and "amx" not in line.split("flags:")[1]
    assert "none (emulated)" in cpu.describe(
        cpu.cpu_flags(_cpuinfo(tmp_path, "sse2 avx2")), path=path
    )


def test_missing_or_empty_cpuinfo_claims_no_bf16(tmp_path):
    assert cpu.cpu_flags(tmp_path / "absent") == frozenset()
    (tmp_path / "empty").write_text("")
    assert cpu.bf16_support(cpu.cpu_flags(tmp_path / "empty")) is None
    assert cpu.cpu_model(tmp_path / "empty") == "unknown"


@given(
    st.lists(
        st.sampled_from(["avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "sse4_2"]),
        max_size=6,
    )
)
def test_bf16_unit_follows_the_flags(flags):
    got = cpu.bf16_support(frozenset(flags))
    has_amx = {"amx_bf16", "amx_tile"} <= set(flags)
    assert got == ("amx" if has_amx else "avx512_bf16" if "avx512_bf16" in flags else None)


def test_this_machine_is_read():
    """The real /proc/cpuinfo: on Linux every x86 or Arm kernel lists some flags."""
    if not cpu.CPUINFO.exists():
        return
    text = cpu.CPUINFO.read_text()
    if "flags" in text:
        assert cpu.cpu_flags() and cpu.bf16_support() == cpu.bf16_support(cpu.cpu_flags())
