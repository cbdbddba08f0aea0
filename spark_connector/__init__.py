"""PySpark connector: `.format("magnetar")` reads and writes topics through
magnetar.client (Spark 4's Python Data Source API; `pip install magnetar[spark]`).

    from magnetar import spark_connector
    spark_connector.register(spark)
    df.write.format("magnetar").option("service_url", url).option("topic", t).save()
"""

from __future__ import annotations

from typing import Any


def register(spark: Any) -> None:
    """Make `.format("magnetar")` available in this Spark session."""
    from magnetar.spark_connector.source import MagnetarDataSource

    spark.dataSource.register(MagnetarDataSource)


__all__ = ["register"]
