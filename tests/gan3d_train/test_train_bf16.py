"""`python -m gan3d train --precision bf16` for real (tiny preset, one rank): every convolution of
the run is a bf16 oneDNN primitive, it checkpoints, resumes bit for bit, and validates.

On a CPU without a bf16 unit the same runs use `--precision bf16-emulated` (oneDNN converts in
software); the refusal of plain `bf16` there is tested with the CPU flags replaced, since this
machine's flags cannot be changed.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gan3d import cpu
from tests.support.paths import REPO
from tests.support.training import train, train_env

PRECISION = "bf16" if cpu.bf16_support() else "bf16-emulated"


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    from gan3d.simulate import write_files

    return write_files(tmp_path_factory.mktemp("showers"), 3, 32, seed=8)


def _args(data, results: Path, *extra: str) -> list[str]:
    return [
        "--data",
        f"{data[0]},{data[1]}",
        "--validation-data",
        str(data[2]),
        "--preset",
        "tiny",
        "--batch-size",
        "4",
        "--steps-per-epoch",
        "2",
        "--validation-steps",
        "1",
        "--threads",
        "1",
        "--seed",
        "5",
        "--precision",
        PRECISION,
        "--deterministic",
        "--results",
        str(results),
        *extra,
    ]


def conv_primitives(stdout: str) -> list[list[str]]:
    """The fields of every oneDNN convolution primitive executed (ONEDNN_VERBOSE=1 lines)."""
    rows = [line.split(",") for line in stdout.splitlines() if line.startswith("onednn_verbose,")]
    return [f for f in rows if len(f) > 8 and f[1] == "exec" and f[3] == "convolution"]


def _dtypes(fields: list[str]) -> dict[str, str]:
    """{"src": "bf16", "wei": "bf16", ...} from a primitive's memory descriptors
    (src_bf16::blocked:...).
    """
    md = next(f for f in fields if f.startswith("src_"))
    return {
        part.split("_")[0]: part.split("_")[1].split(":")[0] for part in md.split() if "_" in part
    }


@pytest.fixture(scope="module")
def bf16_runs(data, tmp_path_factory):
    """Two epochs straight (with oneDNN's verbose log), and one epoch + a resumed second."""
    out = tmp_path_factory.mktemp("bf16")
    env = dict(train_env(), ONEDNN_VERBOSE="1")
    straight = subprocess.run(
        [sys.executable, "-m", "gan3d", "train", *_args(data, out / "a.json", "--epochs", "2")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert straight.returncode == 0, straight.stderr[-3000:]
    ckpt = ["--checkpoint-dir", str(out / "ckpt")]
    part1 = train(_args(data, out / "b1.json", "--epochs", "1", *ckpt))
    assert part1.returncode == 0, part1.stderr[-3000:]
    part2 = train(_args(data, out / "b2.json", "--epochs", "2", "--resume", *ckpt))
    assert part2.returncode == 0, part2.stderr[-3000:]
    return out, straight, part2


# TensorFlow hands bf16 convolutions to oneDNN only on a CPU with one of these; elsewhere (AVX2 only)
# its own kernels run them, and no oneDNN primitive is there to inspect.
ONEDNN_BF16_FLAGS = {"avx512f", "avx_ne_convert"}


def test_every_convolution_of_a_bf16_run_is_a_bf16_primitive(bf16_runs):
    if not ONEDNN_BF16_FLAGS & cpu.cpu_flags():
        pytest.skip(
            "oneDNN runs no bf16 convolution on a CPU without avx512f or avx_ne_convert "
            "(TensorFlow's own kernels do; the results' precision is checked below)"
        )
    _, straight, _ = bf16_runs
    convs = conv_primitives(straight.stdout)
    kinds = {f[5] for f in convs}
    assert {"forward_training", "backward_data", "backward_weights"} <= kinds, kinds
    fp32 = [",".join(f) for f in convs if {_dtypes(f)["src"], _dtypes(f)["wei"]} != {"bf16"}]
    assert not fp32, f"{len(fp32)} of {len(convs)} convolutions not in bf16, e.g. {fp32[0]}"


def test_results_and_checkpoint_say_bf16(bf16_runs):
    out, _, _ = bf16_runs
    r = json.loads((out / "a.json").read_text())
    assert r["precision"] == PRECISION and r["bf16_unit"] == cpu.bf16_support()
    assert (
        r["fft_convolutions"] == []
    )  # the fixed table (GAN3D_FORMS=fft) keeps a bf16 model's convolutions direct
    assert r["allreduce_dtype"] == "fp32"
    meta = json.loads((out / "ckpt" / "epoch-0002" / "meta.json").read_text())
    assert meta["precision"] == PRECISION


def test_bf16_resume_is_bit_identical(bf16_runs):
    out, _, part2 = bf16_runs
    a, b1, b2 = (json.loads((out / f).read_text()) for f in ("a.json", "b1.json", "b2.json"))
    assert b2["start_epoch"] == 1 and "resumed from" in part2.stdout
    assert b1["weights_sha256_per_rank"] != a["weights_sha256_per_rank"]
    assert b2["weights_sha256_per_rank"] == a["weights_sha256_per_rank"]
    assert b2["losses"][0]["train"] == a["losses"][1]["train"]


def test_validate_runs_the_bf16_checkpoint_in_bf16(bf16_runs, data):
    from gan3d import validate

    out, _, _ = bf16_runs
    code = validate.main(
        [
            "--data",
            str(data[2]),
            "--checkpoint",
            str(out / "ckpt"),
            "--out",
            str(out / "plots"),
            "--events",
            "32",
            "--results",
            str(out / "b2.json"),
        ]
    )
    assert code == 0
    physics = json.loads((out / "b2.json").read_text())["physics"]
    assert physics["precision"] == "bf16" and physics["preset"] == "tiny"
    # the score is on its fixed scale (held-out data 1, empty showers 0; a 6-step model may be below 0)
    raw, ref_data, empty = (
        physics["score_raw"],
        physics["score_reference_data"],
        physics["score_reference_empty"],
    )
    assert physics["score"] == pytest.approx((empty - raw) / (empty - ref_data))
    assert all(Path(p).is_file() for p in physics["plots"])


def test_bf16_is_refused_on_a_cpu_without_bf16(data, tmp_path):
    """The real CLI in a real process, with gan3d.cpu told the flags of an AVX2-only CPU (the one
    stand-in here: this machine's flags cannot change). bf16-emulated passing the same check is
    tests/gan3d_model/test_precision.py; it trains like the runs above."""
    probe = (
        "import sys, gan3d.cpu as c; c.cpu_flags = lambda path=None: frozenset({'avx2', 'fma'}); "
        "from gan3d.train import main; sys.exit(main(sys.argv[1:]))"
    )
    args = [
        a if a != PRECISION else "bf16" for a in _args(data, tmp_path / "r.json", "--epochs", "1")
    ]
    proc = subprocess.run(
        [sys.executable, "-c", probe, *args],
        cwd=REPO,
        env=train_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("gan3d train: error:")]
    assert len(lines) == 1 and "--precision bf16:" in lines[0] and "bf16-emulated" in lines[0], (
        proc.stderr
    )
    assert not (tmp_path / "r.json").exists()
