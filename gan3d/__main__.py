"""`python -m gan3d COMMAND ...`: each command lives in its own module with main(argv)."""

from __future__ import annotations

import importlib
import sys

from kit import interrupt
from kit.crash import EXIT_ERROR, debug_requested, environment_problem, report_bug
from kit.extras import missing_extra
from kit.scratch import use_private_tempdir

COMMANDS = {
    "train": ("gan3d.train", "train the 3DGAN (Horovod data-parallel, hybrid MPI/OpenMP)"),
    "simulate": ("gan3d.simulate", "write synthetic calorimeter showers in the CLIC HDF5 layout"),
    "validate": ("gan3d.validate", "compare generated showers with data showers (physics check)"),
    "flops": ("gan3d.flops", "print the FLOP of one training step by phase as JSON"),
    "peak": ("gan3d.peak", "measure the dense-kernel FLOP/s peak of this machine"),
    "demo": ("gan3d.demo", "simulate, train with 2 ranks on a site, and print a summary"),
}


def main(argv: list[str] | None = None, own_tempdir: bool = False) -> int:
    """``own_tempdir``: as a program, every temporary file goes in a directory of the process's own
    (kit.scratch); a caller in-process (a test) keeps its temporary directory."""
    debug, argv = debug_requested(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:
        print("usage: python -m gan3d {" + ",".join(COMMANDS) + "} ...\n", file=sys.stderr)
        for name, (_, text) in COMMANDS.items():
            print(f"  {name:9s} {text}", file=sys.stderr)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    interrupt.install()
    try:
        if own_tempdir:
            use_private_tempdir("gan3d")
        module = importlib.import_module(COMMANDS[argv[0]][0])
        return int(module.main(argv[1:]) or 0)
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (kit.interrupt.Terminated)
        print(f"gan3d {argv[0]}: {interrupt.signal_name(exc)}", file=sys.stderr)
        return interrupt.exit_status(exc)
    except Exception as exc:  # anything else is a bug
        problem = missing_extra(exc, f"gan3d {argv[0]}") or environment_problem(exc)
        if problem is not None:  # a missing extra, a read-only or full output directory: one line
            print(f"gan3d {argv[0]}: error: {problem}", file=sys.stderr)
            return EXIT_ERROR
        return report_bug(f"gan3d-{argv[0]}", exc, debug)


if __name__ == "__main__":
    sys.exit(main(own_tempdir=True))
