"""The demo's table, the first thing a newcomer sees run: it shows the % of the peaks the run can
back, in the run's own precision, and says in one line under it which peaks are unknown and why.
Records are built as `gan3d train` builds them (gan3d.results.peak_fields)."""

from pathlib import Path

from rich.console import Console

from gan3d.demo import peak_rows, print_summary
from gan3d.peak import site_peaks
from kit.site import load_site
from tests.support.records import RATE, record


def labels(rec: dict) -> list[str]:
    return [label for label, _ in peak_rows(rec)[0]]


def text(rec: dict, width: int = 250) -> str:
    console = Console(record=True, width=width)
    print_summary(console, rec, plots=None, results=Path("r.json"))
    return console.export_text()


def test_fp32_run_on_a_site_without_peaks_shows_the_measured_fp32_one_and_says_why():
    rec = record("laptop", "fp32")
    assert peak_rows(rec)[0] == [("% of measured matmul fp32 peak (200 GFLOP/s)", "25.0 %")]
    [note] = peak_rows(rec)[1]
    assert note == (
        "theoretical peaks unknown: the site config gives no clock_ghz_avx, "
        "no fp32_flop_per_cycle_per_core; the % above is of the fp32 peak measured here"
    )
    shown = text(rec)
    assert note in shown.splitlines() and note in text(rec, width=60).splitlines()  # never cut
    assert "unknown" not in shown.replace(note, "")
    assert "fp64" not in shown and "max clock" not in shown  # another precision's peak: no row


def test_bf16_run_on_a_site_stating_bf16_shows_its_bf16_peaks_only():
    node = site_peaks(load_site("laptop"))
    node["bf16"] = {
        "flop_per_second": 1e12,
        "basis": "8 cores x 2 GHz (avx clock) x 64 BF16 FLOP/cycle",
    }
    node["fp64"] = {
        "flop_per_second": 2.5e11,
        "basis": "8 cores x 2 GHz (avx clock) x 16 FP64 FLOP/cycle",
    }
    rec = record("lab", "bf16", node)
    rows, notes = peak_rows(rec)
    assert rows == [
        ("% of theoretical (site config) bf16 peak (1000 GFLOP/s)", "5.0 %"),
        ("% of measured matmul bf16 peak (400 GFLOP/s)", "12.5 %"),
    ]
    assert notes == [rec["peak_fp64_max_clock_basis"]]  # the paper's figure: why it is left out
    assert "no clock_ghz_max" in notes[0]


def test_the_papers_fp64_max_clock_figure_where_the_site_states_it():
    rec = record("supermuc-ng", "fp32")
    assert labels(rec) == [
        "% of theoretical (site config) fp32 peak (7066 GFLOP/s)",
        "% of measured matmul fp32 peak (200 GFLOP/s)",
        "% of FP64 peak at max clock (the paper's convention)",
    ]
    assert peak_rows(rec)[0][-1][1] == f"{100 * RATE / 4147.2e9:.1f} %"  # 48 x 2.7 GHz x 32
    assert peak_rows(rec)[1] == []
    assert "theoretical peaks unknown" not in text(rec)


def test_an_emulated_bf16_run_divides_by_the_fp32_peaks_it_ran_on():
    rec = record("laptop", "bf16-emulated")
    assert labels(rec) == ["% of measured matmul fp32 peak (200 GFLOP/s)"]


def test_a_disturbed_measurement_is_left_out_with_its_reason():
    rec = record("supermuc-ng", "fp32", rate=300e9)  # above the fp32 peak measured, 200 GFLOP/s
    assert not any("measured" in label for label in labels(rec))
    [note] = peak_rows(rec)[1]
    assert note.startswith(
        "no % of the measured fp32 peak: matmul loop; below the run's own FLOP/s"
    )


def test_frequency_domain_layers_add_one_short_model_flop_line():
    plain, fft = record("laptop", "fp32"), record("laptop", "fp32", fft_convolutions=["g1", "g2"])
    assert "model FLOP" not in text(plain)
    shown = text(fft)
    assert "GFLOP/s (job), model FLOP" in shown
    [line] = [
        line for line in shown.splitlines() if "model FLOP: 2 convolution(s) ran as FFTs" in line
    ]
    assert len(line.strip()) <= 110
