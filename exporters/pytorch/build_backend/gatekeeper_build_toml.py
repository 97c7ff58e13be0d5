"""The subset of TOML that pyproject.toml uses, for Python 3.10 (no tomllib).

Tables ([a.b."c"]), one key = value per line with a bare or quoted key,
and values that are strings (basic, escapes as in JSON, or literal),
booleans, integers, or arrays of those over one or more lines; comments.
Anything else is a TomlError naming the line, never a wrong answer: on
Python 3.11+ the backend uses tomllib, and a test checks both read this
project's pyproject.toml alike.
"""

from __future__ import annotations

import json
import re
from typing import Any

_BARE = re.compile(r"[A-Za-z0-9_-]+")
_INT = re.compile(r"[+-]?[0-9]+")
_JSON = json.JSONDecoder(strict=False)  # TOML strings may hold tabs; the escapes are TOML's but \U


class TomlError(ValueError):
    """Text outside the supported subset, or not TOML."""


class _Reader:
    def __init__(self, text: str) -> None:
        self.s, self.i = text, 0

    def fail(self, what: str) -> TomlError:
        line = self.s.count("\n", 0, self.i) + 1
        return TomlError(f"line {line}: {what} (a TOML subset is read on Python < 3.11)")

    def peek(self) -> str:
        return self.s[self.i] if self.i < len(self.s) else ""

    def skip(self, newlines: bool) -> None:
        """Skips blanks and comments, and line ends too when newlines."""
        while self.i < len(self.s):
            c = self.s[self.i]
            if c in " \t" or (newlines and c in "\r\n"):
                self.i += 1
            elif c == "#":
                while self.i < len(self.s) and self.s[self.i] != "\n":
                    self.i += 1
            else:
                return

    def end_of_line(self) -> None:
        self.skip(newlines=False)
        if self.peek() not in ("", "\n", "\r"):
            raise self.fail(f"unexpected {self.peek()!r}")

    def key(self) -> str:
        c = self.peek()
        if c in "\"'":
            return self.string()
        m = _BARE.match(self.s, self.i)
        if not m:
            raise self.fail("want a key")
        self.i = m.end()
        return m.group()

    def string(self) -> str:
        quote = self.peek()
        if self.s.startswith(quote * 3, self.i):
            raise self.fail("multi-line strings are not supported")
        j = self.i + 1
        while j < len(self.s) and self.s[j] != quote:
            if self.s[j] == "\n":
                raise self.fail("unterminated string")
            j += 2 if quote == '"' and self.s[j] == "\\" else 1
        if j >= len(self.s):
            raise self.fail("unterminated string")
        raw, self.i = self.s[self.i + 1:j], j + 1
        if quote == "'":
            return raw
        try:
            return _JSON.decode(f'"{raw}"')
        except ValueError as e:
            raise self.fail(f"bad escape in string: {e}") from None

    def value(self) -> Any:
        c = self.peek()
        if c in "\"'":
            return self.string()
        if c == "[":
            self.i += 1
            items = []
            while True:
                self.skip(newlines=True)
                if self.peek() == "]":
                    self.i += 1
                    return items
                items.append(self.value())
                self.skip(newlines=True)
                if self.peek() == ",":
                    self.i += 1
                elif self.peek() != "]":
                    raise self.fail("want ',' or ']' in an array")
        for word, v in (("true", True), ("false", False)):
            if self.s.startswith(word, self.i):
                self.i += len(word)
                return v
        m = _INT.match(self.s, self.i)
        if m and not self.s[m.end():m.end() + 1].isalnum() and self.s[m.end():m.end() + 1] not in ".:":
            self.i = m.end()
            return int(m.group())
        raise self.fail("unsupported value")


def loads(text: str) -> dict[str, Any]:
    """Parses text (the subset above). Raises TomlError."""
    r = _Reader(text)
    doc: dict[str, Any] = {}
    table = doc
    while True:
        r.skip(newlines=True)
        if not r.peek():
            return doc
        if r.peek() == "[":
            if r.s.startswith("[[", r.i):
                raise r.fail("arrays of tables are not supported")
            r.i += 1
            table = doc
            while True:
                r.skip(newlines=False)
                k = r.key()
                table = table.setdefault(k, {})
                if not isinstance(table, dict):
                    raise r.fail(f"{k!r} is not a table")
                r.skip(newlines=False)
                if r.peek() == ".":
                    r.i += 1
                    continue
                if r.peek() != "]":
                    raise r.fail("want ']'")
                r.i += 1
                break
        else:
            k = r.key()
            r.skip(newlines=False)
            if r.peek() != "=":
                raise r.fail("want '=' (dotted keys are not supported)")
            r.i += 1
            r.skip(newlines=False)
            if k in table:
                raise r.fail(f"duplicate key {k!r}")
            table[k] = r.value()
        r.end_of_line()
