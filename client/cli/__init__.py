"""The `magnetar` console script (Pulsar's pulsar-admin, shaped alike).

It lives under client/ because the top-level folders are fixed and it is a
client: it talks to a broker only over HTTP (httpx) and never imports the
broker package. Built on click.
"""
