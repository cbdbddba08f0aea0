"""One frozen broker configuration, loaded once from a TOML file, the
environment (`MAGNETAR_<KEY>`) and the command line, in increasing order of
precedence, and validated once with errors that name the key and its source.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Literal, get_args

from magnetar.proto.frames import DEFAULT_MAX_MESSAGE_SIZE

ENV_PREFIX = "MAGNETAR_"

LogFormat = Literal["console", "json"]
LogLevel = Literal["debug", "info", "warning", "error"]
SyncPolicy = Literal["fsync", "interval", "none"]
StorageKind = Literal["files", "object"]
TopicType = Literal["non-partitioned", "partitioned"]
TlsVersion = Literal["tlsv1.2", "tlsv1.3"]


class ConfigError(ValueError):
    """A configuration value is missing, malformed or out of range."""


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    """Every broker setting; field names are the keys (TOML, env and CLI alike)."""

    data_dir: Path = Path("./data")
    bind: str = "127.0.0.1"
    port: int = 6650
    http_port: int = 8080
    # Host that LOOKUP answers with; empty means the bind address (or
    # 127.0.0.1 when binding all interfaces).
    advertised_address: str = ""
    log_format: LogFormat = "console"
    log_level: LogLevel = "info"
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
    # Publishes awaiting their receipt on one connection before it stops reading.
    max_pending_publish_per_connection: int = 1000
    # ... and above this many bytes of them (a few large messages are enough).
    max_pending_publish_bytes_per_connection: int = 64 * 1024 * 1024
    keepalive_interval_seconds: float = 30.0
    allow_auto_topic_creation: bool = True
    # What automatic creation makes (Pulsar's allowAutoTopicCreationType).
    allow_auto_topic_creation_type: TopicType = "non-partitioned"
    default_num_partitions: int = 1
    allow_auto_subscription_creation: bool = True
    # Deduplication (SEMANTICS 7): the broker default; namespace and topic
    # policies override it. Snapshot every N entries; forget producers idle
    # (and disconnected) this long.
    broker_deduplication_enabled: bool = False
    dedup_snapshot_interval_entries: int = 1000
    # Also snapshot this many seconds after the last one when something
    # changed (0: by entries only); the deduplicationSnapshotInterval policy
    # overrides it (Pulsar's brokerDeduplicationSnapshotIntervalSeconds).
    dedup_snapshot_interval_seconds: int = 120
    dedup_producer_inactivity_seconds: float = 6 * 3600.0
    cluster_name: str = "standalone"
    # Replicated subscriptions (issue 45.4), Pulsar's settings: how often a
    # topic with replicators and a replicated subscription starts a snapshot
    # of the positions of every cluster, how long one may take to complete,
    # and how many completed ones a topic keeps.
    replicated_subscriptions_snapshot_frequency_millis: int = 1000
    replicated_subscriptions_snapshot_timeout_seconds: int = 30
    replicated_subscriptions_snapshot_max_cached_per_subscription: int = 10
    # Cluster mode (`magnetar-broker cluster`): the shared metadata store,
    # etcd://host:port; empty = standalone with the embedded store.
    metadata_url: str = ""
    # The broker's etcd lease: a crashed broker's bundles move after this.
    cluster_lease_seconds: int = 10
    # Namespace bundles (hash ranges of topic names), as Pulsar's
    # defaultNumberOfNamespaceBundles.
    default_namespace_bundles: int = 4
    cluster_load_report_interval_seconds: float = 5.0
    # How often message TTL expires messages and time-based retention trims
    # (Pulsar's messageExpiryCheckIntervalInMinutes, 5).
    message_expiry_check_interval_seconds: float = 300.0
    # How often backlog quotas are checked against connected producers and
    # consumer_backlog_eviction runs (Pulsar's backlogQuotaCheckIntervalInSeconds).
    backlog_quota_check_interval_seconds: float = 60.0
    # Deleting topics left without producers and consumers (inactiveTopicPolicies
    # where no namespace or topic sets them), checked by the expiry sweep above.
    # Off here although Pulsar's brokerDeleteInactiveTopicsEnabled is on: with it
    # on, a topic a client merely paused on, or a test's topic, vanishes after a
    # minute; deleting data should be asked for. Mode and seconds as Pulsar's.
    broker_delete_inactive_topics_enabled: bool = False
    broker_delete_inactive_topics_mode: str = "delete_when_no_subscriptions"
    broker_delete_inactive_topics_max_inactive_duration_seconds: int = 60
    # How often topic, subscription and consumer rates (msg/s, bytes/s) are
    # computed from their counters, for /metrics and the admin stats (Pulsar's
    # statsUpdateFrequencyInSecs, 60 there). 5 s keeps the rates fresh for a
    # Prometheus scraping every 10-15 s at a cost of one walk over the loaded
    # topics; raise it for brokers with very many topics.
    stats_update_frequency_seconds: float = 5.0
    # Export topic and subscription series (labels topic, subscription); off,
    # topic series are summed per namespace (Pulsar's
    # exposeTopicLevelMetricsInPrometheus).
    expose_topic_level_metrics_in_prometheus: bool = True
    # Named listeners, "name:pulsar://host:port" comma-separated (Pulsar's
    # advertisedListeners); LOOKUP with a listener name answers its URL.
    advertised_listeners: str = ""
    # Entries read from the cursor for one dispatch round (SEM-2.5).
    dispatcher_max_read_batch_size: int = 100
    # Key_Shared AUTO_SPLIT consumers share the hash space by consistent
    # hashing instead of splitting ranges (SEM-4.4.2; Pulsar's
    # subscriptionKeySharedUseConsistentHashing).
    subscription_key_shared_use_consistent_hashing: bool = False
    # Failover picks a partition's active consumer on the hash ring too, as it
    # does for a non-partitioned topic (SEM-4.2; Pulsar's
    # activeConsumerFailoverConsistentHashing).
    active_consumer_failover_consistent_hashing: bool = False
    # A producer without a schema is refused on a topic that has one
    # (Pulsar's isSchemaValidationEnforced; a namespace's
    # schema_validation_enforced policy turns it on too).
    is_schema_validation_enforced: bool = False
    # Above this many bytes queued on a socket, dispatch to it pauses.
    connection_write_high_water_mark: int = 1024 * 1024
    sync_policy: SyncPolicy = "fsync"
    # The journal's fdatasync through io_uring, without the I/O thread's hop
    # (storage/uring.py); where the kernel refuses io_uring the thread syncs.
    journal_io_uring: bool = True
    # Where ledgers keep their entries: "files" (the journal and ledger files
    # in data_dir, the fast default) or "object" (an S3-compatible bucket,
    # README "Object storage"; credentials from the standard AWS_* variables).
    storage: StorageKind = "files"
    # s3://bucket/prefix; the endpoint for anything but AWS itself (MinIO,
    # SeaweedFS, Ceph RGW: http://host:port); the region when it matters.
    object_store_url: str = ""
    object_store_endpoint: str = ""
    object_store_region: str = ""
    # A round of appends (one object) closes at this many bytes; this many
    # rounds are written at once.
    object_store_max_round_bytes: int = 8 * 1024 * 1024
    object_store_max_rounds_in_flight: int = 4
    # Rounds start at most this often (each PUT is billed on a cloud store;
    # also the most a send waits for its round to start).
    object_store_round_interval_ms: float = 5.0
    # The collector deletes round objects no extent names, this often, once
    # older than the grace (a round must commit within half of it).
    object_store_collect_interval_s: float = 300.0
    object_store_collect_grace_s: float = 600.0
    # A ledger file rolls over to a new one past this size; retention and
    # trimming delete whole ledgers, so smaller files free space sooner
    # (Pulsar's managedLedgerMaxSizePerLedgerMbytes, here in bytes).
    managed_ledger_max_segment_size: int = 64 * 1024 * 1024
    # ... and at this many entries (Pulsar's managedLedgerMaxEntriesPerLedger,
    # 50,000 there): the index of the ledger being written is in memory
    # (16 bytes an entry), a sealed one's is read from its file, so this
    # bounds a written topic's index memory (160 KiB).
    managed_ledger_max_entries_per_ledger: int = 10_000
    # The entry count rolls a ledger over only once it is this old (Pulsar's
    # managedLedgerMinLedgerRolloverTimeMinutes): what a topic without a
    # subscription was sent stays readable from the earliest position that long.
    managed_ledger_min_ledger_rollover_time_minutes: int = 10
    # The entry cache that serves tailing reads: a budget for all topics, in
    # bytes of memory (entry data plus each entry's objects; Pulsar's
    # managedLedgerCacheSizeMB), and the age after which a cached entry
    # leaves (Pulsar's managedLedgerCacheEvictionTimeThresholdMillis, 1 s).
    # Entries every consumer of a topic has read leave at once.
    entry_cache_size: int = 128 * 1024 * 1024
    entry_cache_eviction_threshold_seconds: float = 1.0
    shutdown_timeout_seconds: float = 10.0
    # Limits (0: none), as Pulsar's maxConnections / maxConnectionsPerIp /
    # maxProducersPerTopic / maxConsumersPerTopic / maxSubscriptionsPerTopic;
    # exceeding one is an error to that client only.
    max_connections: int = 0
    max_connections_per_ip: int = 0
    max_producers_per_topic: int = 0
    max_consumers_per_topic: int = 0
    max_subscriptions_per_topic: int = 0
    # Shared and Key_Shared dispatch stops for a consumer (a subscription)
    # with this many messages unacked, until acks bring it to half; Pulsar's
    # maxUnackedMessagesPerConsumer / PerSubscription and their defaults
    # (0: none). Namespace and topic policies override them.
    max_unacked_messages_per_consumer: int = 50_000
    max_unacked_messages_per_subscription: int = 200_000
    # TLS (SECURITY.md): pulsar+ssl:// on tls_port and HTTPS on
    # tls_http_port, with these PEM files; a client certificate is verified
    # against the CA when presented, and required with
    # tls_require_trusted_client_cert. TLS 1.2 at least.
    tls_enabled: bool = False
    tls_port: int = 6651
    tls_http_port: int = 8443
    tls_cert_file: str = ""
    tls_key_file: str = ""
    tls_trust_certs_file: str = ""
    tls_require_trusted_client_cert: bool = False
    tls_min_version: TlsVersion = "tlsv1.2"
    tls_ciphers: str = ""  # OpenSSL cipher list; empty: Python's secure default
    # Authentication on CONNECT and HTTP: providers among token, basic, tls.
    # A client naming no method or one not enabled gets anonymous_user_role,
    # if set, else it is refused.
    authentication_enabled: bool = False
    authentication_providers: str = "token,basic,tls"
    token_secret_key: str = ""  # file with the HS256 secret (raw or base64)
    token_public_key: str = ""  # PEM file: RS256 / ES256 tokens
    basic_auth_htpasswd: str = ""  # htpasswd file (bcrypt or apr1-MD5)
    anonymous_user_role: str = ""
    # Authorization: superusers may do anything; tenant admins administer
    # their tenant; namespace permissions grant produce / consume.
    authorization_enabled: bool = False
    superuser_roles: str = ""

    def auth_providers(self) -> list[str]:
        return [p.strip() for p in self.authentication_providers.split(",") if p.strip()]

    def superusers(self) -> set[str]:
        return {r.strip() for r in self.superuser_roles.split(",") if r.strip()}

    @property
    def advertised_host(self) -> str:
        if self.advertised_address:
            return self.advertised_address
        if self.bind in ("", "0.0.0.0", "::"):
            return "127.0.0.1"
        return self.bind

    def listeners(self) -> dict[str, str]:
        """advertised_listeners as name -> service URL."""
        found: dict[str, str] = {}
        for item in filter(None, (part.strip() for part in self.advertised_listeners.split(","))):
            name, sep, url = item.partition(":")
            if not sep or not name or "://" not in url:
                raise ConfigError(f"advertised_listeners: {item!r} is not name:pulsar://host:port")
            found[name] = url
        return found

    def replace(self, **changes: Any) -> BrokerConfig:
        """A validated copy with some keys changed (tests use it for ports)."""
        return _validated(dataclasses.replace(self, **changes))


_FIELDS = {f.name: f for f in fields(BrokerConfig)}
_LIMITS = [name for name in _FIELDS if name.startswith("max_") and name.endswith(("_ip", "_topic"))]
_LIMITS.append("max_connections")
_LITERALS: dict[str, tuple[str, ...]] = {
    "log_format": get_args(LogFormat),
    "log_level": get_args(LogLevel),
    "sync_policy": get_args(SyncPolicy),
    "storage": get_args(StorageKind),
    "allow_auto_topic_creation_type": get_args(TopicType),
    "tls_min_version": get_args(TlsVersion),
}


def _field_type(name: str) -> type:
    default = _FIELDS[name].default
    return type(default)


def _coerce(name: str, value: object, source: str) -> object:
    kind = _field_type(name)
    where = f"{name} (from {source})"
    if name in _LITERALS:
        if not isinstance(value, str) or value.lower() not in _LITERALS[name]:
            allowed = ", ".join(_LITERALS[name])
            raise ConfigError(f"{where}: {value!r} is not one of {allowed}")
        return value.lower()
    if kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("1", "true", "yes", "on"):
            return True
        if isinstance(value, str) and value.lower() in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{where}: {value!r} is not a boolean (true/false)")
    if kind is int:
        if isinstance(value, bool):
            raise ConfigError(f"{where}: {value!r} is not an integer")
        if isinstance(value, int):
            return value
        if isinstance(value, str):
            try:
                return int(value.strip().replace("_", ""))
            except ValueError:
                pass
        raise ConfigError(f"{where}: {value!r} is not an integer")
    if kind is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
        raise ConfigError(f"{where}: {value!r} is not a number")
    if issubclass(kind, Path):
        if isinstance(value, str | Path) and str(value):
            return Path(value)
        raise ConfigError(f"{where}: {value!r} is not a path")
    if isinstance(value, str):
        return value
    raise ConfigError(f"{where}: {value!r} is not a string")


def _validated(config: BrokerConfig) -> BrokerConfig:
    def need(ok: bool, key: str, why: str) -> None:
        if not ok:
            raise ConfigError(f"{key} = {getattr(config, key)!r}: {why}")

    for key in ("port", "http_port", "tls_port", "tls_http_port"):
        need(0 <= getattr(config, key) <= 65535, key, "must be a TCP port in 0..65535")
    need(bool(config.bind.strip()), "bind", "must not be empty")
    need(
        1024 <= config.max_message_size <= 1024 * 1024 * 1024,
        "max_message_size",
        "must be between 1 KiB and 1 GiB",
    )
    need(
        config.max_pending_publish_per_connection >= 1,
        "max_pending_publish_per_connection",
        "must be at least 1",
    )
    need(
        config.max_pending_publish_bytes_per_connection >= 1,
        "max_pending_publish_bytes_per_connection",
        "must be at least 1",
    )
    need(config.keepalive_interval_seconds > 0, "keepalive_interval_seconds", "must be > 0")
    need(
        config.message_expiry_check_interval_seconds > 0,
        "message_expiry_check_interval_seconds",
        "must be > 0",
    )
    need(
        config.stats_update_frequency_seconds > 0,
        "stats_update_frequency_seconds",
        "must be > 0",
    )
    need(
        config.dispatcher_max_read_batch_size >= 1,
        "dispatcher_max_read_batch_size",
        "must be at least 1",
    )
    need(
        config.connection_write_high_water_mark >= 1024,
        "connection_write_high_water_mark",
        "must be at least 1024 bytes",
    )
    need(
        config.backlog_quota_check_interval_seconds > 0,
        "backlog_quota_check_interval_seconds",
        "must be > 0",
    )
    need(
        config.broker_delete_inactive_topics_mode
        in ("delete_when_no_subscriptions", "delete_when_subscriptions_caught_up"),
        "broker_delete_inactive_topics_mode",
        "must be delete_when_no_subscriptions or delete_when_subscriptions_caught_up",
    )
    need(
        config.broker_delete_inactive_topics_max_inactive_duration_seconds >= 0,
        "broker_delete_inactive_topics_max_inactive_duration_seconds",
        "must be >= 0",
    )
    need(config.shutdown_timeout_seconds > 0, "shutdown_timeout_seconds", "must be > 0")
    need(
        config.managed_ledger_max_segment_size >= 1024,
        "managed_ledger_max_segment_size",
        "must be >= 1024",
    )
    need(
        config.managed_ledger_max_entries_per_ledger >= 1,
        "managed_ledger_max_entries_per_ledger",
        "must be at least 1",
    )
    need(
        config.managed_ledger_min_ledger_rollover_time_minutes >= 0,
        "managed_ledger_min_ledger_rollover_time_minutes",
        "must be >= 0",
    )
    need(config.entry_cache_size >= 0, "entry_cache_size", "must be >= 0 (0: no cache)")
    need(
        config.storage != "object" or config.object_store_url.startswith("s3://"),
        "object_store_url",
        "must be s3://bucket/prefix when storage is object",
    )
    need(
        not config.object_store_endpoint
        or config.object_store_endpoint.startswith(("http://", "https://")),
        "object_store_endpoint",
        "must be an http:// or https:// URL",
    )
    need(
        config.object_store_max_round_bytes >= 1024,
        "object_store_max_round_bytes",
        "must be >= 1024",
    )
    need(
        config.object_store_round_interval_ms >= 0,
        "object_store_round_interval_ms",
        "must be >= 0",
    )
    need(
        config.object_store_collect_interval_s >= 0,
        "object_store_collect_interval_s",
        "must be >= 0 (0: no collection)",
    )
    need(
        config.object_store_collect_grace_s >= 1,
        "object_store_collect_grace_s",
        "must be >= 1 (a round commits within half of it)",
    )
    need(
        config.object_store_max_rounds_in_flight >= 1,
        "object_store_max_rounds_in_flight",
        "must be at least 1",
    )
    need(
        config.entry_cache_eviction_threshold_seconds > 0,
        "entry_cache_eviction_threshold_seconds",
        "must be > 0",
    )
    need(config.default_num_partitions >= 1, "default_num_partitions", "must be at least 1")
    need(
        config.dedup_snapshot_interval_entries >= 1,
        "dedup_snapshot_interval_entries",
        "must be at least 1",
    )
    need(
        config.dedup_snapshot_interval_seconds >= 0,
        "dedup_snapshot_interval_seconds",
        "must be >= 0 (0: snapshots by entry count only)",
    )
    need(
        config.dedup_producer_inactivity_seconds > 0,
        "dedup_producer_inactivity_seconds",
        "must be > 0",
    )
    need(bool(config.cluster_name.strip()), "cluster_name", "must not be empty")
    need(
        config.replicated_subscriptions_snapshot_frequency_millis >= 1,
        "replicated_subscriptions_snapshot_frequency_millis",
        "must be at least 1",
    )
    need(
        config.replicated_subscriptions_snapshot_timeout_seconds >= 1,
        "replicated_subscriptions_snapshot_timeout_seconds",
        "must be at least 1",
    )
    need(
        config.replicated_subscriptions_snapshot_max_cached_per_subscription >= 1,
        "replicated_subscriptions_snapshot_max_cached_per_subscription",
        "must be at least 1",
    )
    need(config.cluster_lease_seconds >= 2, "cluster_lease_seconds", "must be at least 2")
    need(
        1 <= config.default_namespace_bundles <= 1024,
        "default_namespace_bundles",
        "must be between 1 and 1024",
    )
    need(
        config.cluster_load_report_interval_seconds > 0,
        "cluster_load_report_interval_seconds",
        "must be > 0",
    )
    need(
        not config.metadata_url or config.metadata_url.startswith("etcd://"),
        "metadata_url",
        "must be etcd://host:port",
    )
    for key in _LIMITS:
        need(getattr(config, key) >= 0, key, "must be >= 0 (0: no limit)")
    config.listeners()  # raises ConfigError naming the bad entry
    if config.tls_enabled:
        need(bool(config.tls_cert_file), "tls_cert_file", "is required with tls_enabled")
        need(bool(config.tls_key_file), "tls_key_file", "is required with tls_enabled")
    unknown = set(config.auth_providers()) - {"token", "basic", "tls"}
    need(not unknown, "authentication_providers", f"unknown provider(s) {sorted(unknown)}")
    return config


def load_config(
    *,
    config_file: Path | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, object] | None = None,
    warnings: list[str] | None = None,
) -> BrokerConfig:
    """Merge file < environment < overrides (CLI) and validate once.

    Unknown `MAGNETAR_*` environment variables are not errors (other tools
    may share the prefix); each is reported in `warnings` when given.
    """
    values: dict[str, object] = {}
    if config_file is not None:
        try:
            with config_file.open("rb") as fh:
                raw = tomllib.load(fh)
        except OSError as exc:
            raise ConfigError(f"cannot read config file {config_file}: {exc}") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {config_file} is not valid TOML: {exc}") from exc
        for key, value in raw.items():
            name = key.replace("-", "_")
            if name not in _FIELDS:
                raise ConfigError(f"unknown key {key!r} in {config_file}")
            values[name] = _coerce(name, value, str(config_file))
    environ = os.environ if env is None else env
    for env_key, value in environ.items():
        if not env_key.startswith(ENV_PREFIX):
            continue
        name = env_key[len(ENV_PREFIX) :].lower()
        if name not in _FIELDS:
            if warnings is not None:
                warnings.append(f"ignoring {env_key}: not a broker setting")
            continue
        values[name] = _coerce(name, value, env_key)
    for name, value in (overrides or {}).items():
        if value is None:
            continue
        if name not in _FIELDS:
            raise ConfigError(f"unknown setting {name!r}")
        values[name] = _coerce(name, value, "command line")
    return _validated(BrokerConfig(**values))  # type: ignore[arg-type]
