"""A fast reader for the protobuf text format, driven by the message descriptors.

`google.protobuf.text_format.Parse` tokenizes in pure Python, one token at a time, at
~3-5 MB/s (17 MB of TF StepStats text: 3.5-5.9 s on the 2-core machine). TF's text
dumps are one field per line, and most lines repeat one met before (85% of the 47 k
lines of the LSTM seed; `}` alone is 23%). So this reader splits a piece of text into
lines and looks each up in a cache of the message type being read (line -> token: a
scalar field's value, converted and range-checked; a message field opening; a close),
so that most lines cost one dict look-up. A line not in the cache is matched with
`_LINE` (one item, or none and a comment: `name: 123`, `name: "text"`, `name: IDENT`,
`name {`, `}`); from a line that is not one whole item (two items on a line, `name` and
its `{` on two lines, ...) the rest of the piece is cut into items by `_ITEM` and read
the same way. Cache: LINE_CACHE (4096) lines per message type and the generation before
(a full cache becomes the previous generation: lines met in each stay, those that never
repeat, such as timestamps, go), lines of at most 160 characters.

Messages are `Plain` ones (Python objects: the fields the text sets are in the
instance's dict, the class holds the defaults), not upb ones: setting a field is a dict
store, reading it a dict look-up, and code that reads upb messages reads them alike.
`iter_stream` gives upb messages (`to_message`) for callers that want them.
Measured on 17 MB (bench/bench_tf_text.py, CPU seconds, best of 3-4, 2 cores at load
9-15): parse 0.44 s with upb messages, one `_ITEM` match a line (setattr) -> 0.21-0.23 s
(0.28-0.32 s with --shift, timestamps moved on per copy so their lines never repeat).

Exactness by construction: the fast path accepts a strict subset of the text format
(no `<...>`, no `[a, b]` lists, no hex/octal/float literals, no adjacent strings, no
extensions or Any, no separators, no field given twice, integers in their field's
range, strings valid UTF-8) and raises `Unsupported` at the first thing outside it.
The caller then parses the whole text with `text_format.Parse`, which either gives the
same message (the subset is read with text_format's own rules) or raises text_format's
own error (line:column and message). So the result, and the error message for bad
input, are text_format's. A token is computed for the message type it is met in (its
own cache), so a line means there what text_format would read.

Streaming: elements of the chosen repeated message fields (`streams`, e.g.
`tracedb.tf.StepStats.dev_stats` and `tracedb.tf.DeviceStepStats.node_stats`) are built
as free messages and yielded with their parent as each one closes instead of being
added to it, so memory holds one element at a time (and the garbage collector does not
walk a device's thousands of nodes). The text may come in chunks (the TF reader decodes
1 MiB at a time): `pieces` regroups them into pieces that end just after a line ending
in `{` or `}`, where no item can straddle the cut (see `pieces`), and each piece is read
on its own, so the items are those of the whole text. Memory: one chunk, the text since
the last such line, its lines, the caches (a few MB at most) and one element (an 80 MB
StepStats reads in the peak RSS of a 10 MB one; tests/test_streaming.py).
"""

from __future__ import annotations

import re
from types import MappingProxyType
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

# The groups of _ITEM; the last one matched (`lastindex`) says which item it is.
_NAME, _NUM, _STR, _IDENT, _OPEN, _CLOSE, _END, _BAD = range(1, 9)

# A line (or an item of _ITEM) that holds one item or none, and maybe a comment: the
# same groups, read by the same rules, without the blanks and comments of other lines.
_LINE = re.compile(
    r"[ \t\r\f\v]*+"
    r"(?:([A-Za-z_]\w*+)[ \t]*+"  # name
    r"(?::[ \t]*+(?:(-?(?:0|[1-9]\d*+))(?![\w.+-])"  # : decimal
    r"|\"([^\"\\\n]*+(?:\\.[^\"\\\n]*+)*+)\""  # : "string"
    r"|([A-Za-z_]\w*+)(?![\w.+-]))"  # : IDENT
    r"|(:?\s*+\{))"  # {
    r"|(\}))?+"  # }
    r"[ \t\r\f\v]*+(?:#[^\n]*+)?+",
    re.ASCII,
)
# Tokens: what a line (or an item) does in the message being read, by op (the first element):
# (_SET, name, value) a singular scalar field; (_APPEND, name, value) a repeated one;
# (_OPEN_FIELD, name, entry) a message field opens; (_CLOSE_MSG,) it closes; (_NOTHING,).
_SET, _CLOSE_MSG, _OPEN_FIELD, _APPEND, _NOTHING = range(5)
_CLOSE_TOKEN, _NOTHING_TOKEN = (_CLOSE_MSG,), (_NOTHING,)
LINE_CACHE = 4096  # tokens kept per message type, and as many of the generation before
_CACHED_LINE = 160  # longer lines are tokenized each time (a rare value: not worth keeping)
# Field kinds (a table entry's first element).
(_INT_FIELD, _STR_FIELD, _SCALAR, _REPEATED_SCALAR, _MESSAGE, _REPEATED_MESSAGE, _MAP, _STREAM, _OTHER,
 _UNKNOWN) = range(10)
# Value kinds.
_INT, _BOOL, _ENUM, _STRING, _BYTES, _FLOAT = range(6)

_I32, _U32 = (-(1 << 31), (1 << 31) - 1), (0, (1 << 32) - 1)
_I64, _U64 = (-(1 << 63), (1 << 63) - 1), (0, (1 << 64) - 1)
_T = _d.FieldDescriptor
# Integer field types -> the range upb (and text_format) accept.
_INT_RANGES = {
    _T.TYPE_INT32: _I32, _T.TYPE_SINT32: _I32, _T.TYPE_SFIXED32: _I32,
    _T.TYPE_UINT32: _U32, _T.TYPE_FIXED32: _U32,
    _T.TYPE_INT64: _I64, _T.TYPE_SINT64: _I64, _T.TYPE_SFIXED64: _I64,
    _T.TYPE_UINT64: _U64, _T.TYPE_FIXED64: _U64,
    _T.TYPE_ENUM: _I32,  # an open enum's number
}
_BOOLS = {"true": True, "True": True, "t": True, "false": False, "False": False, "f": False}


class Unsupported(Exception):
    """The text uses something outside the fast subset (or is bad): parse it with text_format."""


class Plain:
    """A message read by `iter_plain`: the fields the text sets are instance attributes,
    the others read their defaults from the class (0, "", False, an empty tuple, an empty
    read-only mapping, or a shared empty message), so code that reads a upb message's
    fields (attributes, `len`, iteration, `dict(map)`, `HasField`) reads a Plain one alike.
    Repeated fields are lists, maps dicts. Reading one costs a dict look-up, not a upb call."""

    DESCRIPTOR: _d.Descriptor

    def HasField(self, name: str) -> bool:
        return name in self.__dict__

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and vars(other) == vars(self)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({vars(self)!r})"


_PLAIN_NAMES = frozenset(dir(Plain))  # a field so named (`HasField`) is left to text_format


def _value_kind(field: _d.FieldDescriptor) -> int:
    t = field.type
    if t in _INT_RANGES and t != _T.TYPE_ENUM:
        return _INT
    if t == _T.TYPE_BOOL:
        return _BOOL
    if t == _T.TYPE_ENUM:
        return _ENUM
    if t == _T.TYPE_STRING:
        return _STRING
    if t == _T.TYPE_BYTES:
        return _BYTES
    return _FLOAT


def _classes(desc: _d.Descriptor, classes: dict[str, type]) -> type:
    """The Plain class of `desc` and of every message type under it (in `classes`),
    their defaults set once all exist (messages may nest themselves)."""
    if desc.full_name in classes:
        return classes[desc.full_name]
    cls = classes[desc.full_name] = type(desc.name, (Plain,), {"DESCRIPTOR": desc})
    for f in desc.fields:
        if f.message_type is not None:
            _classes(f.message_type, classes)
    for f in desc.fields:
        if f.name in _PLAIN_NAMES:
            continue  # not read fast (an _OTHER field): the class keeps its own
        if f.message_type is not None and f.message_type.GetOptions().map_entry:
            default: Any = MappingProxyType({})
        elif f.is_repeated:
            default = ()
        elif f.message_type is not None:
            default = classes[f.message_type.full_name]()  # shared: read, never written
        else:
            default = f.default_value
        setattr(cls, f.name, default)
    return cls


def _table(desc: _d.Descriptor, streams: frozenset[str], tables: dict[str, dict],
           classes: dict[str, type], caches: dict[str, dict]) -> dict[str, tuple]:
    """field name -> entry, by field kind:
    _INT_FIELD: (kind, lowest, highest value); _STR_FIELD: (kind,);
    _SCALAR, _REPEATED_SCALAR: (kind, value kind, enum descriptor, lowest, highest);
    _MESSAGE, _REPEATED_MESSAGE, _MAP, _STREAM: (kind, full name, sub-table, Plain class,
    the sub-table's line cache (in `caches`: line -> token));
    _OTHER (oneof members, extensions: not in the fast subset): (kind,)."""
    if desc.full_name in tables:
        return tables[desc.full_name]
    table = tables[desc.full_name] = {}
    caches[desc.full_name] = {}
    for f in desc.fields:
        if f.containing_oneof is not None or f.is_extension or f.name in _PLAIN_NAMES:
            table[f.name] = (_OTHER,)  # text_format checks them
        elif f.message_type is not None:
            sub = _table(f.message_type, streams, tables, classes, caches)
            sub_name = f.message_type.full_name
            if f.message_type.GetOptions().map_entry:
                kind = _MAP
            elif f.full_name in streams and f.is_repeated:
                kind = _STREAM
            else:
                kind = _REPEATED_MESSAGE if f.is_repeated else _MESSAGE
            table[f.name] = (kind, f.full_name, sub, _classes(f.message_type, classes), caches[sub_name])
        else:
            vkind, (lo, hi) = _value_kind(f), _INT_RANGES.get(f.type, (0, 0))
            if f.is_repeated:
                table[f.name] = (_REPEATED_SCALAR, vkind, f.enum_type, lo, hi)
            elif vkind in (_INT, _STRING):
                table[f.name] = (_INT_FIELD, lo, hi) if vkind == _INT else (_STR_FIELD,)
            else:
                table[f.name] = (_SCALAR, vkind, f.enum_type, lo, hi)
    return table


_UNKNOWN_FIELD = (_UNKNOWN,)
_SKIP: dict[str, tuple] = {}  # the table inside an unknown field's message: every name unknown


def _unknown(table: dict[str, tuple], name: str) -> tuple:
    """The entry of a name not in `table`: an unknown field, skipped (with its message)."""
    if name.lower() in table:  # maybe a proto2 group's type name: text_format decides
        raise Unsupported
    return _UNKNOWN_FIELD


def _string(s: str) -> str:
    return text_encoding.CUnescape(s).decode("utf-8") if "\\" in s else s


def _value(vkind: int, enum: Any, lo: int, hi: int, num: str | None, s: str | None, ident: str | None) -> Any:
    """The value of the item `name: <num | "s" | ident>` (one of them not None) for a field
    of value kind `vkind`; Unsupported where text_format must decide."""
    if vkind == _INT or (vkind == _ENUM and num is not None):
        if num is None or (vkind == _ENUM and enum.is_closed):
            raise Unsupported
        v = int(num)
        if v < lo or v > hi:
            raise Unsupported
        return v
    if vkind == _STRING or vkind == _BYTES:
        if s is None:
            raise Unsupported
        return _string(s) if vkind == _STRING else text_encoding.CUnescape(s)
    if vkind == _ENUM:
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
    and the text after it starts a fresh item, at a line's start (so a piece's lines are
    whole lines, and a line that is one item is that item in the whole text too; the
    carry's leading blanks dropped are blanks before an item). Memory: a chunk plus the carry (the text
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
    """`iter_plain` of one streamed field as upb messages: each element (a message of
    the field's type), and the root's other fields set in `root` when the text ends."""
    it = _parser(text, root.DESCRIPTOR, [stream])
    while True:
        try:
            _, element = next(it)
        except StopIteration as done:
            to_message(done.value, root)
            return
        yield to_message(element, message_factory.GetMessageClass(element.DESCRIPTOR)())


def iter_plain(text: str | Iterable[str], desc: _d.Descriptor,
               streams: Iterable[str]) -> Iterator[tuple[Plain, Plain]]:
    """Parse `text` (one string, or its chunks in order: cut into `pieces`) as a message
    of type `desc` into `Plain` messages, yielding (parent, element) for each element of
    the repeated message fields named in `streams` (full names, e.g.
    'tracedb.tf.StepStats.dev_stats') as it closes, not adding it to its parent (which
    holds the fields read so far); returns (StopIteration.value) the root, without them.
    A streamed field met inside an element of its own stays in it. Raises Unsupported
    (maybe after some yields) where text_format must take over. Unknown fields are
    skipped, as text_format.Parse(allow_unknown_field=True) does."""
    return _parser(text, desc, streams)


def _parser(text: str | Iterable[str], desc: _d.Descriptor,
            streams: Iterable[str]) -> Iterator[tuple[Plain, Plain]]:
    classes: dict[str, type] = {}
    caches: dict[str, dict] = {}
    table = _table(desc, frozenset(streams), {}, classes, caches)
    return _parse(text, table, caches[desc.full_name], _classes(desc, classes)())


def to_message(plain: Plain, msg: Message) -> Message:
    """Set the fields of `plain` in the upb message `msg` (of the same type); `msg`."""
    fields = msg.DESCRIPTOR.fields_by_name
    for name, v in vars(plain).items():
        f = fields[name]
        if f.message_type is None:
            if f.is_repeated:
                getattr(msg, name).extend(v)
            else:
                setattr(msg, name, v)
        elif f.message_type.GetOptions().map_entry:
            target = getattr(msg, name)
            for key, x in v.items():
                if isinstance(x, Plain):
                    to_message(x, target[key])
                else:
                    target[key] = x
        elif f.is_repeated:
            target = getattr(msg, name)
            for x in v:
                to_message(x, target.add())
        else:
            getattr(msg, name).SetInParent()
            to_message(v, getattr(msg, name))
    return msg


def _parse(text: str | Iterable[str], table: dict[str, tuple], cache: dict[str, tuple],
           root: Plain) -> Iterator[tuple[Plain, Plain]]:
    """The parse: each line of a piece is looked up in the line cache of the message type
    being read (`cache`: line -> token; most lines of a TF dump repeat one met before) or
    learnt (`_learn`); from the first line that is not one whole item (an item across
    lines, two on a line), the rest of the piece is cut into items by `_items`. One
    function, the tokens' ops inline: a call a line would cost more than the look-up."""
    parts = [text] if isinstance(text, str) else pieces(text)
    msg: Any = root
    d = vars(root)  # the fields set in msg
    stack: list[tuple[Any, dict, dict, dict, int, str]] = []  # the enclosing messages
    streaming: set[str] = set()  # streamed fields with an element open
    skip_cache: dict[str, tuple] = {}  # the line cache inside unknown fields
    try:
        for piece, final in _with_last(parts):
            lines: list[str] | None = piece.split("\n")
            bad = by_items = False
            while lines is not None:
                todo, lines = lines, None
                for i, line in enumerate(todo):
                    tok = cache.get(line)
                    if tok is None:
                        tok = _learn(line, table, cache)
                        if tok is None:  # not one whole item
                            if by_items:
                                raise Unsupported  # not reached: _items gives whole items
                            lines, bad = _items(piece, sum(map(len, todo[:i])) + i)
                            by_items = True
                            break
                    op = tok[0]
                    if op == _SET:
                        name = tok[1]
                        if name in d:  # a field given twice: text_format decides
                            raise Unsupported
                        d[name] = tok[2]
                    elif op == _CLOSE_MSG:
                        if not stack:
                            raise Unsupported
                        child = msg
                        msg, d, table, cache, kind, name = stack.pop()
                        if kind == _STREAM:
                            streaming.discard(name)
                            yield msg, child
                        elif kind == _MAP:
                            _add_entry(d, name, child)
                    elif op == _OPEN_FIELD:
                        name, f = tok[1], tok[2]
                        kind = f[0]
                        if kind == _UNKNOWN:  # skipped: names inside are unknown too
                            stack.append((msg, d, table, cache, kind, name))
                            msg, d, table, cache = None, {}, _SKIP, skip_cache
                            continue
                        child = f[3]()
                        if kind == _REPEATED_MESSAGE or (kind == _STREAM and f[1] in streaming):
                            kind = _REPEATED_MESSAGE  # a streamed field nested in an element stays in it
                            if name in d:
                                d[name].append(child)
                            else:
                                d[name] = [child]
                        elif kind == _MESSAGE:
                            if name in d:
                                raise Unsupported
                            d[name] = child
                        elif kind == _STREAM:
                            streaming.add(f[1])
                            name = f[1]  # popped at the close
                        # else a map entry, added to its map when it closes
                        stack.append((msg, d, table, cache, kind, name))
                        msg, d, table, cache = child, vars(child), f[2], f[4]
                    elif op == _APPEND:
                        name = tok[1]
                        if name in d:
                            d[name].append(tok[2])
                        else:
                            d[name] = [tok[2]]
            if bad:
                raise Unsupported
            if final:
                if stack:
                    raise Unsupported
                return root
        raise Unsupported  # not reached: the last piece is final
    except (Unsupported, TracedbError):  # TracedbError: reading the chunks failed
        raise
    except Exception as e:  # a value text_format may refuse (UTF-8 of an escape): it says why
        raise Unsupported from e


def _learn(line: str, table: dict[str, tuple], cache: dict) -> tuple | None:
    """The token of a line not in `cache`: from the cache's previous generation (kept
    under the key None when the cache filled up), else `_token`; kept in `cache`. Two
    generations: a line met in each stays (a timestamp's line does not, and does not
    push out the lines that repeat)."""
    prev = cache.get(None)
    tok = prev.get(line) if prev is not None else None
    if tok is None:
        tok = _token(line, table)
        if tok is None or len(line) > _CACHED_LINE:
            return tok
    if len(cache) > LINE_CACHE:  # (the key None counts too)
        prev = cache.copy()
        prev.pop(None, None)
        cache.clear()  # in place: table entries and the stack hold it
        cache[None] = prev
    cache[line] = tok
    return tok


def _token(line: str, table: dict[str, tuple]) -> tuple | None:
    """The token of a line (or item) in a message whose fields are `table`: None if it is
    not one item (or none) and a comment; Unsupported if the item is one text_format
    must judge (a value of the wrong kind or out of range, a field outside the subset)."""
    m = _LINE.fullmatch(line)
    if m is None:
        return None
    item = m.lastindex
    if item is None:  # blanks or a comment
        return _NOTHING_TOKEN
    if item == _CLOSE:
        return _CLOSE_TOKEN
    name = m[_NAME]
    try:
        f = table[name]
    except KeyError:
        f = _unknown(table, name)
    kind = f[0]
    if item == _OPEN:
        if kind < _MESSAGE or kind == _OTHER:  # a scalar field given a message
            raise Unsupported
        return (_OPEN_FIELD, name, f)
    num, s, ident = m.group(_NUM, _STR, _IDENT)
    if kind == _INT_FIELD:
        if num is None:
            raise Unsupported
        v = int(num)
        if v < f[1] or v > f[2]:
            raise Unsupported
        return (_SET, name, v)
    if kind == _STR_FIELD:
        if s is None:
            raise Unsupported
        return (_SET, name, _string(s))
    if kind == _SCALAR:
        return (_SET, name, _value(f[1], f[2], f[3], f[4], num, s, ident))
    if kind == _REPEATED_SCALAR:
        return (_APPEND, name, _value(f[1], f[2], f[3], f[4], num, s, ident))
    if kind == _UNKNOWN:
        return _NOTHING_TOKEN
    raise Unsupported  # a message field given a value, or a field outside the subset


def _items(piece: str, pos: int) -> tuple[list[str], bool]:
    """The items of `piece` from `pos` on (each without the blanks and comments before
    it), and whether something that is not an item (`bad`) ends them."""
    items = []
    for m in _ITEM.finditer(piece, pos):
        item = m.lastindex
        if item == _END:
            return items, False
        if item == _BAD:
            return items, True
        items.append(piece[m.start(_NAME if item <= _OPEN else item):m.end()])
    return items, False  # not reached: the last match is the end or `bad`


def _add_entry(d: dict, name: str, entry: Plain) -> None:
    """Put a closed map entry in the map `name` of the fields `d` (a later key wins, as in text_format)."""
    fields = vars(entry)
    value = fields["value"] if "value" in fields else entry.value
    if isinstance(value, Plain) and "value" not in fields:
        value = type(value)()  # its own empty message, not the shared default
    if name in d:
        d[name][entry.key] = value
    else:
        d[name] = {entry.key: value}
