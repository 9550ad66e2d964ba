"""Run `python -m MODULE ARGS...` in this process and send it a real signal (os.kill) at a chosen
moment: the Nth Python audit event EVENT whose arguments mention NEEDLE (before that operation
runs). Set by KIT_TEST_SIGNAL_AT="EVENT|NEEDLE|N|SIGNAME"; that it fired is written (one line) to
the file KIT_TEST_SIGNAL_FIRED, so a test can tell a moment that never came from a clean run."""

from __future__ import annotations

import os
import runpy
import signal
import sys


def _arm() -> None:
    event, needle, nth, name = os.environ["KIT_TEST_SIGNAL_AT"].split("|")
    fired_file = os.environ["KIT_TEST_SIGNAL_FIRED"]
    state = {"seen": 0, "done": False}

    def hook(ev: str, args: tuple) -> None:
        if (
            state["done"]
            or ev != event
            or not any(
                needle in os.fsdecode(a) for a in args if isinstance(a, (str, bytes, os.PathLike))
            )
        ):
            return
        state["seen"] += 1
        if state["seen"] == int(nth):
            state["done"] = True
            with open(fired_file, "w") as fh:  # an "open" event too: done already
                fh.write(f"{ev} {args!r}\n")
            os.kill(os.getpid(), getattr(signal, name))

    sys.addaudithook(hook)


if __name__ == "__main__":
    _arm()
    module, sys.argv = sys.argv[1], sys.argv[1:]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
