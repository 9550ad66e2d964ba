"""Implicit string concatenations split mid-phrase: the rule, its check and the rewrite.

A message written as "the key " "`nodes` must be a list" over two lines defeats a grep for "the key
`nodes` must", the first thing a maintainer tries on an error a user reports. The rule: in a
concatenation over several lines, every split falls at a phrase boundary (after `. , ; : ! ?` or a
closing bracket followed by a space, after an em dash, a `\\n` or two spaces, before ` |` in a
table, beside a regex's `|`), unless the phrase across it is wider than its line allows at that
column (then it falls between words, or inside a word wider than the line); and a concatenation
that fits on one line of the formatter's width is one literal (the formatter joins it anyway).

    python -m scripts.string_splits [PATH...]        report each offence (exit 1 if any)
    python -m scripts.string_splits --fix [PATH...]  reflow the offending concatenations

scripts/lint.sh runs both (the fix with --fix, before the formatter). The rewrite fills each piece
up to the formatter's width and ends it at a phrase boundary (past the width up to E501's limit
only where that saves a piece; at a space only where no phrase fits). It keeps indentation,
prefixes, escapes, quotes and comments, never breaks inside an f-string's `{...}`, and leaves a
file untouched (and says so) unless the rewritten module parses to the same AST: proof that no
value changed.
"""

from __future__ import annotations

import ast
import io
import re
import sys
import token
import tokenize
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kit.atomic import atomic_write_text
from kit.excerpt import shown

WIDTH = 100  # the formatter's line length (pyproject.toml [tool.ruff] line-length)
LIMIT = 110  # E501's limit, for what the formatter cannot wrap (max-line-length)
TREES = ("kit", "gan3d", "tests", "bench", "scripts", "setup.py")  # the repository's Python
SKIP = "_data"  # kit/_data: files the kit ships, not its code
SHOWN = 30  # characters of the text each side of a split an offence shows
MAX_SOURCE = 2_000_000  # characters: no module of the repository comes near
PUNCT = frozenset(".,;:!?)]|")  # | between a table's cells or a pipeline's commands
ABBREVIATIONS = frozenset({"e.g.", "i.e.", "cf.", "vs."})  # a dot that ends no phrase
EM_DASH = ("—", "\\u2014", "\\N{EM DASH}")
ESCAPE = re.compile(
    r"\\(?:N\{[^}\n]*\}|x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|[0-7]{1,3}|.)"
)
LITERAL = re.compile(r"(?P<prefix>[A-Za-z]*)(?P<quote>['\"])(?P<body>.*)(?P=quote)", re.DOTALL)


@dataclass(frozen=True)
class Atom:
    """What a split never cuts: one character, one escape, one f-string field or one brace."""

    text: str  # as written in a plain literal (a brace undoubled); a field as written
    kind: str  # "char", "escape", "field" or "brace"

    def width(self, fstring: bool) -> int:
        return 2 if self.kind == "brace" and fstring else len(self.text)

    def source(self, fstring: bool) -> str:
        return self.text * 2 if self.kind == "brace" and fstring else self.text

    def forbids(self, quote: str) -> bool:
        """A bare quote, or one inside a field (Python < 3.12), cannot sit inside `quote`."""
        return self.kind in ("char", "field") and quote in self.text


SPACE = Atom(" ", "char")


@dataclass
class Piece:
    """One literal of a concatenation, as the tokenizer found it."""

    start: tuple[int, int]
    end: tuple[int, int]
    prefix: str  # as written, without f
    quote: str
    atoms: list[Atom]


@dataclass
class Comment:
    text: str
    anchor: int  # atoms of the concatenation before it
    trailing: bool  # on the line of the piece before it


@dataclass
class Group:
    """A concatenation of literals over several lines."""

    pieces: list[Piece]
    comments: list[Comment]
    closing: str  # the `,` `)` after the last piece (the formatter moves what follows them)
    closing_ends_line: bool  # nothing but a comment after them (a comment can go there)
    own_line: bool  # the first piece begins its line (a comment can go above it)
    refusal: str = ""  # why it cannot be rewritten, if it cannot
    atoms: list[Atom] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.atoms = [a for p in self.pieces for a in p.atoms]

    @property
    def trailing(self) -> int:
        return len(self.closing)

    @property
    def line(self) -> int:
        return self.pieces[0].start[0]

    @property
    def indent(self) -> int:
        """The column of the pieces after the first (the first may follow `match=`)."""
        later = [p.start for p in self.pieces[1:] if p.start[0] != self.line]
        return later[0][1] if later else self.pieces[0].start[1]

    @property
    def prefix(self) -> str:
        return self.pieces[0].prefix

    def splits(self) -> list[tuple[int, Piece]]:
        """(atom index, the piece it ends) of each split between two pieces."""
        out, at = [], 0
        for piece in self.pieces[:-1]:
            at += len(piece.atoms)
            out.append((at, piece))
        return out


def _atoms(body: str, raw: bool, fstring: bool) -> list[Atom]:
    atoms, i = [], 0
    while i < len(body):
        char = body[i]
        if char == "\\":
            if fstring and body[i + 1 : i + 2] in ("{", "}"):
                end = i + 1  # a backslash, then a field
            elif raw:
                end = i + 2
            else:  # a backslash in a literal always starts an escape
                end = ESCAPE.match(body, i).end()  # type: ignore[union-attr]
            atoms.append(Atom(body[i:end], "escape"))
            i = end
        elif char in "{}" and fstring and body[i + 1 : i + 2] != char:
            end = _field_end(body, i)
            atoms.append(Atom(body[i:end], "field"))
            i = end
        elif char in "{}":
            atoms.append(Atom(char, "brace"))
            i += 2 if fstring else 1
        else:
            atoms.append(Atom(char, "char"))
            i += 1
    return atoms


def _field_end(body: str, start: int) -> int:
    """The end of the replacement field at `start`: brackets counted, strings inside skipped."""
    depth, i = 0, start
    while i < len(body):
        char = body[i]
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
            if depth == 0:
                return i + 1
        elif char in "'\"":
            close = body.find(char, i + 1)
            i = close if close >= 0 else len(body)
        i += 1
    return len(body)


def _literals(source: str) -> list[tokenize.TokenInfo]:
    """The module's tokens, an f-string one STRING token as before Python 3.12."""
    starts = _offsets(source)
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    fstart = getattr(token, "FSTRING_START", None)
    fend = getattr(token, "FSTRING_END", None)
    found = []
    for tok in tokens:
        if tok.type == fstart:
            depth, last = 1, tok
            while depth:  # the rest of the f-string, nested ones included
                last = next(tokens)
                depth += (last.type == fstart) - (last.type == fend)
            (l0, c0), (l1, c1) = tok.start, last.end
            text = source[starts[l0 - 1] + c0 : starts[l1 - 1] + c1]
            tok = tokenize.TokenInfo(tokenize.STRING, text, tok.start, last.end, tok.line)
        found.append(tok)
    return found


def groups(source: str) -> Iterator[Group]:
    """Each concatenation of literals that spans more than one line."""
    tokens = _literals(source)
    run: list[tokenize.TokenInfo] = []
    between: list[tokenize.TokenInfo] = []  # comments and newlines after the last literal
    for tok in tokens:
        if tok.type == tokenize.STRING:
            run.extend([*between, tok] if run else [tok])
            between = []
        elif tok.type in (tokenize.NL, tokenize.COMMENT) and run:
            between.append(tok)
        else:
            if len(run) > 1 and run[0].start[0] != run[-1].end[0] and all(map(_one_line, run)):
                yield _group(run)
            run, between = [], []


def _one_line(tok: tokenize.TokenInfo) -> bool:
    """Not a triple-quoted literal, nor one continued by a backslash: those keep their layout."""
    match = LITERAL.fullmatch(tok.string)
    one = tok.start[0] == tok.end[0] and not (
        match and match["body"].startswith(match["quote"] * 2)
    )
    return tok.type != tokenize.STRING or one


def _group(run: list[tokenize.TokenInfo]) -> Group:
    pieces: list[Piece] = []
    comments: list[Comment] = []
    refusal = ""
    previous_end = (0, 0)
    newline = False
    for tok in run:
        if tok.type == tokenize.NL:
            newline = True
            continue
        if tok.type == tokenize.COMMENT:
            anchor = sum(len(p.atoms) for p in pieces)
            comments.append(Comment(tok.string, anchor, tok.start[0] == previous_end[0]))
            continue
        match = LITERAL.fullmatch(tok.string)
        assert match, tok.string  # the tokenizer's STRING
        letters, body = match["prefix"], match["body"]
        if pieces and tok.start[0] != previous_end[0] and not newline:
            refusal = "a backslash continuation"
        prefix = re.sub("[fF]", "", letters)
        if pieces and prefix.lower() != pieces[0].prefix.lower():
            refusal = refusal or f"literals of different kinds ({pieces[0].prefix!r}, {prefix!r})"
        raw, fstring = "r" in prefix.lower(), prefix != letters
        atoms = _atoms(body, raw, fstring)
        pieces.append(Piece(tok.start, tok.end, prefix, match["quote"], atoms))
        previous_end, newline, last = tok.end, False, tok
    after = last.line[last.end[1] :].rstrip("\r\n")
    closing = after[: len(after) - len(after.lstrip("]),:;}"))]
    ends_line = after[len(closing) :].lstrip()[:1] in ("", "#")
    own_line = not run[0].line[: run[0].start[1]].strip()
    return Group(pieces, comments, closing, ends_line, own_line, refusal)


# --- boundaries -------------------------------------------------------------------------------


def _is_space(atom: Atom) -> bool:
    return atom == SPACE


def _ends_phrase(atoms: Sequence[Atom], k: int, raw: bool) -> bool:
    """Atom k ends a phrase: punctuation (not the dot of e.g.), a closing bracket, an em dash or a
    `\\n` (not in a raw string, where it is a regex's)."""
    atom = atoms[k]
    if atom.text in EM_DASH or (atom.text == "\\n" and not raw):
        return True
    if atom.kind != "char" or atom.text not in PUNCT:
        return False
    start = k
    while start > 0 and not _is_space(atoms[start - 1]):
        start -= 1
    word = "".join(a.text for a in atoms[start : k + 1])
    if atom.text in ")]":  # a parenthesis opened inside the word, as in rank(s), is no phrase
        return word[0] in "([" or "(" not in word and "[" not in word
    return word.lstrip("([").lower() not in ABBREVIATIONS


def _alternative(atoms: Sequence[Atom], i: int, raw: bool) -> bool:
    """A split before ` |` is between two cells of a table or commands of a pipeline; in a raw
    string (a regex), one beside any `|` is between two alternatives."""
    before = i < len(atoms) and atoms[i].text == "|"
    return (before and (raw or _is_space(atoms[i - 1]))) or (raw and atoms[i - 1].text == "|")


def _phrase_boundaries(atoms: Sequence[Atom], raw: bool) -> list[bool]:
    """ok[i]: a break before atom i is where the rewrite ends a phrase (after its spaces)."""
    ok = [False] * (len(atoms) + 1)
    ok[0] = ok[-1] = True
    for i in range(1, len(atoms)):
        if _is_space(atoms[i]):
            continue
        k = i - 1
        while k > 0 and _is_space(atoms[k]):
            k -= 1
        ends = _ends_phrase(atoms, k, raw) and (k < i - 1 or atoms[k].text not in PUNCT)
        ok[i] = ends or k < i - 2 or _alternative(atoms, i, raw)  # or after two spaces
    return ok


def _word_boundaries(atoms: Sequence[Atom]) -> list[bool]:
    ok = [False] * (len(atoms) + 1)
    ok[0] = ok[-1] = True
    for i in range(1, len(atoms)):
        ok[i] = _is_space(atoms[i - 1]) and not _is_space(atoms[i])
    return ok


def _at_phrase_end(atoms: Sequence[Atom], i: int, raw: bool) -> bool:
    """A split a reader accepts as a phrase boundary: where the rewrite puts it, between the
    punctuation and the space after it, or inside two spaces (between the fields of a line)."""
    k, after = i - 1, i
    while k > 0 and _is_space(atoms[k]):
        k -= 1
    while after < len(atoms) and _is_space(atoms[after]):
        after += 1
    spaced = k < i - 1 or after > i or atoms[k].text not in PUNCT
    doubled = after - k > 2
    return doubled or _alternative(atoms, i, raw) or (spaced and _ends_phrase(atoms, k, raw))


def _width(atoms: Sequence[Atom], prefix: str) -> int:
    """Columns of `atoms` written as one literal (its prefix and quotes included)."""
    fstring = any(a.kind == "field" for a in atoms)
    return len(prefix) + fstring + 2 + sum(a.width(fstring) for a in atoms)


def _quotable(atoms: Sequence[Atom]) -> bool:
    return not all(any(a.forbids(q) for a in atoms) for q in "'\"")


# --- the rule ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Offence:
    line: int
    what: str


def offences(group: Group) -> list[Offence]:
    """Where `group` breaks the rule (nothing when it keeps it)."""
    atoms, raw = group.atoms, "r" in group.prefix.lower()
    first = group.pieces[0]
    if (
        not group.comments
        and first.start[1] + _width(atoms, group.prefix) + group.trailing <= WIDTH
        and _quotable(atoms)
    ):
        return [Offence(group.line, "fits on one line: one literal")]
    phrases, words = _phrase_boundaries(atoms, raw), _word_boundaries(atoms)
    found = []
    for at, piece in group.splits():
        if at in (0, len(atoms)) or _at_phrase_end(atoms, at, raw):
            continue
        bounds = phrases if _between_words(atoms, at) else words
        if _fits(group, at, bounds, piece.start[1]):
            tail = "".join(a.text for a in atoms[max(0, at - SHOWN) : at])[-SHOWN:]
            head = "".join(a.text for a in atoms[at : at + SHOWN])[:SHOWN]
            found.append(
                Offence(piece.start[0], f"split mid-phrase: {shown(tail)} | {shown(head)}")
            )
    return found


def _between_words(atoms: Sequence[Atom], at: int) -> bool:
    return _is_space(atoms[at - 1]) or _is_space(atoms[at])


def _fits(group: Group, at: int, bounds: Sequence[bool], column: int) -> bool:
    """Whether the phrase (or word) across the split at `at` fits in one piece at `column`: it can
    be quoted, and it is within E501's limit, or within the formatter's width if it is the whole
    text (the formatter moves a lone literal wider than that out of its parentheses, past the
    limit)."""
    atoms = group.atoms
    start = max(i for i in range(at) if bounds[i])
    end = min(i for i in range(at + 1, len(atoms) + 1) if bounds[i])
    if not _quotable(atoms[start:end]):
        return False
    width = _width(atoms[start:end], group.prefix) + (group.trailing if end == len(atoms) else 0)
    if start == 0 and end == len(atoms):
        return group.pieces[0].start[1] + width <= WIDTH
    return column + width <= LIMIT


# --- the rewrite ------------------------------------------------------------------------------


def reflow(group: Group) -> list[tuple[int, int]]:
    """(start, end) atom ranges of the pieces the rewrite writes. Each piece ends where the rule
    lets it (a phrase boundary that fits, else a space, else anywhere); of those ends, the fewest
    pieces win, then the fewest lines over the formatter's width, then the fullest first piece."""
    atoms, raw = group.atoms, "r" in group.prefix.lower()
    phrases, words = _phrase_boundaries(atoms, raw), _word_boundaries(atoms)
    best: dict[int, tuple[int, int, int]] = {len(atoms): (0, 0, len(atoms))}  # pos -> cost, end

    def solve(pos: int) -> tuple[int, int]:
        if pos not in best:
            column = group.pieces[0].start[1] if pos == 0 else group.indent
            options = []
            for end, width in _ends(group, pos, column, phrases, words):
                pieces, over = solve(end)
                options.append((pieces + 1, over + (width > WIDTH), end))
            best[pos] = min(options, key=lambda o: o[:2])  # ties: the first, the fullest
        return best[pos][:2]

    solve(0)
    ranges, pos = [], 0
    while pos < len(atoms):
        ranges.append((pos, best[pos][2]))
        pos = best[pos][2]
    return ranges


def _ends(
    group: Group, pos: int, column: int, phrases: Sequence[bool], words: Sequence[bool]
) -> list[tuple[int, int]]:
    """(end, columns) of the ends a piece from `pos` may have, the one to prefer first: the end of
    the text or a phrase boundary within the limit; only if none, a space; only if none, any."""
    atoms, n = group.atoms, len(group.atoms)
    fits = []  # (end, columns) of each piece from pos that can be written
    chars = braces = 0
    fstring = False
    forbidden: set[str] = set()
    for end in range(pos + 1, n + 1):
        atom = atoms[end - 1]
        forbidden.update(q for q in "'\"" if atom.forbids(q))
        if len(forbidden) == 2:
            break  # no quote can hold it
        fstring = fstring or atom.kind == "field"
        braces += atom.kind == "brace"
        chars += 0 if atom.kind == "brace" else len(atom.text)
        width = column + len(group.prefix) + fstring + 2 + chars + braces * (1 + fstring)
        if end == n:
            width += group.trailing
            if pos == 0 and width > WIDTH and fits:
                break  # one literal wider than the formatter's width: it would move it
        fits.append((end, width))
        if fits[-1][1] > LIMIT and (phrases[end] or words[end]):
            break  # the first boundary past the limit: the end of a piece that cannot fit
    for ok in (phrases, words, [True] * (n + 1)):
        within = [(e, w) for e, w in fits if ok[e] and w <= LIMIT]
        if within:  # the fullest within the width first, then the narrowest past it
            inside = [f for f in within if f[1] <= WIDTH]
            return sorted(inside, key=lambda f: -f[0]) + [f for f in within if f[1] > WIDTH]
    return fits[-1:]


def _write_piece(group: Group, start: int, end: int) -> str:
    atoms = group.atoms[start:end]
    fstring = any(a.kind == "field" for a in atoms)
    at, preferred = 0, group.pieces[-1].quote
    for piece in group.pieces:  # the quote of the piece this one starts in
        if at + len(piece.atoms) > start:
            preferred = piece.quote
            break
        at += len(piece.atoms)
    other = "'" if preferred == '"' else '"'
    quote = other if any(a.forbids(preferred) for a in atoms) else preferred
    prefix = group.prefix + ("f" if fstring else "")
    raw = "r" in prefix.lower()
    body = "".join(
        a.text[1]
        if a.text in ("\\'", '\\"') and a.text[1] != quote and not raw
        else a.source(fstring)
        for a in atoms
    )  # the formatter drops an escape the quote does not need
    return f"{prefix}{quote}{body}{quote}"


def rewritten(group: Group) -> tuple[str, int] | None:
    """The text that replaces the group's literals, first to last, and how many characters after
    them it replaces too (the `,` a comment goes after); None if a comment has no place."""
    ranges = reflow(group)
    above: list[list[str]] = [[] for _ in ranges]  # comment lines before each piece
    after: list[list[str]] = [[] for _ in ranges]  # comments at the end of each piece's line
    for comment in group.comments:  # each stays beside the text it was beside
        if comment.trailing:
            index = next(i for i, (_, end) in enumerate(ranges) if end >= comment.anchor)
            after[index].append(comment.text)
        else:
            index = next((i for i, (_, end) in enumerate(ranges) if end > comment.anchor), 0)
            above[max(index, 1) if len(ranges) > 1 else 0].append(comment.text)
    closing = ""  # a comment never goes between the last piece and its `,`
    if after[-1] and group.closing and group.closing_ends_line:
        closing = group.closing
    elif after[-1] and group.closing:
        above[-1], after[-1] = above[-1] + after[-1], []
    if above[0] and not group.own_line:
        return None
    lines: list[str] = []  # the first at the group's start, each other at its indent
    for index, ((start, end), comments, trailing) in enumerate(zip(ranges, above, after)):
        lines.extend(comments)
        piece = _write_piece(group, start, end) + (closing if index == len(ranges) - 1 else "")
        lines.append("  ".join([piece, *trailing]))
    return f"\n{' ' * group.indent}".join(lines), len(closing)


# --- files ------------------------------------------------------------------------------------


@dataclass
class Report:
    offences: list[tuple[Path, Offence]] = field(default_factory=list)
    changed: list[Path] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # "path:line: why"


def _offsets(source: str) -> list[int]:
    starts, total = [0], 0
    for line in source.splitlines(keepends=True):
        total += len(line)
        starts.append(total)
    return starts


def fix_source(source: str, path: str = "<string>") -> tuple[str, list[str]]:
    """`source` with its offending concatenations reflowed, and why any were left as they are.
    The source comes back unchanged unless the rewrite parses to the same AST."""
    starts, edits, refused = _offsets(source), [], []
    for group in groups(source):
        if not offences(group):
            continue
        done = None if group.refusal else rewritten(group)
        if done is None:
            refused.append(f"{path}:{group.line}: {group.refusal or 'a comment with no place'}")
            continue
        text, extra = done
        (l0, c0), (l1, c1) = group.pieces[0].start, group.pieces[-1].end
        edits.append((starts[l0 - 1] + c0, starts[l1 - 1] + c1 + extra, text))
    new = source
    for begin, end, text in reversed(edits):
        new = new[:begin] + text + new[end:]
    if new != source:
        try:
            same = ast.dump(ast.parse(source)) == ast.dump(ast.parse(new))
        except SyntaxError:
            same = False
        if not same:
            return source, [f"{path}: the rewrite would change a value; left as it is"]
    return new, refused


def python_files(paths: Sequence[str | Path]) -> list[Path]:
    """The .py files under `paths`, kit/_data's left out."""
    found: list[Path] = []
    for path in map(Path, paths):
        files = sorted(path.rglob("*.py")) if path.is_dir() else [path]
        found.extend(p for p in files if SKIP not in p.parts)
    return found


def _read(path: Path) -> str:
    with open(path, encoding="utf-8") as fh:
        source = fh.read(MAX_SOURCE + 1)
    if len(source) > MAX_SOURCE:
        raise SystemExit(f"string_splits: {path}: over {MAX_SOURCE} characters; not read")
    return source


def check(paths: Sequence[str | Path], fix: bool = False) -> Report:
    """Each offence under `paths`; with `fix`, the files rewritten first (atomically)."""
    report = Report()
    for path in python_files(paths):
        source = _read(path)
        if fix:
            new, refused = fix_source(source, str(path))
            report.refused.extend(refused)
            if new != source:
                atomic_write_text(path, new, perm=path.stat().st_mode & 0o7777)
                report.changed.append(path)
                source = new
        for group in groups(source):
            report.offences.extend((path, o) for o in offences(group))
    return report


def main(argv: Sequence[str]) -> int:
    fix = "--fix" in argv
    paths = [a for a in argv if a != "--fix"] or [t for t in TREES if Path(t).exists()]
    report = check(paths, fix)
    for path in report.changed:
        print(f"string_splits: reflowed {path}")
    for line in report.refused:
        print(f"string_splits: {line}", file=sys.stderr)
    if fix:  # what is left is what it refused
        return 1 if report.refused else 0
    for path, offence in report.offences:
        print(f"{path}:{offence.line}: {offence.what}", file=sys.stderr)
    if report.offences:
        print("string_splits: fix: scripts/lint.sh --fix (kit docs testing)", file=sys.stderr)
    return 1 if report.offences else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
