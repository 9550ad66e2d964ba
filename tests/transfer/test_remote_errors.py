"""What the user sees when the site's script fails: its one line, relayed with where it failed
(HOST:DIR, apart for --json) and a fix for every exit status the script has: the caller's for its
place, else the kit's for the status, or the script's own where its line carries one."""

from __future__ import annotations

import pytest

from kit.transfer import remote, remote_common
from kit.transfer.remote_common import EXIT_NOSPACE, EXIT_REFUSED

WHERE = "login1:/scratch/images"


def refused(stderr: str, exited: int, fixes: dict[int, str] | None = None) -> remote.RemoteError:
    with pytest.raises(remote.RemoteError) as err:
        remote.parse("", stderr, exited, what="upload of g.tar.gz", where=WHERE, fixes=fixes)
    return err.value


def test_every_exit_status_of_the_site_script_has_a_fix():
    statuses = {v for k, v in vars(remote_common).items() if k.startswith("EXIT_")}
    assert statuses and statuses | {127} == set(remote.FIXES)  # 127: no python3 on the site


def test_a_remote_failure_is_relayed_with_where_it_failed_and_its_fix():
    said = "no space left on the remote filesystem in /scratch/images"
    exc = refused(f"a login banner\nKIT-ERROR {EXIT_NOSPACE} {said}\n", EXIT_NOSPACE)
    assert (exc.code, exc.where, exc.fix) == (EXIT_NOSPACE, WHERE, remote.FIXES[EXIT_NOSPACE])
    assert str(exc) == f"{WHERE}: upload of g.tar.gz: {said}; fix: {exc.fix}"
    # the caller's fix for its place comes before the kit's for the status
    mine = {EXIT_NOSPACE: "pass --remote-dir DIR"}
    assert (
        refused(f"KIT-ERROR {EXIT_NOSPACE} {said}\n", EXIT_NOSPACE, mine).fix == mine[EXIT_NOSPACE]
    )
    # the script's own fix comes first, and is given once
    own = refused(f"KIT-ERROR {EXIT_REFUSED} /x/a is a FIFO; fix: remove it\n", EXIT_REFUSED, mine)
    assert (own.what, own.fix) == ("upload of g.tar.gz: /x/a is a FIFO", "remove it")


def test_a_remote_failure_without_the_scripts_line_still_names_a_fix():
    exc = refused("sh: 1: exec: /usr/bin/python3: Permission denied\n", 126)
    assert (exc.code, exc.where, exc.fix) == (126, WHERE, remote.UNKNOWN_FIX)
    assert "exit 126" in exc.what and "Permission denied" in exc.what
