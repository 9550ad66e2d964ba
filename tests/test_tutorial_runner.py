"""The tutorial runner (tests/support/tutorial.py): what it reads from a page, what it accepts as
the shown output, and that a page which drifts from the code fails naming its line."""

import os
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.tutorial import Command, blocks, matches, missing, run_page

PAGE = """\
# A page

```sh
$ shown only
```

Some prose.

  ```console
  $ cd sub && export GREETING=hello
  $ echo "$GREETING $(basename "$PWD")" && \\
      echo done
  hello sub
  …
  done
  ```

```console
# exits 3
$ echo oops >&2; (exit 3)
oops
```
"""


def page(tmp_path: Path, text: str = PAGE) -> Path:
    path = tmp_path / "page.md"
    path.write_text(text, encoding="utf-8")
    (tmp_path / "sub").mkdir(exist_ok=True)
    return path


def test_blocks_reads_commands_continuations_output_and_exit_codes(tmp_path):
    assert blocks(page(tmp_path)) == [
        Command(10, "cd sub && export GREETING=hello", (), 0),
        Command(
            11, 'echo "$GREETING $(basename "$PWD")" && \\\necho done', ("hello sub", "done"), 0
        ),
        Command(20, "echo oops >&2; (exit 3)", ("oops",), 3),
    ]


def test_output_before_any_command_is_an_error_naming_the_line(tmp_path):
    with pytest.raises(ValueError, match=r"page\.md:2: output 'stray'"):
        blocks(page(tmp_path, "```console\nstray\n$ true\n```\n"))


def test_an_unclosed_block_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="not closed"):
        blocks(page(tmp_path, "```console\n$ true\n"))


@pytest.mark.parametrize(
    ("shown", "real", "expected"),
    [
        ("took … s", "step 3 took 0.52 s   ", True),  # contained; trailing blanks ignored
        ("…/s", "120.5 showers/s", True),
        ("a…c", "abc", True),
        ("a…c", "ac", True),
        ("1.5 (x)", "1.5 (x) [y]", True),  # regex characters are literal
        ("1.5", "125", False),
        ("took … s", "took 3", False),
        ("│ rate  │  … │", "│ rate        │   12.5 │", True),  # table padding varies
        ("a  b", "a b", True),
        ("a  b", "ab", False),  # padding is one blank or more
        ("a b", "a  b", False),  # a single space is literal
    ],
)
def test_matches(shown, real, expected):
    assert matches(shown, real) is expected


@given(
    st.lists(st.text(alphabet=st.characters(exclude_characters="…\n\r"), min_size=1), min_size=1)
)
def test_a_line_with_its_parts_replaced_by_an_ellipsis_matches_it(parts):
    real = "".join(parts)
    for i in range(len(parts)):
        shown = "".join("…" if j == i else part for j, part in enumerate(parts))
        assert matches(shown, real)


def test_missing_keeps_the_order():
    output = "one\ntwo\nthree\n"
    assert missing(("one", "three"), output) is None
    assert missing(("three", "one"), output) == "one"
    assert missing(("two", "two"), output) == "two"  # one real line matches one shown line


def test_run_page_keeps_the_shell_state_and_checks_exit_codes(tmp_path):
    run_page(page(tmp_path), tmp_path, dict(os.environ), timeout=30)


@pytest.mark.parametrize(
    ("console", "why"),
    [
        ("$ echo hello\nhullo", "the shown line 'hullo' is not in its output"),
        ("$ (exit 2)", "exited 2, the page expects 0"),
        ("# exits 1\n$ true", "exited 0, the page expects 1"),
        ("$ exit 0", "ended the page's shell"),
        ("$ sleep 30", "did not finish within 1 s"),
    ],
)
def test_a_mismatch_names_the_page_line_and_command(tmp_path, console, why):
    path = page(
        tmp_path, f"```console\n$ echo fine\n```\n\n```console\n{console}\n$ echo never\n```\n"
    )
    with pytest.raises(AssertionError) as failure:
        run_page(path, tmp_path, dict(os.environ), timeout=1)
    message = str(failure.value)
    line, command = next(
        (n, text) for n, text in enumerate(console.splitlines(), 6) if text[0] == "$"
    )
    assert message.startswith(f"{path}:{line}: {command}\n"), message
    assert why in message
    assert "never" not in message


def test_a_failure_shows_the_real_output(tmp_path):
    path = page(tmp_path, "```console\n$ echo real; echo line >&2\nother\n```\n")
    with pytest.raises(AssertionError, match=re.compile("its output:\nreal\nline$")):
        run_page(path, tmp_path, dict(os.environ), timeout=10)


def test_a_stand_in_runs_instead_of_the_page_command_and_must_name_one(tmp_path):
    path = page(tmp_path, "```console\n$ build --slow\nbuilt\n$ cat out\nimage\n```\n")
    run_page(
        path, tmp_path, dict(os.environ), timeout=10, stand_ins={"build --slow": "echo image >out"}
    )
    with pytest.raises(AssertionError, match=r"no command \['build --fast'\]"):
        run_page(path, tmp_path, dict(os.environ), timeout=10, stand_ins={"build --fast": "true"})
