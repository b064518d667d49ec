"""pbtext fed in chunks (issue 13: TF text streams) against pbtext fed the whole text.

`pbtext.pieces` regroups chunks into pieces cut just after a line ending in a brace; the
parse of the pieces must be the parse of the whole text, match for match: the same
streamed elements, the same root, and `Unsupported` (the text_format fallback) at the same
element. Checked on the TF text seeds, their rewrites outside the subset, bad inputs and
random edits, with chunk sizes from 1 char (a cut inside every token) to odd sizes.
"""

from __future__ import annotations

import random

import pytest
from google.protobuf import text_format

from test_pbtext import BAD, REWRITES, RUNMETA, STREAM, STREAMS, small_text
from tracedb.formats import pbtext
from tracedb.proto import run_metadata_pb2, step_stats_pb2

SIZES = (1, 2, 3, 5, 7, 13, 64, 1000, 4099)


def chunked(text: str, size: int):
    return (text[i:i + size] for i in range(0, len(text), size))


def outcome(text, cls) -> tuple:
    """(root, streamed elements, gave up?) of pbtext on `text` (a str or its chunks)."""
    root, devs = cls(), []
    try:
        for d in pbtext.iter_stream(text, root, STREAM):
            devs.append(d)
    except pbtext.Unsupported:
        return root, devs, True
    return root, devs, False


@pytest.mark.parametrize("path,cls", [(RUNMETA, run_metadata_pb2.RunMetadata),
                                      (STREAMS, step_stats_pb2.StepStats)])
@pytest.mark.parametrize("size", [1, 7, 4099, 1 << 20])
def test_seeds_in_chunks_parse_as_the_whole_text(path, cls, size):
    text = path.read_text()
    want = outcome(text, cls)
    assert not want[2] and len(want[1]) == (2 if cls is run_metadata_pb2.RunMetadata else 7)
    assert outcome(chunked(text, size), cls) == want


def test_pieces_end_after_a_brace_and_rebuild_the_text():
    text = small_text()
    for size in SIZES:
        parts = list(pbtext.pieces(chunked(text, size)))
        joined = "".join(parts)  # less blanks dropped before items
        assert joined.split() == text.split() and joined.replace(" ", "") == text.replace(" ", "")
        assert all(p.rstrip(" \t\r")[-2:] in ("{\n", "}\n") for p in parts[:-1] if p)
    # with 1-char chunks there is a piece for every brace-ended line
    assert len([p for p in pbtext.pieces(chunked(text, 1)) if p]) >= text.count("{\n") + text.count("}\n")


def test_blank_runs_are_not_held():
    """Blanks before an item are dropped from the carry (a gzip bomb of spaces stays
    small); a carry over max_carry gives up (text_format takes over)."""
    text = "dev_stats {\n" + " " * 10_000 + "device: \"/job:a\"\n}\n"
    assert outcome(chunked(text, 100), step_stats_pb2.StepStats) == outcome(text, step_stats_pb2.StepStats)
    assert "".join(pbtext.pieces(chunked(" " * 5000 + "x", 10), max_carry=50)) == "x"
    long_line = "dev_stats {\n  device: \"" + "x" * 5000 + "\"\n}\n"
    assert outcome(pbtext.pieces(chunked(long_line, 10), max_carry=6000), step_stats_pb2.StepStats)[1]
    with pytest.raises(pbtext.Unsupported):
        list(pbtext.pieces(chunked(long_line, 10), max_carry=1000))


@pytest.mark.parametrize("kind", ["rewrite", "bad"])
def test_rewrites_and_bad_inputs_in_chunks(kind):
    """Outside the subset or bad: the same elements, then Unsupported at the same place."""
    edits = REWRITES if kind == "rewrite" else BAD
    base = small_text()
    for name, edit in sorted(edits.items()):
        text = edit(base)
        want = outcome(text, step_stats_pb2.StepStats)
        for size in SIZES:
            assert outcome(chunked(text, size), step_stats_pb2.StepStats) == want, (name, size)


def test_newline_inside_items_at_every_cut():
    """`name\\n{` and `name:\\n{` (items across lines) and comments, cut at every offset."""
    text = ('# head {\ndev_stats\n{\n  device: "/job:a" # c }\n  node_stats:\n\n  {\n    node_name: "n{"\n'
            '    all_start_micros: 12\n  }\n  thread_names\n  { key: 3 value: "t}" }\n}\n'
            'dev_stats {\n  device: "/device:GPU:0/stream:1" }\n')
    want = outcome(text, step_stats_pb2.StepStats)
    assert not want[2] and len(want[1]) == 2 and want[1][0].node_stats[0].all_start_micros == 12
    msg = step_stats_pb2.StepStats()
    text_format.Parse(text, msg)
    assert list(msg.dev_stats) == want[1]
    for size in range(1, len(text) + 1):
        assert outcome(chunked(text, size), step_stats_pb2.StepStats) == want, size
    for cut in range(len(text) + 1):  # two chunks, cut anywhere
        assert outcome(iter([text[:cut], text[cut:]]), step_stats_pb2.StepStats) == want, cut


def test_random_edits_in_chunks():
    rng = random.Random(13)
    base = small_text()
    alphabet = ' \n\t{}:"#\\<>[],;x0123456789-._'
    for _ in range(150):
        text = base
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(text))
            op = rng.randrange(3)
            if op == 0:
                text = text[:i] + text[i + rng.randint(1, 20):]
            elif op == 1:
                text = text[:i] + rng.choice(alphabet) * rng.randint(1, 3) + text[i:]
            else:
                j = rng.randrange(len(text))
                text = text[:i] + text[j:j + rng.randint(1, 40)] + text[i:]
        want = outcome(text, step_stats_pb2.StepStats)
        size = rng.choice(SIZES)
        assert outcome(chunked(text, size), step_stats_pb2.StepStats) == want, size
