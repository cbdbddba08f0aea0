"""Schemas as values: the schema data and versions (types.py) and the
compatibility strategies that decide whether a new schema may join
(compatibility.py). The registry that stores them is service/schema_registry.py."""
