"""The object-storage engine: ledgers whose entries live in an S3-compatible
bucket instead of this machine's files (DESIGN.md "Processes")."""
