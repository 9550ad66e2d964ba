"""The shipped recipes, read as text (building them takes the network and ~15 minutes): the
final stage carries no toolchain, and the stack comes from the one pin list, minus test-only
pins, with its hashes checked."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import tomllib

from kit.image.build import RECIPES
from kit.pins import normalize

REPO = Path(__file__).resolve().parents[2]
# What compiles or fetches sources: it stays in the build stage.
BUILD_TOOLS = {
    "build-essential",
    "gcc",
    "g++",
    "cpp",
    "make",
    "cmake",
    "git",
    "autoconf",
    "automake",
    "libtool",
    "pkg-config",
    "python3-venv",
    "python3-pip",
    "gfortran",
    "mpich-dev",
}
RECIPE_FILES = sorted(RECIPES.glob("*.Dockerfile"))
VIA = re.compile(r"\s*#\s+(?:via\s+)?([A-Za-z0-9][A-Za-z0-9._-]*)(?: \(pyproject\.toml\))?")


def instructions(text: str) -> list[tuple[str, str]]:
    """(KEYWORD, arguments) per instruction, continuation lines joined, comments dropped."""
    out, current = [], ""
    for line in text.splitlines():
        if line.lstrip().startswith("#"):  # also inside a continued instruction
            continue
        current += line.rstrip().removesuffix("\\") + " " if line.rstrip().endswith("\\") else line
        if not line.rstrip().endswith("\\"):
            if current.strip():
                word, _, rest = current.strip().partition(" ")
                out.append((word.upper(), rest.strip()))
            current = ""
    return out


def stages(text: str) -> list[list[tuple[str, str]]]:
    """The instructions of each FROM stage (what precedes the first FROM is the global ARGs)."""
    found: list[list[tuple[str, str]]] = []
    for keyword, args in instructions(text):
        if keyword == "FROM":
            found.append([])
        if found:
            found[-1].append((keyword, args))
    return found


def apt_packages(stage: list[tuple[str, str]]) -> set[str]:
    packages = set()
    for keyword, args in stage:
        if keyword != "RUN":
            continue
        for command in re.split(r"&&|;|\|\|", args):
            words = shlex.split(command)
            if words[:2] in (["apt-get", "install"], ["apt", "install"]):
                packages |= {w for w in words[2:] if not w.startswith("-")}
    return packages


def global_args(text: str) -> dict[str, str]:
    args = {}
    for keyword, rest in instructions(text):
        if keyword == "FROM":
            break
        if keyword == "ARG":
            name, _, value = rest.partition("=")
            args[name] = value.strip('"')
    return args


def via(lock: Path) -> dict[str, set[str]]:
    """pin name -> the names that pull it in (the lock's `# via` comments)."""
    graph: dict[str, set[str]] = {}
    name = None
    for line in lock.read_text().splitlines():
        if re.match(r"[A-Za-z0-9]", line):
            name = normalize(line.split("==")[0])
            graph.setdefault(name, set())
        elif name and (m := VIA.fullmatch(line)) and m[1] != "via":
            graph[name].add(normalize(m[1]))
    return graph


def pip_runs(runs: str, verb: str) -> list[list[str]]:
    """The words after `pip VERB` of each pip command in these RUN arguments."""
    found = []
    for command in re.split(r"&&|;|\|\|", runs):
        words = shlex.split(command)
        for i, word in enumerate(words[:-1]):
            if word.rsplit("/", 1)[-1] == "pip" and words[i + 1] == verb:
                found.append(words[i + 2 :])
    return found


def requirement_names(items: list[str]) -> set[str]:
    return {normalize(re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", item)[0]) for item in items}


@pytest.mark.parametrize("recipe", RECIPE_FILES, ids=lambda p: p.name)
def test_the_final_stage_has_no_compiler_no_dev_package_no_build_tool(recipe):
    final = stages(recipe.read_text())[-1]
    packages = apt_packages(final)
    assert "python3" in packages  # the interpreter the copied venv links to
    assert not {p for p in packages if p.endswith("-dev") or p in BUILD_TOOLS}, packages
    runs = " ".join(args for keyword, args in final if keyword == "RUN")
    assert "MPICC" not in runs and "pip wheel" not in runs  # nothing is compiled there
    for install in pip_runs(
        runs, "install"
    ):  # nothing fetched: only the kit's own wheel, from the build stage
        assert {"--no-index", "--no-deps"} <= set(install), install
        assert [w for w in install if not w.startswith("-")] == [
            "/opt/wheels/secure_site_kit-*.whl"
        ], install
    copies = [args for keyword, args in final if keyword == "COPY" and args.startswith("--from=")]
    assert any(args.split()[1:] == ["/opt/venv", "/opt/venv"] for args in copies), copies


@pytest.mark.parametrize("recipe", RECIPE_FILES, ids=lambda p: p.name)
def test_the_image_runs_the_kit_with_its_runtime_extras_from_the_pin_list(recipe):
    text = recipe.read_text()
    all_stages = stages(text)
    assert len(all_stages) >= 2, "one stage: the toolchain ships in the image"
    build_runs = " ".join(
        args for stage in all_stages[:-1] for keyword, args in stage if keyword == "RUN"
    )
    assert (
        "--require-hashes" in build_runs
        and "pins.py requirements /opt/gan3d/constraints.txt" in build_runs
    )
    declared = build_runs + " " + " ".join(global_args(text).values())
    excluded = {normalize(n) for n in re.findall(r"--exclude (\S+)", declared)}
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    runtime = requirement_names(project["dependencies"])
    for extra in ("report", "convert", "transfer", "train", "horovod"):
        runtime |= requirement_names(extras[extra])
    assert not (runtime - {"horovod"}) & excluded  # horovod: built apart, against the image's MPICH
    test_only = requirement_names(extras["test"])
    graph = via(REPO / "constraints.txt")
    for name in excluded - {"horovod"}:  # a test pin, or pulled in by test pins only
        assert name in test_only or graph[name] - {"secure-site-kit"} <= excluded, (
            name,
            graph[name],
        )
    # The kit is a real distribution in the image (`kit --version` names its version): its wheel is
    # built from the context's pyproject.toml in the build stage, installed in the final one.
    [wheel] = pip_runs(build_runs, "wheel")
    assert {"--no-deps", "--no-index"} <= set(wheel) and wheel[-1] == "/opt/src", wheel
    build_copies = [
        args.split() for stage in all_stages[:-1] for keyword, args in stage if keyword == "COPY"
    ]
    assert any(
        "pyproject.toml" in words[:-1] and words[-1] == "/opt/src/" for words in build_copies
    ), build_copies
    final = all_stages[-1]
    copies = [args for keyword, args in final if keyword == "COPY"]
    assert {"--from=build /opt/venv /opt/venv", "--from=build /opt/wheels /opt/wheels"} <= set(
        copies
    ), copies
    assert all(args.startswith("--from=build ") for args in copies), (
        copies
    )  # no source tree in the image
    final_runs = " ".join(args for keyword, args in final if keyword == "RUN")
    assert (
        len(pip_runs(final_runs, "install")) == 1
    )  # the kit's wheel (checked above: no index, no deps)
    assert not any(
        "PYTHONPATH" in args for keyword, args in final if keyword == "ENV"
    )  # no source tree on a path
