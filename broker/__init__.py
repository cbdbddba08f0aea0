"""The Magnetar broker daemon.

Module layers, top to bottom (imports point down; tests/unit/test_layering.py
checks there is no cycle):

- server.py, web.py: process lifecycle, listeners, HTTP (metrics, health).
- topic_metrics.py (the scrape-time collector of topic, subscription and
  broker series) and stats_update.py (the periodic rate update), both over
  the loaded topics.
- cnx.py: ServerCnx, one per connection (codec, keepalive, backpressure); it
  owns cnx_producers.ProducerCommands and cnx_consumers.ConsumerCommands,
  both written against cnx_context.CommandContext.
- service.py: BrokerService, the topic registry, lookup, partitioned metadata.
- topics/: base.py (the Topic and Subscription protocols everything above is
  typed against), loader.py (opens the topic a name denotes), persistent.py.
- subscription.py: cursor + dispatcher; acks, redelivery, reset cursor, stats.
- dispatchers/: factory.new_dispatcher(sub_type, ...) and one dispatcher per
  delivery pattern (single_active, shared, key_shared with selectors.py)
  over base.PersistentDispatcher; failover.py is Failover's election, used by
  persistent and non-persistent topics alike.
- consumer.py, producer.py: the endpoints (permits, pending acks, receipts).
- entries.py: what is read back from stored entries' metadata.
- endpoint.py (ClientConnection), commands.py (every outgoing frame),
  errors.py, config.py, metrics.py, counters.py (the plain counters behind
  rates and metrics): the leaves.
- storage/: ManagedLedger, ManagedCursor, the metadata store.
"""
