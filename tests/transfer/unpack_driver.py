"""The remote installer's unpack (kit/transfer/remote_script.py) run by any python3 >= 3.6, as a
site's stock python3 runs it: `python3 unpack_driver.py SCRIPT` reads lines `ARCHIVE<TAB>OUT<TAB>UMASK`
and answers each with one JSON line, {"tree": ...} or {"refused": "..."} ({"bug": "..."} for
anything but the installer's one-line refusals). Python 3.6 syntax only: the suite runs it under the
oldest Python 3 on the machine; `describe` is also what the tests compare trees with."""

import hashlib
import json
import os
import stat
import sys


def load_script(path: str) -> dict:
    """The script's functions, loaded as the site loads it: an exec of the text the kit sends
    (kit.transfer.assemble, written to PATH by the test), no kit package."""
    space = {"__name__": "remote_script"}
    with open(path) as fh:
        exec(compile(fh.read(), path, "exec"), space)
    return space


def describe(root: str) -> dict:
    """name -> [kind, mode, symlink target or sha256, the first name of its inode] for the root
    ('') and everything under it, symlinks not followed."""
    tree, names = {}, {}
    base = os.fsencode(root)
    tree[""] = ["d", stat.S_IMODE(os.lstat(base).st_mode), "", ""]
    for dirpath, dirnames, filenames in os.walk(base):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, base).decode("utf-8")
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                tree[rel] = ["l", 0, os.readlink(path).decode("utf-8"), ""]
            elif stat.S_ISDIR(st.st_mode):
                tree[rel] = ["d", stat.S_IMODE(st.st_mode), "", ""]
            else:
                with open(path, "rb") as fh:
                    digest = hashlib.sha256(fh.read()).hexdigest()
                names.setdefault(st.st_ino, []).append(rel)
                tree[rel] = ["f", stat.S_IMODE(st.st_mode), digest, st.st_ino]
    for entry in tree.values():
        if entry[0] == "f":
            entry[3] = min(names[entry[3]])
    return tree


def unpack_one(script: dict, archive: str, out: str, umask: int) -> dict:
    old = os.umask(umask)
    fd = os.open(archive, os.O_RDONLY)
    try:
        script["unpack"](fd, out, 1 << 40)
        return {"tree": describe(out)}
    except RuntimeError as exc:
        return {"refused": str(exc)}
    except Exception as exc:  # the installer would say "internal error": a bug
        return {"bug": f"{type(exc).__name__}: {exc}"}
    finally:
        os.close(fd)
        os.umask(old)


def main() -> None:
    script = load_script(sys.argv[1])
    for line in sys.stdin:
        archive, out, umask = line.rstrip("\n").split("\t")
        sys.stdout.write(json.dumps(unpack_one(script, archive, out, int(umask, 8))) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
