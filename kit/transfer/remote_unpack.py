"""The installer's own unpack of an image tarball, for sites without Charliecloud: gzip and tar
read with the kit's rules and bounds, the tree made through directory fds only.

Part of the script the site runs (remote_script.py): Python 3.6 and the standard library only;
kit.transfer.assemble puts this text in place of its import.
"""

import errno
import os
import stat
import zlib

from kit.archive_rules import (
    MAX_MEMBERS,
    MAX_META,
    MAX_RATIO,
    MAX_SIZE,
    RATIO_FLOOR,
    RuleError,
    member_path,
    mtime_ok,
    parse_pax,
    symlink_target_problem,
)
from kit.transfer.remote_common import (
    BUF,
    CLOEXEC,
    NOFOLLOW,
)
from kit.tree_removal import DIR_FLAGS

# ----------------------------------------------------- the unpack (install FMT unpack: udocker)
#
# The same member rules as `kit image convert` (kit.tarsafe, kit.image.layers, kit.image.flatten
# for a one-layer image): what one refuses the other refuses (tests/transfer/
# test_installer_unpack.py feeds both the same hostile archives).

TAR_BLOCK = 512
ZERO_BLOCK = bytes(TAR_BLOCK)
MAX_CHAIN = 100  # extended headers (pax, GNU long name/link) before one member; tar writes <= 3
MAX_DIGITS = 4300  # a longer pax number reads as 0, as on Python >= 3.11 (int_max_str_digits)
REGULAR = (b"0", b"\0", b"7")  # tarfile.REGULAR_TYPES but GNU sparse (refused)
BUILTIN = REGULAR + (b"1", b"2", b"3", b"4", b"5", b"6", b"S")  # tarfile.SUPPORTED_TYPES
LONG_TYPES, PAX_TYPES = (b"L", b"K"), (b"x", b"X", b"g")
PAX_FIELDS = {"path": "name", "linkpath": "linkname", "size": "size", "mtime": "mtime"}
KINDS = {b"5": "directory", b"2": "symlink", b"1": "hard link"}  # others: REGULAR, or dropped
HIGH = bytes(range(128, 256))  # the bytes a signed checksum counts negative
GZ_IN = 1 << 16  # compressed bytes inflated at a time: what stays unconsumed is copied per read


class Gunzip(object):
    """The gzip members of a stream one after another, with CPython's and ISA-L's rules (the
    kit's reader): zero bytes may follow the last one, anything else must be another member;
    each member's header CRC (if flagged), CRC-32 and length are checked."""

    def __init__(self, raw):
        self.raw, self.buf, self.inflate, self.crc, self.length = raw, b"", None, 0, 0

    def more(self):
        data = self.raw(GZ_IN)
        if not data:
            raise RuntimeError("the gzip stream ends early (a truncated upload?)")
        self.buf += data

    def take(self, n):
        while len(self.buf) < n:
            self.more()
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def start(self):
        """Read the next member's header; False when only zero bytes are left."""
        self.buf = self.buf.lstrip(b"\0")
        while not self.buf:
            data = self.raw(GZ_IN)
            if not data:
                return False
            self.buf = data.lstrip(b"\0")
        header = self.take(10)
        if header[:2] != b"\x1f\x8b" or header[2] != 8:
            raise RuntimeError("a gzip member of the upload does not start as one (magic, method)")
        flags, crc = header[3], zlib.crc32(header)
        if flags & 4:
            size = self.take(2)
            crc = zlib.crc32(size + self.take(size[0] | size[1] << 8), crc)
        for flag in (8, 16):  # a name, a comment: up to a NUL, read once (any length)
            while flags & flag:
                end = self.buf.find(b"\0")
                if end >= 0:
                    crc = zlib.crc32(self.take(end + 1), crc)
                    break
                crc, self.buf = zlib.crc32(self.buf, crc), b""
                self.more()
        if flags & 2 and self.take(2) != (crc & 0xFFFF).to_bytes(2, "little"):
            raise RuntimeError("the gzip header's checksum does not match")
        self.inflate, self.crc, self.length = zlib.decompressobj(-zlib.MAX_WBITS), 0, 0
        return True

    def read(self, n):
        """Up to N uncompressed bytes; b"" at the end of the last member."""
        while True:
            if self.inflate is None and not self.start():
                return b""
            if not self.buf:
                self.more()
            data = self.inflate.decompress(self.buf, n)
            ended = self.inflate.eof
            self.buf = self.inflate.unused_data if ended else self.inflate.unconsumed_tail
            self.crc, self.length = zlib.crc32(data, self.crc), self.length + len(data)
            if ended:
                trailer = self.take(8)
                if int.from_bytes(trailer[:4], "little") != self.crc:
                    raise RuntimeError("gzip CRC check failed (a damaged upload)")
                if int.from_bytes(trailer[4:], "little") != self.length & 0xFFFFFFFF:
                    raise RuntimeError("gzip length check failed (a damaged upload)")
                self.inflate = None
            if data:
                return data


class TarStream(object):
    """The upload's tar bytes, read once front to back (pread: the fd's offset is not used):
    gunzipped when it starts with gzip's magic (kit image convert sniffs it the same way),
    counted against MAX_SIZE and the decompression-bomb ratio."""

    def __init__(self, fd):
        self.fd, self.at, self.pos = fd, 0, 0
        self.stored = max(os.fstat(fd).st_size, 1)
        self.gzip = os.pread(fd, 2, 0) == b"\x1f\x8b"
        self.source = Gunzip(self.raw).read if self.gzip else self.raw
        self.pending, self.used = b"", 0  # the latest piece, and how much of it is read
        self.produced = 0  # bytes of the (uncompressed) stream so far

    def raw(self, n):
        data = os.pread(self.fd, n, self.at)
        self.at += len(data)
        return data

    def fill(self):
        """The next piece of the stream into `pending`, counted against the limits; False at
        the end."""
        self.pending, self.used = self.source(BUF), 0
        self.produced += len(self.pending)
        if self.produced > MAX_SIZE:
            raise RuntimeError("the image unpacks to more than %d bytes: refused" % MAX_SIZE)
        if self.produced > RATIO_FLOOR and self.produced > MAX_RATIO * self.stored:
            raise RuntimeError(
                "the image expands more than %dx (%d stored bytes): a decompression bomb?"
                % (MAX_RATIO, self.stored)
            )
        return bool(self.pending)

    def read(self, n):
        """N bytes, fewer only at the end of the stream."""
        parts, left = [], n
        while left and (self.used < len(self.pending) or self.fill()):
            parts.append(self.pending[self.used : self.used + left])
            self.used += len(parts[-1])
            left -= len(parts[-1])
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        self.pos += len(data)
        return data

    def skip(self, n, what):
        """Pass N bytes without keeping them."""
        while n:
            if self.used == len(self.pending) and not self.fill():
                raise RuntimeError("the archive ends inside %s (a truncated upload?)" % what)
            step = min(n, len(self.pending) - self.used)
            self.used, self.pos, n = self.used + step, self.pos + step, n - step


class Header(object):
    """One tar header's fields, as tarfile reads them (names decoded as UTF-8, surrogateescape)."""

    __slots__ = ("offset", "type", "name", "linkname", "mode", "size", "mtime", "consumed")


def nts(field):
    end = field.find(b"\0")
    return field if end < 0 else field[:end]


def text(field):
    return nts(field).decode("utf-8", "surrogateescape")


def nti(field, offset):
    """A header number: GNU base-256, or octal text read exactly as tarfile reads it."""
    if field[0] in (0o200, 0o377):
        n = int.from_bytes(field[1:], "big")
        return n - 256 ** (len(field) - 1) if field[0] == 0o377 else n
    try:
        return int(nts(field).decode("ascii").strip() or "0", 8)
    except ValueError:
        raise RuntimeError("tar header at byte %d: a malformed number" % offset) from None


def read_header(block, offset):
    """A 512-byte header block (checksum, numbers, ustar prefix) or RuntimeError."""
    chksum = nti(block[148:156], offset)
    rest = block[:148] + block[156:]
    unsigned = 256 + sum(rest)
    if chksum not in (unsigned, unsigned - 256 * (len(rest) - len(rest.translate(None, HIGH)))):
        raise RuntimeError("tar header at byte %d: bad checksum (a damaged archive)" % offset)
    head = Header()
    head.offset, head.type, head.consumed = offset, block[156:157], 0
    head.name, head.linkname = text(block[0:100]), text(block[157:257])
    head.mode, head.size = nti(block[100:108], offset), nti(block[124:136], offset)
    head.mtime = nti(block[136:148], offset)
    for start, end in ((108, 116), (116, 124), (329, 337), (337, 345)):  # ids, device numbers
        nti(block[start:end], offset)
    if head.type == b"\0" and head.name.endswith("/"):
        head.type = b"5"
    prefix = text(block[345:500])
    if prefix and head.type not in (b"L", b"K", b"S"):
        head.name = prefix + "/" + head.name
    return head


def pax_value(key, value):
    """A pax field as tarfile applies it: a malformed number is 0 (so is an overlong one)."""
    if key == "path":
        return value.rstrip("/")
    if key == "linkpath":
        return value
    if key == "size" and len(value.strip().lstrip("+-").replace("_", "")) > MAX_DIGITS:
        return 0
    try:
        return (int if key == "size" else float)(value)
    except ValueError:
        return 0


def block_up(size):
    return -(-size // TAR_BLOCK) * TAR_BLOCK


def members(stream):
    """The archive's members as kit.tarsafe lets tarfile read them, in one pass with memory
    bounded by MAX_META, whatever the member count.

    Why a reader of our own rather than tarfile: tarfile keeps every header it read (memory
    grows with the member count), parses pax records in quadratic time on the Pythons a site may
    have (CVE-2024-6232), ends quietly at a damaged header (the members after it lost) and changes
    its private hooks between 3.6 and 3.13. Here every field is read as tarfile 3.11 reads it,
    extended headers apply as tarfile nests them (the outermost wins), and the stream is checked
    to its end. Each member is yielded with `consumed` set to the data bytes the caller read."""
    glob, fields, sized, chain = {}, {}, False, 0
    while True:
        offset = stream.pos
        block = stream.read(TAR_BLOCK)
        if len(block) < TAR_BLOCK or block == ZERO_BLOCK:
            if chain:
                raise RuntimeError("tar header at byte %d: missing after an extended one" % offset)
            if offset == 0 and len(block) != TAR_BLOCK and (block or not stream.gzip):
                raise RuntimeError("not a tar archive (%d bytes)" % len(block))
            zero_rest(stream, block, offset)
            return
        head = read_header(block, offset)
        meta = head.type in LONG_TYPES + PAX_TYPES
        if head.size < 0 or (meta and head.size > MAX_META):
            raise RuntimeError("tar header at byte %d: size %d refused" % (offset, head.size))
        if head.type == b"S":
            raise RuntimeError("tar header at byte %d: a GNU sparse file" % offset)
        if meta:
            chain += 1
            if chain > MAX_CHAIN:
                raise RuntimeError(
                    "tar header at byte %d: over %d extended headers" % (offset, MAX_CHAIN)
                )
            data = stream.read(block_up(head.size))
            if len(data) < head.size:
                raise RuntimeError("the archive ends inside the header at byte %d" % offset)
            if head.type in LONG_TYPES:
                fields.setdefault("name" if head.type == b"L" else "linkname", text(data))
                continue
            new = {}
            try:
                records = parse_pax(data[: head.size], offset)
            except RuleError as exc:
                raise RuntimeError(str(exc)) from None
            for key, value in records.items():
                if key.startswith(b"GNU.sparse."):
                    raise RuntimeError("pax header at byte %d: a GNU sparse file" % offset)
                key = key.decode("utf-8", "surrogateescape")
                if key in PAX_FIELDS:
                    new[key] = value.decode("utf-8", "surrogateescape")
            if head.type == b"g":
                glob.update(new)
                continue
            headers = dict(glob, **new)
            for key, value in headers.items():
                value = pax_value(key, value)
                if key == "size" and value < 0:
                    raise RuntimeError("pax header at byte %d: size %d" % (offset, value))
                fields.setdefault(PAX_FIELDS[key], value)
            sized = sized or "size" in headers
            continue
        skips_data = head.type in REGULAR or head.type not in BUILTIN  # tarfile skips their data
        span = block_up(head.size) if skips_data else 0
        for key, value in glob.items():
            setattr(head, PAX_FIELDS[key], pax_value(key, value))
        for key, value in fields.items():
            setattr(head, key, value)
        if head.size < 0:
            raise RuntimeError("tar header at byte %d: size %d refused" % (offset, head.size))
        if sized and skips_data:
            span = block_up(head.size)
        fields, sized, chain = {}, False, 0
        yield head
        if head.consumed > span:  # tarfile would seek back: kit image convert refuses it
            raise RuntimeError("member %r: its data runs past the next header" % head.name[:80])
        stream.skip(span - head.consumed, "member %r" % head.name[:80])


def zero_rest(stream, block, offset):
    """Past tar's end only zero bytes may follow: anything else is a header tar could not read,
    and the members from there on would be lost without a word (kit.tarsafe.first_nonzero)."""
    while block:
        if block.count(0) != len(block):
            raise RuntimeError(
                "corrupt tar header at byte %d (non-zero data after the archive's end): "
                "the members from there on would be lost" % offset
            )
        block = stream.read(BUF)


def safe_name(raw, what):
    """A member's path relative to the image root (b'' for the root), as UTF-8 bytes."""
    try:
        return member_path(raw).encode("utf-8")
    except RuleError as exc:
        raise RuntimeError("%s %r %s" % (what, raw[:80], exc)) from None


def check_member(head):
    """kit.image.layers._check_member: the names, a link's target, the mtime, the size."""
    rel = safe_name(head.name, "member")
    if head.type == b"1":
        head.linkname = safe_name(head.linkname, "hard link %r target" % rel.decode())
    elif head.type == b"2" and symlink_target_problem(head.linkname):
        raise RuntimeError("symlink %r %s" % (rel.decode(), symlink_target_problem(head.linkname)))
    if not mtime_ok(head.mtime):
        raise RuntimeError(
            "member %r: mtime %.40s, not between 1970 and 2106" % (rel.decode(), head.mtime)
        )
    if head.size > MAX_SIZE:
        raise RuntimeError(
            "member %r: %d bytes, more than %d" % (rel.decode(), head.size, MAX_SIZE)
        )
    return rel


def contained(link_dir, target):
    """Does a relative symlink target stay inside the image, read lexically (kit.image.flatten)?"""
    depth = len(link_dir)
    for part in target.split(b"/"):
        if part == b"..":
            depth -= 1
            if depth < 0:
                return False
        elif part not in (b"", b"."):
            depth += 1
    return True


class Tree(object):
    """The image being unpacked, reached through directory fds only (no path longer than one
    name is passed to the kernel, no symlink followed). What is already there is the record of
    what earlier members made, so memory does not grow with the member count."""

    def __init__(self, root, umask, budget):
        self.fd = os.open(root, DIR_FLAGS)
        self.umask, self.budget, self.total = umask, budget, 0
        self.cached, self.cached_fd = None, None  # the last parent directory reached

    def close(self):
        for fd in (self.cached_fd, self.fd):
            if fd is not None:
                os.close(fd)
        self.cached_fd = self.fd = None

    def mode(self, mode, is_dir):
        """tar's mode for a user (the umask applied, no setuid/setgid), owner rwx on directories
        and rw on files (kit image convert's rule), and nothing world-writable but a sticky
        directory: other users of a shared file system never add to or replace an image's files
        (o+w is dropped rather than the sticky bit added, which would still let them add)."""
        mode = (mode & (0o1777 if is_dir else 0o777) & ~self.umask) | (0o700 if is_dir else 0o600)
        if mode & 0o002 and not (is_dir and mode & 0o1000):
            mode &= ~0o002
        return mode

    def kind(self, dirfd, name):
        try:
            st = os.lstat(name, dir_fd=dirfd)
        except FileNotFoundError:
            return None
        if stat.S_ISDIR(st.st_mode):
            return "directory"
        return "symlink" if stat.S_ISLNK(st.st_mode) else "file"

    def parent(self, parts, create, strict=True):
        """An fd (the caller closes it) of the directory holding PARTS. create: missing
        directories are made (0755, as kit image convert makes them), a symlink or file on the
        way refused (strict) or None; without create None where it is missing."""
        key = b"/".join(parts[:-1])
        if key == self.cached:
            return os.dup(self.cached_fd)
        start, fd = 0, self.fd
        if self.cached and key.startswith(self.cached + b"/"):  # from there (in tar order: often)
            start, fd = self.cached.count(b"/") + 1, self.cached_fd
        fd = os.dup(fd)
        try:
            for n in range(start, len(parts) - 1):
                nxt = self.step(fd, parts, n, create=create, strict=strict)
                os.close(fd)
                fd = nxt
                if fd is None:
                    return None
        except BaseException:
            if fd is not None:
                os.close(fd)
            raise
        if self.cached_fd is not None:
            os.close(self.cached_fd)
        self.cached, self.cached_fd = key, os.dup(fd)
        return fd

    def step(self, fd, parts, n, *, create, strict):
        """An fd of PARTS[n] in the directory FD (made if missing and `create`), or None."""
        try:
            return os.open(parts[n], DIR_FLAGS, dir_fd=fd)
        except OSError as exc:
            if exc.errno not in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR):
                raise
        kind, where = self.kind(fd, parts[n]), b"/".join(parts[: n + 1]).decode()
        if kind is None and create and (strict or not where.startswith("dev/")):
            os.mkdir(parts[n], 0o700, dir_fd=fd)
            made = os.open(parts[n], DIR_FLAGS, dir_fd=fd)
            os.fchmod(made, self.mode(0o755, True))
            return made
        if kind is None or not (create and strict):
            return None
        raise RuntimeError(
            "member %r would be written through the %s %r; the image is unsafe"
            % (b"/".join(parts).decode(), kind, where)
        )

    def add(self, head, rel, stream):
        """Make member HEAD at REL as kit.image.flatten emits a one-layer image's member: the
        root's own header, whiteouts, /dev and devices, FIFOs and unknown types are dropped; a
        name is made once (a directory may repeat); a hard link to a symlink is a symlink."""
        parts = rel.split(b"/")
        if not rel:
            return
        if parts[-1].startswith(b".wh."):
            fd = self.parent(parts, create=True, strict=False)
            if fd is not None:
                os.close(fd)
            return
        kind = "file" if head.type in REGULAR else KINDS.get(head.type)
        if kind is None or rel.startswith(b"dev/"):
            return
        fd = self.parent(parts, create=True)
        try:
            had = self.kind(fd, parts[-1])
            if had == "directory" and kind == "directory":
                return
            if had:
                raise RuntimeError(
                    "member %r (%s) clashes with the %s already there (a name that appears twice, "
                    "or the parent of an earlier member)" % (rel.decode(), kind, had)
                )
            if kind == "directory":
                os.mkdir(parts[-1], 0o700, dir_fd=fd)
                made = os.open(parts[-1], DIR_FLAGS, dir_fd=fd)
                try:
                    os.fchmod(made, self.mode(head.mode, True))
                finally:
                    os.close(made)
            elif kind == "file":
                self.write(fd, parts[-1], head=head, stream=stream)
            elif kind == "symlink":
                self.symlink(fd, parts, head.linkname)
            else:
                self.hardlink(fd, parts, head.linkname)
        finally:
            os.close(fd)

    def write(self, dirfd, name, *, head, stream):
        self.total += head.size
        if self.total > self.budget:
            raise OSError(errno.ENOSPC, "the image unpacks to more than the free space")
        out = os.open(
            name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW | CLOEXEC, 0o600, dir_fd=dirfd
        )
        try:
            left = head.size
            while left:
                data = stream.read(min(BUF, left))
                if len(data) < min(BUF, left):
                    raise RuntimeError("member %r: the archive ends inside it" % head.name[:80])
                view = memoryview(data)
                while len(view):
                    view = view[os.write(out, view) :]
                left -= len(data)
            head.consumed = head.size
            os.fchmod(out, self.mode(head.mode, False))
        finally:
            os.close(out)

    def symlink(self, dirfd, parts, target):
        """Its target as the image has it (read inside the image; never followed here), unless
        it is empty, not UTF-8, or relative and climbing out of the image (refused)."""
        try:
            raw = target.encode("utf-8")
        except UnicodeEncodeError:
            raw = None
        rel = b"/".join(parts).decode()
        if not raw or not (raw.startswith(b"/") or contained(parts[:-1], raw)):
            raise RuntimeError(
                "symlink %r -> %r: empty, not UTF-8 or out of the image" % (rel, target[:80])
            )
        os.symlink(raw, parts[-1], dir_fd=dirfd)

    def hardlink(self, dirfd, parts, target):
        """A second name for a file made before, or for a symlink made before (a symlink of its
        own, with the same target); anything else is refused."""
        tparts = target.split(b"/")
        tfd = self.parent(tparts, create=False) if target else None
        try:
            kind = self.kind(tfd, tparts[-1]) if tfd is not None else None
            if kind == "file":
                os.link(
                    tparts[-1], parts[-1], src_dir_fd=tfd, dst_dir_fd=dirfd, follow_symlinks=False
                )
            elif kind == "symlink":
                self.symlink(dirfd, parts, os.readlink(tparts[-1], dir_fd=tfd).decode("utf-8"))
            else:
                raise RuntimeError(
                    "hard link %r points to %r, which is %s in the image before it"
                    % (b"/".join(parts).decode(), target.decode(), "a " + kind if kind else "not")
                )
        finally:
            if tfd is not None:
                os.close(tfd)

    def finish(self):
        """kit image convert refuses an image whose /ch is no directory (Charliecloud keeps its
        metadata there); the root gets 0755 as convert's own (umask applied)."""
        kind = self.kind(self.fd, b"ch")
        if kind not in (None, "directory"):
            raise RuntimeError(
                "/ch is a %s in the image; Charliecloud needs a directory there" % kind
            )
        os.fchmod(self.fd, self.mode(0o755, True))


def current_umask():
    mask = os.umask(0o077)
    os.umask(mask)
    return mask & 0o777


def unpack(fd, out, budget):
    """Unpack the tarball FD (gzip or not) as the new directory OUT, in Python alone, or raise
    RuntimeError (one line) having checked the whole stream: no member outside OUT, none written
    through a symlink, hard links only to what was unpacked before, no devices or FIFOs (dropped,
    as kit image convert drops them), no setuid or setgid bits, the umask applied, at most
    MAX_MEMBERS members and `budget` bytes of files. The caller removes OUT on failure."""
    os.mkdir(out, 0o700)
    tree = Tree(out, current_umask(), budget)
    try:
        count, stream = 0, TarStream(fd)
        for head in members(stream):
            count += 1
            if count > MAX_MEMBERS:
                raise RuntimeError("more than %d members: refused" % MAX_MEMBERS)
            tree.add(head, check_member(head), stream)
        tree.finish()
    except zlib.error as exc:
        raise RuntimeError("not a readable image tarball: %s" % exc) from None
    finally:
        tree.close()
