"""A progress watchdog for the ssh data stream of a push.

A dead network is noticed by ssh's ServerAlive probes, but a live connection to a remote
side that stops moving bytes (a hung filesystem, a stuck receiver) would keep a push
waiting forever. The stream calls `tick()` whenever bytes move; after `stall` seconds
without one the ssh process is killed and `fired` tells the push why it ended.
"""

from __future__ import annotations

import subprocess
import threading
import time


class Watchdog:
    def __init__(self, proc: subprocess.Popen, stall: float):
        self.proc, self.stall, self.fired = proc, stall, False
        self._last = time.monotonic()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def tick(self, *_: object) -> None:
        self._last = time.monotonic()

    def _watch(self) -> None:
        while not self._done.wait(min(5.0, self.stall / 4)):
            if time.monotonic() - self._last > self.stall:
                self.fired = True
                self.proc.kill()
                return

    def stop(self) -> None:
        self._done.set()
        self._thread.join()
