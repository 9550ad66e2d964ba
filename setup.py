"""setuptools reads the project from pyproject.toml; this adds one build step: the wheel names the
git commit it was built from (kit/build_commit.json, kit.code_commit.RECORD), written into the
build tree, never into the source, so an installed kit without a checkout still knows its commit."""

from __future__ import annotations

import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

SOURCE = Path(__file__).resolve().parent


class build_py_with_commit(build_py):
    """build_py, then the source checkout's commit recorded in the built kit package. A source
    that carries a record already (`kit image build`'s staged context, no .git) keeps its own;
    a source that is no checkout leaves none (the kit then reports the commit as unknown)."""

    def run(self) -> None:
        super().run()
        sys.path.insert(0, str(SOURCE))  # kit.code_commit needs only the standard library
        from kit.code_commit import RECORD, record_commit

        built = Path(self.build_lib) / "kit"
        if (SOURCE / "kit" / RECORD).exists():
            return
        (built / RECORD).unlink(missing_ok=True)  # an earlier build's, in a reused build dir
        record_commit(built, SOURCE / "kit")


setup(cmdclass={"build_py": build_py_with_commit})
