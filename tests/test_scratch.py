"""kit.scratch: a process's private temporary directory, and the sweep that removes those of
processes that are gone (SIGKILLed) and nothing else."""

import fcntl
import os
import signal
import subprocess
import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from kit.scratch import LOCK_NAME, MAX_SWEPT, sweep_dead

ROOT = Path(__file__).resolve().parent.parent
CHILD = (
    "import sys, time\nfrom kit.scratch import use_private_tempdir\n"
    "print(use_private_tempdir('prog'), flush=True)\ntime.sleep(float(sys.argv[1]))\n"
)


def _start(tmp: Path, seconds: float) -> tuple[subprocess.Popen, Path]:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT), TMPDIR=str(tmp)),
    )
    return child, Path(child.stdout.readline().strip())


def test_the_next_start_removes_a_killed_process_directory_and_keeps_a_living_ones(tmp_path):
    killed, killed_dir = _start(tmp_path, 60)
    (killed_dir / "__autograph_generated_file1.py").write_text("x = 1\n")
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    assert killed_dir.is_dir()  # SIGKILL runs no clean-up
    living, living_dir = _start(tmp_path, 60)
    try:
        assert not killed_dir.exists()  # the living one's start swept it
        third, third_dir = _start(tmp_path, 0)
        third.wait(timeout=60)
        assert living_dir.is_dir() and (living_dir / LOCK_NAME).is_file()
        assert not third_dir.exists()  # an ordinary exit removes its own
    finally:
        living.kill()
        living.wait()


KINDS = ("dead", "alive", "no-lock", "file", "link-to-dead", "other-program", "bad-suffix")


@settings(max_examples=25, deadline=None)
@given(kinds=st.lists(st.sampled_from(KINDS), max_size=8))
def test_the_sweep_removes_exactly_the_dead_directories_it_made(tmp_path_factory, kinds):
    parent = tmp_path_factory.mktemp("sweep")
    held, expected_gone, made = [], set(), []
    for i, kind in enumerate(kinds):
        name = f"prog-{100 + i}-abcd_{i:03d}"
        path = parent / name
        if kind == "file":
            path.write_text("not a directory")
        elif kind == "link-to-dead":
            target = parent / f"elsewhere-{i}"
            target.mkdir()
            (target / LOCK_NAME).touch()
            path.symlink_to(target)
            made.append(target)
        else:
            if kind == "other-program":
                path = parent / f"other-{100 + i}-abcd_{i:03d}"
            elif kind == "bad-suffix":
                path = parent / f"prog-{100 + i}-abcd_{i:03d}\n"
            path.mkdir()
            (path / "__autograph_generated_file.py").write_text("")
            if kind != "no-lock":
                fd = os.open(path / LOCK_NAME, os.O_RDWR | os.O_CREAT)
                if kind == "alive":  # a lock held by a living process (here, another descriptor)
                    fcntl.flock(fd, fcntl.LOCK_EX)
                    held.append(fd)
                else:
                    os.close(fd)
            if kind == "dead":
                expected_gone.add(path.name)
        made.append(path)
    try:
        removed = sweep_dead(str(parent), "prog")
    finally:
        for fd in held:
            os.close(fd)
    assert set(removed) == expected_gone
    for path in made:
        assert path.exists() or path.is_symlink() or path.name in expected_gone
        assert path.name not in expected_gone or not path.exists()


def test_the_sweep_bounds_its_work(tmp_path):
    for i in range(MAX_SWEPT + 5):
        d = tmp_path / f"prog-{i}-aaaaaaa{i % 10}"
        d.mkdir(exist_ok=True)
        (d / LOCK_NAME).touch()
    assert len(sweep_dead(str(tmp_path), "prog")) == MAX_SWEPT
