"""`python -m gan3d train --data` naming nothing that exists: one line, exit 1, before any slow
start-up.
"""

from pathlib import Path

from tests.support.training import train


def test_a_missing_data_path_is_not_found(tmp_path: Path):
    missing = tmp_path / "missing"
    proc = train(["--data", str(missing), "--preset", "tiny", "--threads", "1"], timeout=60)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert (
        lines == [line for line in lines if line.startswith("gan3d train: error:")]
        and len(lines) == 1
    ), lines
    assert f"gan3d train: error: not found: {missing} " in lines[0] and "hold out" not in lines[0]
