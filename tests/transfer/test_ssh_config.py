"""Endpoint resolution from a user's ~/.ssh/config (no server needed: pure config logic)."""

from __future__ import annotations

from pathlib import Path

from kit.transfer.ssh import resolve, ssh_argv


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config"
    path.write_text(text)
    return path


def test_alias_port_user_keys_and_proxyjump(tmp_path):
    cfg = write(
        tmp_path,
        "Host site\n  HostName login.site.example\n  Port 2222\n  User alice\n"
        "  IdentityFile /keys/site\n  IdentitiesOnly yes\n  UserKnownHostsFile /kh/site\n"
        "  ProxyJump gw\n"
        "Host gw\n  HostName gw.site.example\n  User bob\n  UserKnownHostsFile /kh/gw\n",
    )
    ep = resolve("site", ssh_config=cfg)
    assert (ep.hostname, ep.port, ep.user) == ("login.site.example", 2222, "alice")
    assert ep.identity_files == ["/keys/site"] and ep.identities_only
    assert [str(p) for p in ep.known_hosts] == ["/kh/site"]
    assert ep.host_key_name == "[login.site.example]:2222"
    assert (ep.jump.hostname, ep.jump.user, ep.jump.port) == ("gw.site.example", "bob", 22)
    argv = ssh_argv(ep)
    proxy = next(a for a in argv if a.startswith("ProxyCommand="))
    assert "-W" in proxy and "gw" in proxy and "/kh/gw" in proxy
    assert argv[-1] == "site" and "StrictHostKeyChecking=yes" in argv and "BatchMode=yes" in argv


def test_explicit_values_win_and_no_config(tmp_path):
    cfg = write(
        tmp_path,
        "Host site\n  HostName login.site.example\n  Port 2222\n  User alice\n"
        "  Ciphers chacha20-poly1305@openssh.com\n",
    )
    ep = resolve("site", user="carol", port=22022, jump="dave@gw2:2200", ssh_config=cfg)
    assert (ep.user, ep.port) == ("carol", 22022)
    assert (ep.jump.user, ep.jump.hostname, ep.jump.port) == ("dave", "gw2", 2200)
    assert not any(a.startswith("Ciphers=") for a in ssh_argv(ep)), "the user's Ciphers line wins"
    bare = resolve("plain.example", ssh_config=tmp_path / "missing")
    assert bare.hostname == "plain.example" and bare.port == 22 and bare.jump is None
    assert "ProxyJump=none" in ssh_argv(bare)


def test_unreachable_host_is_a_clear_error(tmp_path):
    """No IdentityFile anywhere and nothing listening: a KitError naming the endpoint."""
    import pytest

    from kit.errors import KitError
    from kit.transfer.ssh import connect
    from tests.support.ports import free_port

    port = free_port()  # nothing listens there
    ep = resolve("127.0.0.1", port=port, ssh_config=tmp_path / "missing")
    with pytest.raises(KitError, match=f"cannot reach .*127.0.0.1:{port}"):
        connect(ep, timeout=5)
