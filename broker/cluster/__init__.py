"""Cluster mode: broker processes sharing an etcd metadata store, namespace
bundles with one leased owner each, LOOKUP redirects and fenced ledgers."""
