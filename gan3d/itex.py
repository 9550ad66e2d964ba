"""Whether Intel Extension for TensorFlow (ITEX) is loaded here, not only installed.

An installed ITEX may still not load: its library refuses CPUs and TensorFlow builds it was not
made for, and it may end the process while it does (a C++ check aborts, not a Python exception).
Loaded means mapped: TensorFlow loads ITEX's plugin (site-packages/tensorflow-plugins/
libitex_cpu.so) at its own import, and the plugin maps the kernel library for this CPU's ISA
(libitex_cpu_internal_avx512.so or _avx2.so); that library in /proc/self/maps is the evidence.
(ITEX's get_backend() is no evidence: the CPU build 2.15.0.0 answers "GPU".) So `gan3d train
--itex on` first asks a child Python (`python -m gan3d.itex`, the same interpreter) to import
TensorFlow and ITEX; the child's one JSON line says loaded or why not, with ITEX's own log lines
when it did not. A run that is refused names that reason in one line; a run that goes on checks
again in its own process. A run with --itex off records whether the plugin was loaded anyway.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import re
import subprocess
import sys
from dataclasses import asdict, dataclass
from importlib import metadata

from kit.boundedrun import run_bounded
from kit.excerpt import one_line

MODULE = "intel_extension_for_tensorflow"
DISTRIBUTION = "intel-extension-for-tensorflow"
PROBE_TIMEOUT = 600.0  # seconds: importing TensorFlow and ITEX on a loaded node takes 10-60 s
# bytes kept of each stream of the child: one JSON line, ITEX's last words
MAX_PROBE_OUTPUT = 64 << 10
# bytes of /proc/self/maps read (a TensorFlow process maps ~1,500 lines, ~200 KB)
MAX_MAPS = 8 << 20
KERNELS = re.compile(r"libitex_(?P<device>cpu|gpu|xpu)_internal_(?P<isa>[a-z0-9_]+)\.so")
NOT_INSTALLED = (
    f"{DISTRIBUTION} is not installed in this Python ({sys.executable}): "
    "the kit's main stack pins tensorflow-cpu, which ITEX cannot use; fix: "
    "run with the ITEX stack's Python (scripts/setup.sh --itex makes .venv-itex), or with --itex off"
)


@dataclass(frozen=True)
class ItexState:
    """What the results record under "itex": installed, loaded, and why not where it did not."""

    installed: bool
    loaded: bool
    version: str | None = None
    backend: str | None = None  # from the mapped kernel library: "CPU AVX512", "CPU AVX2"
    library: str | None = None  # that library's file name
    reason: str | None = None  # one line: why not loaded

    def record(self) -> dict:
        return asdict(self)


def installed() -> bool:
    return importlib.util.find_spec(MODULE) is not None


def kernel_library(maps: str) -> str | None:
    """The file name of ITEX's kernel library among a process's mappings, if one is mapped."""
    for line in maps.splitlines():
        name = line.rsplit("/", 1)[-1].strip() if "/" in line else ""
        if KERNELS.fullmatch(name):
            return name
    return None


def _mapped() -> str | None:
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as fh:
            return kernel_library(fh.read(MAX_MAPS))
    except OSError:
        return None


def _version() -> str | None:
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return None


def seen_here() -> ItexState:
    """Whether this process, TensorFlow imported, has ITEX's kernels mapped (without importing
    ITEX's Python package): TensorFlow loads an installed plugin by itself, --itex off or not."""
    if not installed():
        return ItexState(False, False)
    library = _mapped()
    if library is None:
        return ItexState(True, False, _version(), reason="ITEX's kernel library is not mapped")
    match = KERNELS.fullmatch(library)
    assert match is not None
    backend = f"{match['device'].upper()} {match['isa'].upper()}"
    return ItexState(
        installed=True, loaded=True, version=_version(), backend=backend, library=library
    )


def load_here() -> ItexState:
    """Import TensorFlow (which loads ITEX's plugin), then ITEX's Python package, in this process,
    and look for ITEX's kernel library among the mappings. An exception becomes the reason; an
    abort ends the process, which is why callers that must survive it use probe()."""
    if not installed():
        return ItexState(False, False, reason=NOT_INSTALLED)
    try:
        import tensorflow  # noqa: F401  its import loads site-packages/tensorflow-plugins/

        importlib.import_module(MODULE)
    except Exception as exc:  # the plugin's own error, whatever its type, is the reason
        return ItexState(
            True, False, _version(), reason=one_line(f"{type(exc).__name__}: {exc}", 400)
        )
    state = seen_here()
    if not state.loaded:
        return ItexState(
            True,
            False,
            state.version,
            reason="ITEX imported, but no ITEX kernel library (libitex_cpu_internal_*.so) "
            "is mapped: TensorFlow did not load its plugin for this CPU",
        )
    return state


def _last_words(text: str) -> str:
    """ITEX's (or TensorFlow's) message from a child that died: its last non-empty lines."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return one_line(" | ".join(lines[-3:]), 400, tail=True) if lines else "(no output)"


def _itex_said(err: str) -> str:
    """ITEX's own log lines (its C++ logs name their source file under itex/)."""
    lines = [line.strip() for line in err.splitlines() if "itex" in line.lower()]
    return one_line(" | ".join(lines[-3:]), 400, tail=True) if lines else ""


def parse_probe(
    code: int | None, out: str, err: str, *, waited: float = PROBE_TIMEOUT
) -> ItexState:
    """The child's answer: its JSON line when it has one (a refusal with ITEX's own log lines
    added), else why it ended (exit or signal, or None: not within ``waited`` s; and its last
    words)."""
    texts = ("version", "backend", "library", "reason")
    for line in reversed(out.splitlines()):
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if (
            isinstance(doc, dict)
            and isinstance(doc.get("loaded"), bool)
            and all(isinstance(doc.get(k), (str, type(None))) for k in texts)
        ):
            values = {k: None if doc.get(k) is None else one_line(doc[k], 400) for k in texts}
            said = "" if doc["loaded"] else _itex_said(err)
            if said:
                values["reason"] = f"{values['reason']}; ITEX said: {said}"
            return ItexState(doc.get("installed") is True, doc["loaded"], **values)
    if code is None:
        how = f"did not answer in {waited:g} s"
    elif code < 0:
        how = f"was killed by signal {-code}"
    else:
        how = f"ended with exit {code}"
    return ItexState(True, False, reason=f"importing ITEX {how}: {_last_words(err + out)}")


def probe(python: str = sys.executable, timeout: float = PROBE_TIMEOUT) -> ItexState:
    """load_here() in a child Python, so an ITEX that aborts on this CPU is a reason, not a
    dead rank."""
    if python == sys.executable and not installed():
        return ItexState(False, False, reason=NOT_INSTALLED)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="0")  # ITEX's own lines, whatever their level
    cmd = [python, "-m", "gan3d.itex", "--json"]
    try:
        done = run_bounded(cmd, timeout=timeout, limit=MAX_PROBE_OUTPUT, env=env)
    except subprocess.TimeoutExpired as exc:
        return parse_probe(None, _text(exc.output), _text(exc.stderr), waited=timeout)
    except OSError as exc:
        return ItexState(False, False, reason=f"{python}: {exc.strerror}")
    return parse_probe(done.returncode, done.out, done.err)


def _text(data: bytes | None) -> str:
    return (data or b"").decode(errors="replace")


def main(argv: list[str] | None = None) -> int:
    """`python -m gan3d.itex [--json] [--probe]`: one line, loaded or why not; exit 0 only when
    loaded. --probe: asked of a child (an abort is a reason; TensorFlow's log stays the child's)."""
    argv = sys.argv[1:] if argv is None else argv
    state = probe() if "--probe" in argv else load_here()
    if "--json" in argv:
        print(json.dumps(state.record()), flush=True)
    elif state.loaded:
        print(f"intel-extension-for-tensorflow {state.version} loaded (backend {state.backend})")
    else:
        print(state.reason)
    return 0 if state.loaded else 1


if __name__ == "__main__":
    sys.exit(main())
