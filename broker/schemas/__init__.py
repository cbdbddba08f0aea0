"""The schema registry: per-topic schema versions in the metadata store and
the compatibility strategies that decide whether a new schema may join."""
