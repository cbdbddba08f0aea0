"""Storage benchmark: append and read throughput of the managed ledger."""
