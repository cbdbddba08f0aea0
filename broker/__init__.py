"""The Magnetar broker daemon.

Floors, top to bottom: a module imports only floors below its own (the
FLOORS table of tests/unit/test_layering.py, which checks it, typing-only
imports, imports in functions and import_module strings included; and that
nothing above topics/ names a concrete topic, subscription, ledger or cursor
class):

- __main__.py: `magnetar-broker`; server.py: process lifecycle, listeners.
- admin/: the admin REST API (cluster.py: cluster mode's routes, loaded in
  cluster mode only); web.py: HTTP (metrics, health).
- cluster/: cluster mode on etcd (membership, bundle ownership, policy
  watches); connection/: ServerCnx, one per connection (codec, keepalive,
  backpressure), and its command groups (producers, consumers, lookups,
  schemas, topic lists), written against context.CommandContext; limits.
- service/: BrokerService (the topic registry, partitioned metadata), lookup
  (what LOOKUP answers and the ownership seam a cluster plugs into), topic
  lists and their watchers, the schema registry, policies applied to loaded
  topics (apply.py), the expiry sweep (retention, TTL; inactivity.py:
  inactive topics and subscriptions).
- observability/: Prometheus metrics, topic metrics at scrape time, the
  periodic stats update, logging set-up.
- topics/: base.py (the Topic and Subscription interfaces everything above
  is typed against), loader.py, persistent.py, non_persistent.py,
  persistent_subscription.py, publish_path.py (the broker-side Producer:
  SEND, append, receipt), topic_producers.py (access modes, publish limits).
- dispatchers/: factory.py builds one dispatcher per delivery pattern
  (single active, shared, Key_Shared over selectors.py), persistent and
  non-persistent, each complete when built; failover.py is Failover's
  election; consumer.py is the broker-side consumer (permits, pending acks);
  entries.py reads stored entries' metadata.
- policies/: the policy catalog, the resolver (topic, else namespace, else
  broker), rates, backlog quotas, the inactive-topic policy.
- auth/, compaction/, features/, schemas/: authentication and
  authorization; topic compaction; deduplication, key-window deduplication,
  delayed delivery; schema values and compatibility rules.
- commands.py (every frame the broker sends), resources.py (tenants,
  namespaces, policies as metadata), storage_setup.py (embedded storage).
- storage/: ManagedLedger, ManagedCursor and the metadata store; api.py is
  the seam the rest of the broker codes against. config.py, errors.py,
  endpoint.py (ClientConnection), eager.py, counters.py, log_throttle.py:
  the leaves.
"""
