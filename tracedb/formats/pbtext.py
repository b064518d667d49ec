"""A fast reader for the protobuf text format, driven by the message descriptors.

`google.protobuf.text_format.Parse` tokenizes in pure Python, one token at a time, at
~3-5 MB/s (17 MB of TF StepStats text: 5.9 s on the 2-core machine). TF's text dumps
are one field per line, so this reader matches a whole line with one regex
(`name: 123`, `name: "text"`, `name: IDENT`, `name {`, `}`) and sets the field on the
upb message with `setattr` (the conversion and range checks happen in C): ~1 µs a line,
~20 MB/s including the regex (see bench/bench_tf_text.py for the figures).

Exactness by construction: the fast path accepts a strict subset of the text format
(no `<...>`, no `[a, b]` lists, no hex/octal/float literals, no adjacent strings, no
extensions or Any, no separators, no field given twice) and raises `Unsupported` at
the first thing outside it. The caller then parses the whole text with
`text_format.Parse`, which either gives the same message (the subset is read with
text_format's own rules) or raises text_format's own error (line:column and message).
So the result, and the error message for bad input, are text_format's.

Streaming: elements of one chosen repeated message field (`stream=`, e.g.
`tracedb.tf.StepStats.dev_stats`) are built as free messages and yielded as each one
closes instead of being added to their parent, so memory holds one element at a time.
The text may come in chunks (the TF reader decodes 1 MiB at a time): `pieces` regroups
them into pieces that end just after a line ending in `{` or `}`, where no match can
straddle the cut (see `pieces`), and each piece is matched on its own, so the matches
are those of the whole text. Memory: one chunk, the text since the last such line, and
one element (an 80 MB StepStats reads in the peak RSS of a 10 MB one, +4 MB;
tests/test_streaming.py). Cost: 17 MB parse in 0.48 s in 1 MiB chunks vs 0.46 s as one
string, and the reader gains that back by not decoding the whole file at once (read
0.81 s vs 0.86 s; bench/bench_tf_text.py, load ~3.5).
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Iterator

from google.protobuf import descriptor as _d
from google.protobuf import message_factory, text_encoding
from google.protobuf.message import Message

from tracedb.errors import TracedbError

# One item: optional whitespace/comments, then `name {`, `name: {`, `name: <simple scalar>`,
# `}` or the end of the text. A number or identifier must not run on into what
# text_format would read as the same token ([0-9A-Za-z_.+-]).
_ITEM = re.compile(
    r"\s*+(?:#[^\n]*+\s*+)*+"
    r"(?:([A-Za-z_]\w*+)[ \t]*+"  # name
    r"(?::[ \t]*+(?:(-?(?:0|[1-9]\d*+))(?![\w.+-])"  # : decimal
    r"|\"([^\"\\\n]*+(?:\\.[^\"\\\n]*+)*+)\""  # : "string"
    r"|([A-Za-z_]\w*+)(?![\w.+-]))"  # : IDENT
    r"|(:?\s*+\{))"  # {
    r"|(\})|(\Z)|([\s\S]))",  # } or the end or anything else (so matches are contiguous)
    re.ASCII,
)

# Field kinds in a table entry.
_SCALAR, _REPEATED_SCALAR, _MESSAGE, _REPEATED_MESSAGE, _MAP, _STREAM, _OTHER = range(7)
# Value kinds.
_INT, _BOOL, _ENUM, _STRING, _BYTES, _FLOAT = range(6)

_INT_TYPES = {
    _d.FieldDescriptor.TYPE_INT32, _d.FieldDescriptor.TYPE_INT64, _d.FieldDescriptor.TYPE_UINT32,
    _d.FieldDescriptor.TYPE_UINT64, _d.FieldDescriptor.TYPE_SINT32, _d.FieldDescriptor.TYPE_SINT64,
    _d.FieldDescriptor.TYPE_FIXED32, _d.FieldDescriptor.TYPE_FIXED64,
    _d.FieldDescriptor.TYPE_SFIXED32, _d.FieldDescriptor.TYPE_SFIXED64,
}
_BOOLS = {"true": True, "True": True, "t": True, "false": False, "False": False, "f": False}


class Unsupported(Exception):
    """The text uses something outside the fast subset (or is bad): parse it with text_format."""


def _value_kind(field: _d.FieldDescriptor) -> int:
    t = field.type
    if t in _INT_TYPES:
        return _INT
    if t == _d.FieldDescriptor.TYPE_BOOL:
        return _BOOL
    if t == _d.FieldDescriptor.TYPE_ENUM:
        return _ENUM
    if t == _d.FieldDescriptor.TYPE_STRING:
        return _STRING
    if t == _d.FieldDescriptor.TYPE_BYTES:
        return _BYTES
    return _FLOAT


class _Table(dict):
    """field name -> (kind, value kind, sub-table or enum descriptor, class of a streamed element)."""


def _table(desc: _d.Descriptor, stream: str, tables: dict[str, _Table]) -> _Table:
    if desc.full_name in tables:
        return tables[desc.full_name]
    table = tables[desc.full_name] = _Table()
    for f in desc.fields:
        if f.containing_oneof is not None or f.is_extension:
            table[f.name] = (_OTHER, None, None, None)  # not in the fast subset: falls back
            continue
        if f.message_type is not None:
            sub = _table(f.message_type, stream, tables)
            if f.message_type.GetOptions().map_entry:
                kind = _MAP
            elif f.full_name == stream:
                kind = _STREAM
            else:
                kind = _REPEATED_MESSAGE if f.is_repeated else _MESSAGE
            cls = message_factory.GetMessageClass(f.message_type) if kind == _STREAM else None
            table[f.name] = (kind, None, sub, cls)
        else:
            kind = _REPEATED_SCALAR if f.is_repeated else _SCALAR
            table[f.name] = (kind, _value_kind(f), f.enum_type, None)
    return table


def _string(s: str) -> str:
    return text_encoding.CUnescape(s).decode("utf-8") if "\\" in s else s


def _value(vkind: int, enum: Any, num: str | None, s: str | None, ident: str | None) -> Any:
    if vkind == _INT:
        if num is None:
            raise Unsupported
        return int(num)
    if vkind == _STRING:
        if s is None:
            raise Unsupported
        return _string(s)
    if vkind == _BYTES:
        if s is None:
            raise Unsupported
        return text_encoding.CUnescape(s)
    if vkind == _ENUM:
        if num is not None:
            if enum.is_closed:
                raise Unsupported
            return int(num)
        v = enum.values_by_name.get(ident) if ident is not None else None
        if v is None:
            raise Unsupported
        return v.number
    if vkind == _BOOL:
        if num in ("0", "1"):
            return num == "1"
        if ident in _BOOLS:
            return _BOOLS[ident]
        raise Unsupported
    raise Unsupported  # floats: rare in our protos, text_format reads them


MAX_CARRY = 64 << 20  # text with no brace-ended line in it held at most (then: text_format)


def pieces(chunks: Iterable[str], max_carry: int = MAX_CARRY) -> Iterator[str]:
    """The text of `chunks` regrouped into pieces that each end at a safe cut: just after
    a line whose last non-blank character is `{` or `}` (the last piece: the text's end).

    Why that cut is safe: `_ITEM` reads nothing across a line end but the blanks and
    comments before an item and those inside `name\n{`; strings and values stop at the
    line end. A line that ends in a brace ends its last item at that brace (a brace needs
    no look-ahead), so every match before the cut is the one the whole text gives there,
    and the text after it starts a fresh item. Memory: a chunk plus the carry (the text
    after the last cut, less leading blanks); a carry over `max_carry` (no brace-ended
    line in that much text) raises Unsupported."""
    carry = ""
    for chunk in chunks:
        buf = carry + chunk if carry else chunk
        cut = _last_cut(buf, len(carry))  # the carry's own newlines were no cut
        if cut:
            yield buf[:cut]
            carry = buf[cut:]
        else:  # blanks before an item are skipped: a run of them is not held
            carry = buf.lstrip(" \t\n\r\f\v")
            if len(carry) > max_carry:
                raise Unsupported
    yield carry


def _last_cut(buf: str, lo: int = 0) -> int:
    """The index just past the last newline (at lo or after) that ends a line ending in
    `{` or `}`; 0 if none."""
    nl = buf.rfind("\n", lo)
    while nl > 0:
        j = nl - 1
        while j >= 0 and buf[j] in " \t\r":
            j -= 1
        if j >= 0 and buf[j] in "{}":
            return nl + 1
        nl = buf.rfind("\n", lo, j + 1)
    return 0


def _with_last(parts: Iterable[str]) -> Iterator[tuple[str, bool]]:
    """(piece, is it the last one) for each piece."""
    it = iter(parts)
    prev = next(it, None)
    for piece in it:
        yield prev, False
        prev = piece
    if prev is not None:
        yield prev, True


def iter_stream(text: str | Iterable[str], root: Message, stream: str) -> Iterator[Message]:
    """Parse `text` (one string, or its chunks in order: cut into `pieces`) into `root`, yielding each element of the repeated field `stream`
    (full name, e.g. 'tracedb.tf.StepStats.dev_stats') as it closes, not adding it to its
    parent. Raises Unsupported (maybe after some yields) where text_format must take over.
    Unknown fields are skipped, as text_format.Parse(allow_unknown_field=True) does."""
    parts = [text] if isinstance(text, str) else pieces(text)
    table = _table(root.DESCRIPTOR, stream, {})
    msg: Any = root
    seen: set[str] = set()
    stack: list[tuple[Any, Any, set[str], int, str]] = []
    skip = 0  # depth inside an unknown message field
    streaming = False  # inside a streamed element
    try:
        # Every position matches an item or the catch-all `bad`, so finditer's matches
        # are contiguous: nothing is skipped unseen.
        # A piece's end (`\Z`) that is not the text's end only moves on to the next piece.
        for piece, final in _with_last(parts):
            for m in _ITEM.finditer(piece):
                name, num, s, ident, opn, close, end, bad = m.groups()
                if bad is not None:
                    raise Unsupported
                if end is not None and not final:
                    break
                if skip:
                    if opn is not None:
                        skip += 1
                    elif close is not None:
                        skip -= 1
                    elif end is not None:
                        raise Unsupported
                    continue
                if name is not None:
                    f = table.get(name)
                    if f is None:  # unknown field: skip its value or message
                        if name.lower() in table:  # maybe a proto2 group's type name: text_format decides
                            raise Unsupported
                        if opn is not None:
                            skip = 1
                        continue
                    kind, vkind, sub, cls = f
                    if kind == _SCALAR:
                        if opn is not None or name in seen:
                            raise Unsupported
                        seen.add(name)
                        if vkind == _INT and num is not None:
                            setattr(msg, name, int(num))
                        elif vkind == _STRING and s is not None and "\\" not in s:
                            setattr(msg, name, s)
                        else:
                            setattr(msg, name, _value(vkind, sub, num, s, ident))
                        continue
                    if opn is None:
                        if kind != _REPEATED_SCALAR:
                            raise Unsupported
                        getattr(msg, name).append(_value(vkind, sub, num, s, ident))
                        continue
                    if kind == _REPEATED_MESSAGE:
                        child = getattr(msg, name).add()
                    elif kind == _MESSAGE:
                        if name in seen:
                            raise Unsupported
                        seen.add(name)
                        child = getattr(msg, name)
                        child.SetInParent()
                    elif kind == _STREAM:
                        if streaming:  # the same field nested inside an element: kept in it
                            child, kind = getattr(msg, name).add(), _REPEATED_MESSAGE
                        else:
                            child, streaming = cls(), True
                    elif kind == _MAP:
                        child = getattr(msg, name).GetEntryClass()()
                    else:
                        raise Unsupported
                    stack.append((msg, table, seen, kind, name))
                    msg, table, seen = child, sub, set()
                elif close is not None:
                    if not stack:
                        raise Unsupported
                    child = msg
                    msg, table, seen, kind, name = stack.pop()
                    if kind == _STREAM:
                        streaming = False
                        yield child
                    elif kind == _MAP:
                        target = getattr(msg, name)
                        if isinstance(child.value, Message):
                            target[child.key].CopyFrom(child.value)
                        else:
                            target[child.key] = child.value
                else:
                    if stack:
                        raise Unsupported
                    return
        raise Unsupported  # not reached: the last match is always the end or `bad`
    except (Unsupported, TracedbError):  # TracedbError: reading the chunks failed
        raise
    except Exception as e:  # a value upb refuses (range, type, UTF-8): text_format says why
        raise Unsupported from e
