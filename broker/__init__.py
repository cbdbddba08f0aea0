"""The Magnetar broker daemon.

Packages, top to bottom (imports point down; tests/unit/test_layering.py
checks there is no cycle, typing-only imports included, and that nothing
above topics/ names a concrete topic, subscription, ledger or cursor class):

- server.py, web.py, storage_setup.py, __main__.py: process lifecycle,
  listeners, HTTP (metrics, health, the admin API), embedded storage.
- admin/: the admin REST API; cluster/: cluster mode on etcd (membership,
  bundle ownership, policy watches).
- observability/: Prometheus metrics, topic metrics at scrape time, the
  periodic stats update, counters, logging set-up.
- connection/: ServerCnx, one per connection (codec, keepalive,
  backpressure), and its command groups (producers, consumers, lookups,
  schemas, topic lists), written against context.CommandContext; limits.
- service/: BrokerService (the topic registry, partitioned metadata),
  resources (tenants, namespaces, policies as metadata), lookup (what LOOKUP
  answers and the ownership seam a cluster plugs into), topic lists and
  their watchers.
- policies/: the policy resolver (topic, else namespace, else broker) and
  the policies it serves: rates, backlog quotas, retention and TTL.
- topics/: base.py (the Topic and Subscription interfaces everything above
  is typed against), loader.py, persistent.py, non_persistent.py,
  subscription.py, consumer.py and producer.py (the endpoints: permits,
  pending acks, receipts), producers.py (access modes), entries.py.
- dispatchers/: factory.py builds one dispatcher per delivery pattern
  (single active, shared, Key_Shared over selectors.py), persistent and
  non-persistent, each complete when built; failover.py is Failover's
  election for both kinds of topic.
- features/: deduplication, key-window deduplication, delayed delivery.
- schemas/, compaction/, auth/: the schema registry, topic compaction,
  authentication and authorization.
- storage/: ManagedLedger, ManagedCursor and the metadata store; api.py is
  the seam the rest of the broker codes against.
- commands.py (every frame the broker sends), endpoint.py (ClientConnection),
  errors.py, config.py: the leaves.
"""
