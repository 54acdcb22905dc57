"""T-SQL scripts as sqlcmd and SSMS read them: batches split on ``GO`` lines, tokens, and the control flow of a batch
(``IF ... ELSE``, ``BEGIN ... END``, ``BEGIN TRY ... END TRY BEGIN CATCH ... END CATCH``) around its statements.

sqlglot parses single statements well but not T-SQL's control flow across a batch, so the batch is cut here and each
statement's text handed to sqlglot (or read from its tokens) by the runner.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_STARTERS = {"CREATE", "ALTER", "DROP", "INSERT", "UPDATE", "DELETE", "EXEC", "EXECUTE", "PRINT", "RAISERROR",
             "RETURN", "DECLARE", "IF", "BEGIN", "COMMIT", "ROLLBACK", "GRANT", "DENY", "REVOKE", "USE", "WHILE",
             "SET", "SELECT", "TRUNCATE", "MERGE", "BULK", "WITH", "DBCC", "SAVE", "GOTO", "WAITFOR", "RECONFIGURE"}


class ScriptSyntaxError(Exception):
    """A batch whose structure cannot be read (unclosed string, comment or block)."""


@dataclass(frozen=True)
class Token:
    kind: str  # word, ident, string, var, number, punct
    text: str  # identifiers and strings unquoted; words as written
    start: int
    end: int  # exclusive
    line: int

    @property
    def upper(self) -> str:
        return self.text.upper() if self.kind == "word" else ""


@dataclass
class Statement:
    """One statement: its text in the batch and its tokens."""

    text: str
    tokens: list[Token]
    line: int

    @property
    def words(self) -> list[str]:
        return [t.upper for t in self.tokens]


@dataclass
class If:
    condition: Statement
    then: Node
    otherwise: Node | None
    line: int


@dataclass
class Block:
    body: list[Node] = field(default_factory=list)


@dataclass
class TryCatch:
    attempt: Block
    handler: Block
    line: int


Node = Statement | If | Block | TryCatch


def batches(text: str) -> list[tuple[int, str]]:
    """(first line number, text) of each batch; a batch ends at a line that is ``GO`` alone (``GO n`` repeats are
    not modelled)."""
    found: list[tuple[int, str]] = []
    current: list[str] = []
    first = 1
    for number, line in enumerate(text.lstrip("\ufeff").splitlines(), start=1):
        if re.fullmatch(r"\s*go\s*(--.*)?", line, re.IGNORECASE):
            if "".join(current).strip():
                found.append((first, "\n".join(current)))
            current, first = [], number + 1
        else:
            current.append(line)
    if "".join(current).strip():
        found.append((first, "\n".join(current)))
    return found


def tokens(text: str, first_line: int = 1) -> list[Token]:
    found: list[Token] = []
    i, n, line = 0, len(text), first_line
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
        elif c.isspace():
            i += 1
        elif text.startswith("--", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while depth and j < n:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            if depth:
                raise ScriptSyntaxError(f"line {line}: a /* comment is not closed")
            line += text.count("\n", i, j)
            i = j
        elif c == "'" or (c in "nN" and text.startswith("'", i + 1)):
            j = i + (2 if c != "'" else 1)
            parts = []
            while True:
                k = text.find("'", j)
                if k < 0:
                    raise ScriptSyntaxError(f"line {line}: a string is not closed")
                parts.append(text[j:k])
                if text.startswith("''", k):
                    parts.append("'")
                    j = k + 2
                else:
                    break
            found.append(Token("string", "".join(parts), i, k + 1, line))
            line += text.count("\n", i, k + 1)
            i = k + 1
        elif c in "[\"":
            close = "]" if c == "[" else '"'
            j, parts = i + 1, []
            while True:
                k = text.find(close, j)
                if k < 0:
                    raise ScriptSyntaxError(f"line {line}: a quoted name is not closed")
                parts.append(text[j:k])
                if text.startswith(close * 2, k):
                    parts.append(close)
                    j = k + 2
                else:
                    break
            found.append(Token("ident", "".join(parts), i, k + 1, line))
            i = k + 1
        elif c == "@":
            match = re.compile(r"@@?[\w$#@]*").match(text, i)
            assert match is not None
            found.append(Token("var", match.group(), i, match.end(), line))
            i = match.end()
        elif c.isdigit() or (c == "." and i + 1 < n and text[i + 1].isdigit()):
            match = re.compile(r"0x[0-9a-fA-F]*|\d*\.?\d+(?:[eE][+-]?\d+)?\.?").match(text, i)
            assert match is not None
            found.append(Token("number", match.group(), i, match.end(), line))
            i = match.end()
        elif c.isalpha() or c in "_#":
            match = re.compile(r"[\w#$@]+").match(text, i)
            assert match is not None
            found.append(Token("word", match.group(), i, match.end(), line))
            i = match.end()
        else:
            width = 2 if text[i:i + 2] in ("::", "<>", "!=", ">=", "<=", "+=", "-=") else 1
            found.append(Token("punct", text[i:i + width], i, i + width, line))
            i += width
    return found


class _Reader:
    def __init__(self, text: str, items: list[Token]) -> None:
        self.text, self.items, self.at = text, items, 0

    def peek(self, ahead: int = 0) -> Token | None:
        index = self.at + ahead
        return self.items[index] if index < len(self.items) else None

    def word(self, ahead: int = 0) -> str:
        token = self.peek(ahead)
        return token.upper if token is not None else ""

    def block(self, closing: tuple[str, ...] = ()) -> Block:
        """Statements until ``END`` followed by ``closing`` words (or the end of the batch when not given)."""
        body: list[Node] = []
        while True:
            token = self.peek()
            if token is None:
                if closing:
                    raise ScriptSyntaxError(f"a BEGIN {' '.join(closing)} block has no END")
                return Block(body)
            if token.kind == "punct" and token.text == ";":
                self.at += 1
                continue
            if token.upper == "END":
                if closing == ("",):
                    self.at += 1
                    return Block(body)
                if closing and self.word(1) == closing[0]:
                    self.at += 2
                    return Block(body)
                raise ScriptSyntaxError(f"line {token.line}: END without its BEGIN")
            body.append(self.statement())

    def statement(self) -> Node:
        token = self.peek()
        assert token is not None
        if token.upper == "IF":
            self.at += 1
            condition = self._simple(condition=True)
            then = self.statement()
            while self.peek() is not None and self.peek().text == ";":  # type: ignore[union-attr]
                self.at += 1
            otherwise = None
            if self.word() == "ELSE":
                self.at += 1
                otherwise = self.statement()
            return If(condition, then, otherwise, token.line)
        if token.upper == "BEGIN":
            following = self.word(1)
            if following == "TRY":
                self.at += 2
                attempt = self.block(("TRY",))
                if self.word() != "BEGIN" or self.word(1) != "CATCH":
                    raise ScriptSyntaxError(f"line {token.line}: END TRY is not followed by BEGIN CATCH")
                self.at += 2
                return TryCatch(attempt, self.block(("CATCH",)), token.line)
            if following not in ("TRAN", "TRANSACTION", "DISTRIBUTED"):
                self.at += 1
                return self.block(("",))
        return self._simple()

    def _simple(self, condition: bool = False) -> Statement:
        first = self.at
        depth, cases = 0, 0
        head = self.word()
        while True:
            token = self.peek()
            if token is None:
                break
            if token.kind == "punct":
                if token.text == "(":
                    depth += 1
                elif token.text == ")":
                    depth -= 1
                elif token.text == ";" and depth == 0:
                    break
            elif depth == 0 and token.kind == "word":
                upper = token.upper
                if upper == "CASE":
                    cases += 1
                elif upper == "END" and cases:
                    cases -= 1
                elif cases == 0 and self.at > first:
                    if upper in ("END", "ELSE"):
                        break
                    if condition and (upper in _STARTERS and upper not in ("SELECT", "WITH")):
                        break
                    previous = self.items[self.at - 1]
                    continuing = (upper == "SET" and head == "UPDATE") or (upper == "SELECT" and head == "INSERT") \
                        or (upper == "WITH" and head in ("CREATE", "ALTER", "GRANT", "BULK")) \
                        or previous.upper in ("TO", "ON", "AS", "INTO", "FROM", "=", "BY")
                    if not condition and upper in _STARTERS and previous.line != token.line and not continuing:
                        break
            self.at += 1
        chosen = self.items[first:self.at]
        if not chosen:
            token = self.peek()
            raise ScriptSyntaxError(f"line {token.line if token else '?'}: a statement was expected")
        return Statement(self.text[chosen[0].start:chosen[-1].end], chosen, chosen[0].line)


def parse_batch(text: str, first_line: int = 1) -> Block:
    """The control-flow tree of one batch. CREATE FUNCTION, PROCEDURE, TRIGGER and VIEW must each be alone in
    their batch (Microsoft's CREATE FUNCTION and CREATE PROCEDURE pages), so such a batch is one statement."""
    items = tokens(text, first_line)
    words = [t.upper for t in items[:4]]
    if words[:1] == ["CREATE"] and {"FUNCTION", "PROCEDURE", "PROC", "TRIGGER", "VIEW"} & set(words[1:4]):
        return Block([Statement(text[items[0].start:items[-1].end], items, items[0].line)])
    return _Reader(text, items).block()
