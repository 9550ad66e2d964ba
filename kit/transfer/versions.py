"""`kit transfer versions|rollback`: what is installed on the site, and going back to it.

`push --install` keeps the N previous versions of an image next to the current one for this:
when a new image misbehaves at scale, `rollback` points NAME.current back at the version
before it (or at a named one) in one atomic rename, with no upload and no unpacking.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from kit.errors import KitError
from kit.excerpt import shown
from kit.image_names import image_name
from kit.site import load_site
from kit.transfer import remote
from kit.transfer.remote_common import EXIT_REFUSED, EXIT_USAGE
from kit.transfer.ssh import connect, site_endpoint


@dataclass
class Installed:
    entry: str  # NAME@<sha12> (a directory), NAME@<sha12>.sqfs or NAME@<sha12>.sif
    current: bool
    format: str  # dir | squash | sif
    installed: float  # mtime on the site: install order


@dataclass
class Versions:
    name: str  # as installed (gan3d for gan3d.sqfs)
    where: str
    current: str | None
    versions: list[Installed]  # newest first

    def document(self) -> dict:
        """The body of `kit transfer versions --json` (kit-transfer-versions/1): these fields, as
        named.
        """
        return asdict(self)


@dataclass
class Switch:
    current: str  # the NAME.current link that was (or would be) switched
    previous: str | None
    target: str
    dry_run: bool


LISTED = {"dir": str, "current": (str, type(None)), "versions": list}
SWITCHED = {"current": str, "previous": (str, type(None))}
CALL_TIMEOUT = 600  # s: a listing, or a switch that may wait for an install's lock
# the fixes of the listing's failures where the directory is container.image_dir (remote.FIXES)
LISTING_FIXES = {
    EXIT_USAGE: "check that the login user can read container.image_dir on that host",
    EXIT_REFUSED: "move what the line names aside on that host (the kit leaves it alone), "
    "or set container.image_dir in the site config to another directory",
}


def _connection(site, host, user, port, ssh_config, accept_new_host_key):
    site = load_site(site)
    ep = site_endpoint(site.transfer, host=host, user=user, port=port, ssh_config=ssh_config)
    return site, connect(ep, accept_new_host_key=accept_new_host_key)


def _list(conn, site, name: str) -> tuple[str, Versions]:
    imgdir = remote.remote_path(site.container.image_dir)
    what, where = f"listing {name}", f"{conn.host}:{imgdir}"
    answer = remote.run(
        conn,
        "versions",
        imgdir,
        name,
        what=what,
        where=where,
        schema=LISTED,
        timeout=CALL_TIMEOUT,
        fixes=LISTING_FIXES,
    )
    item: dict[str, type | tuple[type, ...]] = {
        "entry": str,
        "current": bool,
        "format": str,
        "installed": (int, float),
    }
    if not all(
        isinstance(v, dict)
        and set(v) == set(item)
        and all(remote.fits(v[k], t) for k, t in item.items())
        for v in answer["versions"]
    ):
        raise KitError(
            f"{what}: unexpected answer from the remote side: {shown(answer, 300)}",
            fix=remote.ODD_ANSWER_FIX,
            where=where,
        )
    return imgdir, Versions(
        name,
        f"{conn.host}:{answer['dir']}",
        answer["current"],
        [Installed(**v) for v in answer["versions"]],
    )


def installed_versions(
    name: str,
    site,
    *,
    host: str | None = None,
    user: str | None = None,
    port: int | None = None,
    ssh_config: Path | None = None,
    accept_new_host_key: bool = False,
) -> Versions:
    """The installed versions of image NAME in the site's container.image_dir."""
    name = image_name(name)
    site, conn = _connection(site, host, user, port, ssh_config, accept_new_host_key)
    with conn:
        return _list(conn, site, name)[1]


def pick(versions: Versions, name: str, to: str | None) -> str:
    """The entry to switch to: `to` (entry name or sha prefix), else the one installed before
    current.
    """
    entries = [v.entry for v in versions.versions]
    # an empty --to (a script's unset variable) names nothing: never "the one before"
    if to is not None:
        found = [
            e
            for e in entries  # NAME@SHA names a SquashFS or SIF version (NAME@SHA.sqfs) too
            if to.strip() and (to in (e, _bare(e)) or e.split("@", 1)[1].startswith(to))
        ]
        if len(found) != 1:
            matched = f"matches {', '.join(found)}" if found else "matches no version"
            raise KitError(
                f"--to {to}: {matched} of {name} in {versions.where}; "
                f"installed: {', '.join(entries) or 'none'}",
                fix="give --to one installed version: NAME@SHA, or a SHA prefix that names only it",
            )
        return found[0]
    if versions.current not in entries:
        raise KitError(
            f"{name} has no current version in {versions.where}; "
            f"installed: {', '.join(entries) or 'none'}",
            fix="pick one with --to VERSION (NAME@SHA or a SHA prefix)",
        )
    older = entries[entries.index(versions.current) + 1 :]
    if not older:
        raise KitError(
            f"{versions.current} is the oldest version of {name} kept in {versions.where}; "
            "there is nothing to roll back to",
            fix="to switch to a newer one, name it with --to; "
            f"kit transfer versions {name} lists them",
        )
    return older[0]


def _bare(entry: str) -> str:
    """NAME@SHA of an installed version (a file version's .sqfs or .sif dropped)."""
    return entry.removesuffix(".sqfs").removesuffix(".sif")


def rollback(
    name: str,
    site,
    *,
    to: str | None = None,
    dry_run: bool = False,
    host: str | None = None,
    user: str | None = None,
    port: int | None = None,
    ssh_config: Path | None = None,
    accept_new_host_key: bool = False,
) -> Switch:
    """Point NAME.current at the version installed before the current one (or at `to`)."""
    name = image_name(name)
    site, conn = _connection(site, host, user, port, ssh_config, accept_new_host_key)
    with conn:
        imgdir, versions = _list(conn, site, name)
        target = pick(versions, name, to)
        done = remote.run(
            conn,
            "switch",
            imgdir,
            name,
            target,
            "1" if dry_run else "0",
            what=f"switching {name}",
            where=versions.where,
            schema=SWITCHED,
            timeout=CALL_TIMEOUT,
            fixes={
                EXIT_USAGE: f"list the installed versions again (kit transfer versions {name}) "
                "and pick one with --to",
            },
        )
    return Switch(f"{conn.host}:{done['current']}", done["previous"], target, dry_run)
