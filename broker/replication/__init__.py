"""Geo-replication (issue 45): replicators that copy persistent topics to
remote clusters, and the service that starts and stops them."""
