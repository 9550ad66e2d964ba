"""A process's own temporary directory, gone however the process ends short of SIGKILL.

TensorFlow's AutoGraph writes every function it converts as a `__autograph_generated_file*.py` in
the temporary directory and removes it at exit: a rank that ends by os._exit (kit.interrupt's
watcher, when a stop is never heard because the main thread is stuck in a collective) left dozens
of them in /tmp per run. Pointed at a directory of its own, the process leaves none, and a
SIGKILLed one leaves one directory, named for the program and its pid, instead of a scatter.
"""

from __future__ import annotations

import atexit
import os
import tempfile

from kit import interrupt
from kit.atomic import remove_tree


def use_private_tempdir(program: str) -> str:
    """Make a directory of this process's own under the temporary directory, the default of every
    ``tempfile`` call from now on; removed at exit and before kit.interrupt ends a stuck process."""
    path = tempfile.mkdtemp(prefix=f"{program}-{os.getpid()}-", dir=tempfile.gettempdir())
    tempfile.tempdir = path
    atexit.register(remove_tree, path)
    interrupt.before_abandoning(lambda: remove_tree(path))
    return path
