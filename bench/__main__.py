"""``python -m bench [NAME ...] [-- ARGS]``: run the named benchmarks.

The default is all but the long ones (soak, backlog, objstore, spark-cluster)
and `wire`, which needs root to watch loopback.

A short dispatcher: each benchmark is a module with ``main(argv) -> int``.
"""

from __future__ import annotations

import importlib
import sys

BENCHMARKS = {
    "storage": "bench.storage.run",
    "compare": "bench.compare",
    "producer": "bench.producer",
    "delayed": "bench.delayed",
    "keywindow": "bench.keywindow",
    "dedup": "bench.dedup",
    "spark": "bench.spark",
    "spark-cluster": "bench.spark_cluster",
    "key_shared": "bench.key_shared",
    "consumer": "bench.consumer",
    "compaction": "bench.compaction",
    "cluster": "bench.cluster",
    "scale": "bench.scale",
    "prefetch": "bench.prefetch",
    "floor": "bench.floor",
    "shapes": "bench.shapes",
    "soak": "bench.soak",
    "backlog": "bench.backlog",
    "objstore": "bench.objstore",
    "georep": "bench.georep",
    "wire": "bench.wire",
}
# Runs of many minutes: only when named.
ON_REQUEST = {"soak", "backlog", "objstore", "spark-cluster", "wire"}


def main(argv: list[str]) -> int:
    names = [a for a in argv if a in BENCHMARKS] or [b for b in BENCHMARKS if b not in ON_REQUEST]
    rest = [a for a in argv if a not in BENCHMARKS and a != "--"]
    status = 0
    for name in names:
        module = importlib.import_module(BENCHMARKS[name])
        status |= int(module.main(rest))
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
