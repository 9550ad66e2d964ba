"""Shipped files travel with the package: a wheel carries them, an editable install reads the
source of truth through kit/_data's links, and no module finds anything by the checkout's path."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.support.installs import outside_env, run
from tests.support.paths import REPO

SHIPPED = (
    "site-configs",
    "slurm",
    "images",
    "studies",
    "constraints.txt",
    "constraints-itex.txt",
    "pyproject.toml",
    "README.md",
    "docs",
)


def tracked(*paths: str) -> list[str]:
    return subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-s", *paths],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()


def test_kit_data_links_to_the_top_level_sources_and_copies_nothing():
    from kit.data import shipped

    entries = tracked("kit/_data")
    assert sorted(line.split("\t")[1] for line in entries) == sorted(
        f"kit/_data/{name}" for name in SHIPPED
    )
    assert all(line.startswith("120000 ") for line in entries), entries  # symlinks, not copies
    for name in SHIPPED:
        assert shipped(name).resolve() == (REPO / name).resolve()


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    done = run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(out),
            str(REPO),
        ],
        env=outside_env(),
    )
    assert done.returncode == 0, done.stderr
    [path] = out.glob("secure_site_kit-*.whl")
    return path


def test_the_wheel_carries_every_shipped_file_byte_for_byte(wheel):
    with zipfile.ZipFile(wheel) as whl:
        names = set(whl.namelist())
        sources = [p for p in REPO.joinpath("site-configs").iterdir()] + [
            p for p in REPO.joinpath("slurm").iterdir()
        ]
        sources += list(REPO.joinpath("images").iterdir()) + list(
            REPO.joinpath("studies").iterdir()
        )
        sources += [REPO / "constraints.txt", REPO / "constraints-itex.txt"]
        sources += [REPO / "pyproject.toml", REPO / "README.md"]
        sources += sorted(REPO.joinpath("docs").rglob("*.md"))  # `kit docs`
        for source in sources:
            name = f"kit/_data/{source.relative_to(REPO)}"
            assert name in names, name
            assert whl.read(name) == source.read_bytes(), name
        assert "kit/pins.py" in names and "gan3d/train.py" in names
        assert "kit/_data/docs/reference/cli.md" in names and not [
            n for n in names if n.startswith("kit/_data/docs/") and not n.endswith(".md")
        ]  # the pages, not the example report's figures


def test_the_wheel_installed_outside_the_checkout_finds_its_sites_template_and_recipes(
    wheel, tmp_path
):
    """A --target install with only the core's libraries borrowed from this venv: what a user of
    the wheel has, minus pip's resolution (tests/packaging/test_offline_install.py does that)."""
    target = tmp_path / "site-packages"
    done = run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            "--target",
            str(target),
            str(wheel),
        ],
        env=outside_env(),
    )
    assert done.returncode == 0, done.stderr
    work = tmp_path / "elsewhere"
    work.mkdir()
    probe = (
        "import kit.site.load as l, kit.slurm.script as s, kit.image.build as b, "
        "kit.data as d;print(l.available_sites()); print(s._template().template[:9]); "
        "print(b.RECIPES);print(d.shipped('constraints.txt').read_text()[:1]);import kit.docs as k; "
        "print(k.topics()['security'], k.title('security'))"
    )
    paths = f"{target}:{':'.join(p for p in sys.path if p.endswith('site-packages'))}"
    done = run([sys.executable, "-c", probe], cwd=work, env=outside_env(PYTHONPATH=paths))
    assert done.returncode == 0, done.stderr
    sites, template, recipes, _, security = done.stdout.splitlines()
    assert sites == str(["intel-lab", "laptop", "openmpi-cluster", "stampede2", "supermuc-ng"])
    assert (
        template.startswith("#!")
        and recipes.startswith(str(target))
        and str(REPO) not in done.stdout
    )
    assert security.startswith(f"{target}/kit/_data/docs/security.md Security")


def test_an_editable_install_reads_the_top_level_sources(tmp_path):
    """`pip install -e` (scripts/setup.sh): edits to site-configs/ show without a reinstall."""
    venv = tmp_path / "venv"
    assert run([sys.executable, "-m", "venv", str(venv)]).returncode == 0
    # As setup.sh does it (build isolation fetches setuptools); the kit's libraries come from this venv.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = run([str(venv / "bin" / "pip"), "install", "-q", "--no-deps", "-e", str(REPO)], env=env)
    assert done.returncode == 0, done.stderr
    work = tmp_path / "elsewhere"
    work.mkdir()
    libs = ":".join(p for p in sys.path if p.endswith("site-packages"))
    done = run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import sys; sys.path.append(sys.argv[1]); from kit.site import resolve_site; "
            "print(resolve_site('laptop').resolve())",
            libs,
        ],
        cwd=work,
        env=outside_env(),
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str((REPO / "site-configs" / "laptop.yaml").resolve())


def test_no_module_finds_files_by_the_checkout_path():
    """kit/ and gan3d/ name no parents[...] of a module and no REPO; __file__ only for siblings
    inside the package (the bundle's verifier, the remote script)."""
    allowed = {"kit/transfer/verify.py", "kit/transfer/bundle.py"}
    for path in sorted([*REPO.glob("kit/**/*.py"), *REPO.glob("gan3d/**/*.py")]):
        text, rel = path.read_text(), str(path.relative_to(REPO))
        assert not re.search(r"parents\[|\bREPO\b", text), rel
        assert "__file__" not in text or rel in allowed, rel


def test_kit_image_build_stages_what_the_recipe_copies_from_the_installed_kit(tmp_path):
    """No --context: the context is assembled from the installed kit (a wheel installed anywhere
    builds the same image), beside OUT under the kit's own name."""
    from kit.image.build import ITEX_LOCK, RECIPES, plan_build, stage_context

    plan = plan_build("supermuc-ng", tmp_path / "gan3d.tar", builder="buildah")
    assert plan.staged == tmp_path / ".gan3d.tar.context" and str(plan.staged) in plan.commands[0]
    context = stage_context(plan.staged)
    for recipe in RECIPES.glob("*.Dockerfile"):
        for line in recipe.read_text().splitlines():
            if line.startswith("COPY ") and not line.startswith("COPY --from="):
                for source in line.split()[1:-1]:  # ${LOCK}: either pin list
                    for lock in ("constraints.txt", ITEX_LOCK):
                        path = context / source.replace("${LOCK}", lock)
                        assert path.exists(), f"{recipe.name}: {line}"
    assert (context / "site-configs" / "supermuc-ng.yaml").read_bytes() == (
        REPO / "site-configs" / "supermuc-ng.yaml"
    ).read_bytes()
    assert (
        not list(context.rglob("__pycache__"))
        and not (context / "kit" / "_data" / "images").is_symlink()
    )


def test_the_staged_context_builds_the_kits_wheel_as_the_recipe_does_and_it_names_the_same_version(
    tmp_path,
):
    """The image's build stage runs `pip wheel --no-deps --no-build-isolation --no-index` on the
    staged context (no checkout, no network); installed, that wheel's `kit --version` is the
    version pyproject.toml states, the one the kit outside the image prints."""
    import tomllib

    from kit.image.build import stage_context

    context = stage_context(tmp_path / "context")
    assert not (context / "kit" / "_data" / "pyproject.toml").is_symlink()
    wheels, target = tmp_path / "wheels", tmp_path / "site-packages"
    done = run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-w",
            str(wheels),
            str(context),
        ],
        env=outside_env(),
    )
    assert done.returncode == 0, done.stderr
    [wheel] = wheels.glob("secure_site_kit-*.whl")
    done = run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            "--target",
            str(target),
            str(wheel),
        ],
        env=outside_env(),
    )
    assert done.returncode == 0, done.stderr
    libs = ":".join(p for p in sys.path if p.endswith("site-packages"))
    inside = run(
        [str(target / "bin" / "kit"), "--version"],
        cwd=tmp_path,
        env=outside_env(PYTHONPATH=f"{target}:{libs}"),
    )
    outside = run([sys.executable, "-m", "kit", "--version"], cwd=REPO)
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert inside.returncode == 0, inside.stderr
    assert (
        inside.stdout.splitlines()[0]
        == outside.stdout.splitlines()[0]
        == f"kit (secure-site-kit) {version}"
    )
    head = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True
    )
    if (
        head.returncode == 0
    ):  # a checkout: the context records its commit (test_code_commit.py has the rest)
        assert inside.stdout.splitlines()[1].startswith(
            f"commit {head.stdout.strip()}: recorded at build time: "
        )


def test_the_staged_context_lives_only_during_the_build(tmp_path):
    """The builder sees the staged files; afterwards only OUT remains (also after a failed
    build).
    """
    from dataclasses import replace

    from kit.errors import KitError
    from kit.image.build import plan_build, run_build

    plan = plan_build("laptop", tmp_path / "img.tar", builder="buildah")
    seen = tmp_path / "seen"
    copy = ["sh", "-c", f'ls "{plan.staged}" > "{seen}" && echo archive > "{plan.part}"']
    assert (
        run_build(replace(plan, commands=[copy])) == plan.out
        and plan.out.read_text() == "archive\n"
    )
    assert set(seen.read_text().split()) == {
        "constraints.txt",
        "constraints-itex.txt",
        "gan3d",
        "kit",
        "site-configs",
        "slurm",
        "images",
        "pyproject.toml",
        "README.md",
    }
    assert sorted(p.name for p in tmp_path.iterdir()) == ["img.tar", "seen"]
    with pytest.raises(KitError, match="failed"):
        run_build(replace(plan, out=tmp_path / "other.tar", commands=[["sh", "-c", "exit 3"]]))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["img.tar", "seen"]


@pytest.mark.parametrize("planted", ["context-link", "part-link"])
def test_a_link_at_the_builds_own_names_is_refused_and_not_followed(tmp_path, planted):
    from dataclasses import replace

    from kit.errors import KitError
    from kit.image.build import plan_build, run_build

    plan = plan_build("laptop", tmp_path / "img.tar", builder="buildah")
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "kit").mkdir()
    (victim / "kit" / "mine.py").write_text("keep")
    (plan.staged if planted == "context-link" else plan.part).symlink_to(victim)
    with pytest.raises(KitError, match="not the file or directory a killed build"):
        run_build(replace(plan, commands=[["true"]]))
    assert (victim / "kit" / "mine.py").read_text() == "keep" and sorted(
        p.name for p in victim.iterdir()
    ) == ["kit"]
