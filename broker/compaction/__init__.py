"""Topic compaction: the latest message per key up to a horizon, kept in a
compacted view beside the topic's ledger, read by read_compacted consumers."""
