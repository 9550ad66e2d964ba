"""Loading and validating site configs: shipped files load, broken ones name file, line and key."""

from pathlib import Path

import pytest

from kit.errors import KitError
from kit.site import SiteError, load_site

REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted((REPO / "site-configs").glob("*.yaml"))
LAPTOP = (REPO / "site-configs" / "laptop.yaml").read_text()


def write(tmp_path: Path, text: str, name: str = "broken.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_shipped_configs_validate_and_are_named_after_their_file(path):
    site = load_site(path)
    assert site.name == path.stem
    assert site.node.cores == site.node.sockets * site.node.cores_per_socket
    assert site.node.usable_memory_gb <= site.node.memory_gb


def test_paper_machines_have_the_papers_values():
    sng = load_site("supermuc-ng")
    assert (sng.node.sockets, sng.node.cores_per_socket, sng.node.cores) == (2, 24, 48)
    assert sng.node.memory_gb == 96 and sng.node.usable_memory_gb == 77
    assert (sng.node.numa_domains, sng.node.numa_domains_snc, sng.node.threads_per_core) == (
        2,
        4,
        2,
    )
    assert sng.network.island_nodes == 792 and sng.host_mpi.vendor == "intel"
    # The paper's own convention: 4.15 TFLOP/s per node = 48 x 2.7 GHz x 32 FP64 FLOP/cycle.
    assert sng.node.theoretical_peak_flops("fp64", clock="max") == pytest.approx(4.15e12, rel=1e-3)
    # FP32 at the 2.3 GHz production clock is what training is compared against.
    assert sng.node.theoretical_peak_flops() == pytest.approx(48 * 2.3e9 * 64)
    assert sng.peak_per_island() == pytest.approx(792 * 48 * 2.3e9 * 64)
    assert load_site("stampede2").node.cores == 48
    assert load_site("intel-lab").node.cores == 40


def test_peaks_come_per_precision_from_the_config_and_bad_precision_is_refused():
    sng = load_site("supermuc-ng").node
    fp64 = sng.theoretical_peak("fp64")
    assert (
        fp64.flops == pytest.approx(48 * 2.3e9 * 32)
        and fp64.basis == "48 cores x 2.3 GHz (avx clock) x 32 FP64 FLOP/cycle"
    )
    # Skylake-SP has no bf16 arithmetic: the config says null, and the peak is unknown, not guessed
    bf16 = sng.theoretical_peak("bf16")
    assert bf16.flops is None and "bf16_flop_per_cycle_per_core" in bf16.basis
    assert sng.theoretical_peak("fp32").times(4).flops == 4 * sng.theoretical_peak_flops("fp32")
    with pytest.raises(ValueError, match="fp32, bf16, fp64"):
        sng.theoretical_peak_flops("fp16")


def test_laptop_claims_no_clock_so_every_theoretical_peak_is_unknown():
    """The laptop site is a VM whose CPU changes between boots: no clock, no FLOP/cycle, no peak."""
    site = load_site("laptop")
    assert site.node.clock_ghz_avx is None and site.node.clock_ghz_max is None
    for precision in ("fp32", "bf16", "fp64"):
        for clock in ("avx", "max"):
            peak = site.node.theoretical_peak(precision, clock)
            assert peak.flops is None and peak.basis.startswith("unknown clock"), (precision, clock)
    assert site.peak_per_island() is None


def test_a_config_without_fp64_figures_gives_no_fp64_peak_rather_than_half_the_fp32_one(tmp_path):
    text = (REPO / "site-configs" / "supermuc-ng.yaml").read_text()
    lines = [
        line
        for line in text.splitlines()
        if not line.strip().startswith("fp64_flop_per_cycle_per_core")
    ]
    path = tmp_path / "sng.yaml"
    path.write_text("\n".join(lines).replace("name: supermuc-ng", "name: sng") + "\n")
    node = load_site(path).node
    assert node.theoretical_peak_flops("fp32") == pytest.approx(48 * 2.3e9 * 64)
    assert node.theoretical_peak_flops("fp64", "max") is None
    assert "fp64_flop_per_cycle_per_core" in node.theoretical_peak("fp64", "max").basis


def test_name_resolves_through_kit_site_path_first(tmp_path, monkeypatch):
    write(tmp_path, LAPTOP.replace("description: Local", "description: Override"), "laptop.yaml")
    monkeypatch.setenv("KIT_SITE_PATH", str(tmp_path))
    assert load_site("laptop").description.startswith("Override")
    monkeypatch.delenv("KIT_SITE_PATH")
    assert load_site("laptop").description.startswith("Local")


def test_unknown_name_lists_known_sites():
    with pytest.raises(SiteError, match=r"unknown site 'nowhere'.*supermuc-ng"):
        load_site("nowhere")


def test_wrong_type_names_file_line_key_and_expected_type(tmp_path):
    text = LAPTOP.replace("  sockets: 1", "  sockets: two")
    path = write(tmp_path, text)
    with pytest.raises(SiteError) as err:
        load_site(path)
    assert isinstance(err.value, KitError)
    assert f"{path}:{line_of(text, 'sockets: two')}: node.sockets: expected an integer" in str(
        err.value
    )


def test_unknown_key_suggests_the_right_one(tmp_path):
    text = LAPTOP.replace("  numa_domains: 1", "  numa_domain: 1")
    path = write(tmp_path, text)
    with pytest.raises(SiteError) as err:
        load_site(path)
    msg = str(err.value)
    assert (
        f"{path}:{line_of(text, 'numa_domain: 1')}: node.numa_domain: unknown key; "
        "did you mean 'numa_domains'?" in msg
    )
    assert "node.numa_domains: missing required key" in msg


def test_missing_required_key_and_bad_choice(tmp_path):
    text = LAPTOP.replace("  launcher: mpiexec\n", "").replace("type: local", "type: pbs")
    path = write(tmp_path, text)
    with pytest.raises(SiteError) as err:
        load_site(path)
    msg = str(err.value)
    assert "host_mpi.launcher: missing required key" in msg
    assert f":{line_of(text, 'type: pbs')}: scheduler.type: 'pbs' is not allowed" in msg
    assert "allowed: local, slurm" in msg


@pytest.mark.parametrize(
    "old,new,key,words",
    [
        (
            "  cores_per_socket: 2",
            "  cores_per_socket: -4",
            "node.cores_per_socket",
            "greater than 0",
        ),
        (
            "  usable_memory_gb: 20",
            "  usable_memory_gb: 30",
            "node.usable_memory_gb",
            "more than the node's memory_gb",
        ),
        ('max_walltime: "01:00:00"', "max_walltime: 1h", "scheduler.max_walltime", "HH:MM:SS"),
        ("  port: 22", "  port: 70000", "transfer.port", "outside 1..65535"),
        ("name: laptop", "name: Laptop Site", "name", "not a valid site name"),
    ],
)
def test_impossible_values_are_errors(tmp_path, old, new, key, words):
    text = LAPTOP.replace(old, new)
    assert text != LAPTOP
    path = write(tmp_path, text)
    with pytest.raises(SiteError) as err:
        load_site(path)
    assert f"{path}:{line_of(text, new.strip())}: {key}: " in str(err.value)
    assert words in str(err.value)


def test_broken_yaml_names_the_line(tmp_path):
    text = LAPTOP.replace("  sockets: 1", "  sockets: [1")
    path = write(tmp_path, text)
    with pytest.raises(SiteError, match=rf"{path}:\d+: not valid YAML"):
        load_site(path)


def test_duplicate_key_is_an_error(tmp_path):
    text = LAPTOP.replace("  sockets: 1", "  sockets: 1\n  sockets: 2")
    with pytest.raises(SiteError, match="node.sockets: duplicate key"):
        load_site(write(tmp_path, text))
