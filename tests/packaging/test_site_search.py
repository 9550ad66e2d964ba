"""A site *name* is looked up in $KIT_SITE_PATH (in order), then the user's ~/.config/kit/sites
($XDG_CONFIG_HOME), then the configs shipped with the kit; the first match wins. A path is
never searched."""

from __future__ import annotations

from pathlib import Path

import pytest

from kit.site import load_site, resolve_site
from kit.site.load import SHIPPED_DIR, search_dirs

LAPTOP = (SHIPPED_DIR / "laptop.yaml").read_text()


def own_laptop(directory: Path, description: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "laptop.yaml"
    path.write_text(LAPTOP.replace("description:", f"description: {description} #", 1))
    return path


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.delenv("KIT_SITE_PATH", raising=False)
    return tmp_path / "home"


def test_the_users_config_dir_overrides_a_shipped_site_of_the_same_name(home):
    assert resolve_site("laptop") == SHIPPED_DIR / "laptop.yaml"
    mine = own_laptop(home / ".config" / "kit" / "sites", "mine")
    assert resolve_site("laptop") == mine and load_site("laptop").description.startswith("mine")


def test_kit_site_path_comes_first_in_its_own_order(home, tmp_path, monkeypatch):
    own_laptop(home / ".config" / "kit" / "sites", "user")
    first, second = own_laptop(tmp_path / "a", "a"), own_laptop(tmp_path / "b", "b")
    monkeypatch.setenv("KIT_SITE_PATH", f"{tmp_path / 'b'}:{tmp_path / 'a'}")
    assert resolve_site("laptop") == second
    monkeypatch.setenv("KIT_SITE_PATH", f"{tmp_path / 'a'}:{tmp_path / 'b'}")
    assert resolve_site("laptop") == first
    assert search_dirs() == [
        tmp_path / "a",
        tmp_path / "b",
        home / ".config" / "kit" / "sites",
        SHIPPED_DIR,
    ]


@pytest.mark.parametrize(
    "xdg, expected", [("/srv/conf", "/srv/conf/kit/sites"), ("relative/conf", None), ("", None)]
)
def test_xdg_config_home_is_used_only_when_absolute(home, monkeypatch, xdg, expected):
    monkeypatch.setenv("XDG_CONFIG_HOME", xdg)
    assert search_dirs()[-2] == Path(expected or home / ".config" / "kit" / "sites")


def test_a_path_is_never_searched(home, tmp_path, monkeypatch):
    own_laptop(home / ".config" / "kit" / "sites", "user")
    monkeypatch.chdir(tmp_path)
    explicit = own_laptop(tmp_path / "here", "explicit")
    assert resolve_site("here/laptop.yaml") == Path("here/laptop.yaml") and explicit.is_file()
    assert load_site("here/laptop.yaml").description.startswith("explicit")
