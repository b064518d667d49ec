"""tracedb's version: one place that every layer may read (the CLI's --version, the lake's commit notes)."""

__version__ = "0.1.0"
