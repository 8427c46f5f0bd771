"""Pull the script out of a model's answer (pure).

Models wrap code in Markdown fences (```python, ```, ~~~), add prose before
and after, show the old script next to the new one, think aloud in
``<think>`` blocks, or answer with bare code. ``extract_script`` returns the
one script the host should check: the fenced block that defines
``orchestrate`` (the last such block: models show the fix after the
original; but never the failed script itself when another block defines it:
some show the original after the fix; and never an excerpt, a block with
lines elided as ``...``, when a whole script is there too: some recap the key
change after the fix), else the best other
block, else the code part of unfenced text.
It never judges validity; the checker does that and tells the model why.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice

from broker.syntax import parse_python

_THINK = re.compile(r"<think(?:ing)?>.*?</think(?:ing)?>", re.DOTALL | re.IGNORECASE)
_OPEN = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^\n`]*)$")
_ENTRY = re.compile(r"^\s*async\s+def\s+orchestrate\s*\(", re.MULTILINE)
_PYTHON_INFO = frozenset({"", "python", "python3", "py", "py3"})
# An excerpt of a script elides what it leaves out with a bare `...` line.
_ELIDED = re.compile(r"^[ \t]*(?:\.\.\.|…)[ \t]*(?:#.*)?$", re.MULTILINE)
# Lines that start code in unfenced output (prose lines before them are dropped).
_CODE_START = re.compile(
    r"^(?:async\s+def\s|def\s|\"\"\"|'''|#|[A-Za-z_][A-Za-z0-9_]*\s*=|@)")
_MAX_TRIM_LINES = 40
# Parses tried on one unfenced answer (a 2 MB answer takes about 0.2 s each).
_MAX_PARSES = 2 * (_MAX_TRIM_LINES + 1)  # a heading, then the code


@dataclass(frozen=True)
class _Block:
    info: str
    text: str
    closed: bool


def _blocks(text: str) -> list[_Block]:
    """Fenced blocks in CommonMark style: a fence closes on the same char, >= its length;
    a block whose lines are all indented like its opening fence (a list item's) loses that
    indent."""
    blocks: list[_Block] = []
    lines = text.split("\n")
    index = 0
    while index < len(lines):
        opened = _OPEN.match(lines[index])
        if opened is None:
            index += 1
            continue
        fence, indent = opened.group("fence"), len(opened.group("indent"))
        info = opened.group("info").strip().split(" ")[0].lower()
        body: list[str] = []
        index += 1
        closed = False
        while index < len(lines):
            stripped = lines[index].strip()
            if stripped and set(stripped) == {fence[0]} and len(stripped) >= len(fence):
                closed = True
                index += 1
                break
            body.append(lines[index])
            index += 1
        if indent and all(line.startswith(" " * indent) for line in body if line.strip()):
            body = [line[indent:] for line in body]  # a fence in a list item, its lines too
        blocks.append(_Block(info, "\n".join(body), closed))
    return blocks


def _choose(blocks: list[_Block], failed: str | None) -> _Block | None:
    with_entry = [b for b in blocks if _ENTRY.search(b.text)]
    if failed is not None and len(with_entry) > 1:
        # "The fix, and the original for reference": never the failed script, when the
        # answer holds another (alone, it is a retry, which a transient failure may need).
        changed = [b for b in with_entry if _lines(b.text) != _lines(failed)]
        with_entry = changed or with_entry
    if with_entry:
        # "The fix, then the key change in short": never an excerpt (a body elided with
        # `...`) over a whole script in the same answer.
        whole = [b for b in with_entry if not _ELIDED.search(b.text)]
        with_entry = whole or with_entry
        pythonish = [b for b in with_entry if b.info in _PYTHON_INFO]
        return (pythonish or with_entry)[-1]
    code = [b for b in blocks if b.info in _PYTHON_INFO and b.text.strip()]
    if code:
        return max(code, key=lambda b: len(b.text))
    return None


def _lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.strip("\n").split("\n")]


def _parses(text: str) -> bool:
    try:
        parse_python(text)
    except (SyntaxError, ValueError):
        return False
    return True


def _unfenced(text: str) -> str:
    """Drop leading prose up to the first code line, then trailing prose while it breaks parsing."""
    lines = text.split("\n")
    start = next((i for i, line in enumerate(lines) if _ENTRY.match(line)), None)
    first_code = next((i for i, line in enumerate(lines) if _CODE_START.match(line)), None)
    if first_code is not None and (start is None or first_code <= start):
        start = first_code
    if start is None:
        return ""  # prose only: no line looks like code
    entry = next((i for i, line in enumerate(lines) if _ENTRY.match(line)), len(lines))
    # A Markdown heading ("## Fixed script") looks like a comment; the prose after it is
    # no code: each later line that starts code, up to the entry point, may be the start.
    starts = [start] + [i for i in range(start + 1, min(entry, len(lines) - 1) + 1)
                        if _CODE_START.match(lines[i])]
    tried = islice(_cuts(lines, starts), _MAX_PARSES)
    found = next((candidate for candidate in tried if _parses(candidate)), None)
    # none parses: let the checker report the syntax error with its line
    return found if found is not None else "\n".join(lines[start:]).strip()


def _cuts(lines: list[str], starts: list[int]) -> Iterator[str]:
    """From each start, the rest, then without trailing prose ("This fixes the size."),
    which breaks parsing, dropped line by line."""
    for first in starts:
        kept = lines[first:]
        yield "\n".join(kept).strip()
        for cut in range(1, min(len(kept), _MAX_TRIM_LINES) + 1):
            shorter = "\n".join(kept[:-cut]).strip()
            if shorter and _ENTRY.search(shorter):
                yield shorter


def extract_script(text: str, *, failed: str | None = None) -> str:
    """The script inside a model answer, with a trailing newline; '' when there is none.
    ``failed``: the script being repaired, which a block holding another one outranks."""
    cleaned = _THINK.sub("", text.replace("\r\n", "\n")).strip("\n")
    if not cleaned.strip():
        return ""
    chosen = _choose(_blocks(cleaned), failed)
    if chosen is not None:
        script = chosen.text.strip("\n")
    else:
        # No usable fence (none, or fences around prose): read the text without fence lines.
        bare = "\n".join(x for x in cleaned.split("\n") if _OPEN.match(x) is None
                         and x.strip() not in {"```", "~~~"})
        script = _unfenced(bare)
    return script.rstrip() + "\n" if script.strip() else ""
