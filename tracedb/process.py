"""Whether this process is tracedb's own: the `tracedb` command (`cli.main`) or one of
its ingest workers (`workers._worker_init`). Only there may tracedb change what belongs to
the whole process: its reads pause and freeze the GC (`formats.jsonstream.gc_paused`,
`gc_frozen`). In a user's process (a notebook calling `tracedb.Warehouse`) a library call
leaves the process as it found it (tests/test_process_state.py).

Imports nothing: the CLI marks itself before it imports the readers (`workers.ForkPoint`
forks only a process that has not imported numpy or started a thread).
"""

OWN = False


def own() -> None:
    """Mark this process as tracedb's own (the CLI's entry point and the ingest workers only)."""
    global OWN
    OWN = True
