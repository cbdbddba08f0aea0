"""Benchmarks, run with ``python -m bench`` (``make bench``), never by ``make test``."""
