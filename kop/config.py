"""Broker configuration: KoP/Pulsar key names, typed values, and loud failure on anything unknown.

Operators coming from Pulsar/KoP keep their key names (kafkaListeners, kafkaTenant,
managedLedgerMaxEntriesPerLedger, ...). A config file is Java-properties style (`key=value`, `#` comments),
like Pulsar's broker.conf/standalone.conf. An unknown key or a value that does not parse stops start-up with
a message naming the key: a typo must never silently fall back to a default. A key this broker once accepted but
never read (REMOVED_KEYS) is ignored with a warning that says why: it never had an effect, so a config that
still names it behaves as before.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


class ConfigError(ValueError):
    """A configuration problem; the message names the key."""


# Pulsar's authentication provider classes this broker implements (kop/security/authn.py), by the method name a
# client's CONNECT (auth_method_name) or an admin request names. Any other class in authenticationProviders stops
# start-up: Pulsar would load it, so silently refusing its clients later would hide the mistake (issue #22).
PROVIDER_BASIC = "org.apache.pulsar.broker.authentication.AuthenticationProviderBasic"
PROVIDER_TLS = "org.apache.pulsar.broker.authentication.AuthenticationProviderTls"
AUTHENTICATION_PROVIDERS: dict[str, str] = {
    "org.apache.pulsar.broker.authentication.AuthenticationProviderToken": "token",
    PROVIDER_BASIC: "basic",
    PROVIDER_TLS: "tls",
}


# Keys earlier versions validated but nothing read (issue #21): ignored with a warning saying what bounds the same
# thing now, instead of the refusal an unknown key gets.
REMOVED_KEYS: dict[str, str] = {
    "requestTimeoutMs": "the broker has no per-request timeout (as Apache Kafka's has none): a Produce is answered "
                        "once stored, a Fetch waits at most its max_wait_ms (capped by fetchMaxWaitCapMs), and "
                        "the client's request.timeout.ms bounds the rest",
    "maxPendingResponseBytes": "a connection stops reading requests while its unsent responses are above the "
                               "socket's write high-water mark, and pipelined Fetches wait while unwritten answers "
                               "hold 4 MiB (kop/kafka/connection.py); maxQueuedRequests and queuedMaxRequestBytes "
                               "bound the requests",
}


def _bool(value: str) -> bool:
    v = value.strip().lower()
    if v in ("true", "yes", "1", "on"):
        return True
    if v in ("false", "no", "0", "off"):
        return False
    raise ValueError(f"expected true or false, got {value!r}")


_LISTENER_RE = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)://(?P<host>\[[^\]]*\]|[^:/]*):(?P<port>\d+)$")


@dataclass(frozen=True, slots=True)
class Listener:
    name: str  # listener name; also the security protocol unless kafkaProtocolMap says otherwise
    host: str
    port: int

    @classmethod
    def parse(cls, text: str) -> Listener:
        m = _LISTENER_RE.match(text.strip())
        if not m:
            raise ValueError(f"expected NAME://host:port, got {text!r}")
        port = int(m["port"])
        if not 0 <= port <= 65535:
            raise ValueError(f"port out of range in {text!r}")
        host = m["host"].strip("[]")
        return cls(m["name"].upper(), host, port)

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


def parse_listeners(text: str) -> tuple[Listener, ...]:
    items = [t for t in (s.strip() for s in text.split(",")) if t]
    if not items:
        raise ValueError("at least one listener is required")
    listeners = tuple(Listener.parse(t) for t in items)
    names = [lst.name for lst in listeners]
    if len(set(names)) != len(names):
        raise ValueError(f"listener names must be unique, got {names}")
    return listeners


def parse_ip_overrides(text: str) -> dict[str, int]:
    """Kafka's max.connections.per.ip.overrides format: `host:count` items, comma separated (the last colon
    splits, so IPv6 addresses work; brackets are optional)."""
    out: dict[str, int] = {}
    for item in (t.strip() for t in text.split(",")):
        if not item:
            continue
        host, sep, count = item.rpartition(":")
        host = host.strip().strip("[]")
        if not sep or not host or not count.strip().isdigit():
            raise ValueError(f"expected host:count, got {item!r}")
        out[host] = int(count)
    return out


def parse_protocol_map(text: str) -> dict[str, str]:
    """kafkaProtocolMap: `NAME:PROTOCOL` pairs, comma separated (KoP; Kafka's listener.security.protocol.map)."""
    out: dict[str, str] = {}
    for item in (t.strip() for t in text.split(",")):
        if not item:
            continue
        name, sep, proto = item.partition(":")
        proto = proto.strip().upper()
        if not sep or not name.strip() or proto not in SECURITY_PROTOCOLS:
            raise ValueError(f"expected NAME:PROTOCOL with a protocol of {', '.join(SECURITY_PROTOCOLS)}, "
                             f"got {item!r}")
        out[name.strip().upper()] = proto
    return out


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
TLS_VERSIONS = ("TLSv1.2", "TLSv1.3")
FSYNC_POLICIES = ("always", "interval", "none")
# Pulsar's SchemaCompatibilityStrategy names (kop/schemas/versions.py applies them)
SCHEMA_COMPATIBILITY_STRATEGIES = ("ALWAYS_INCOMPATIBLE", "ALWAYS_COMPATIBLE", "BACKWARD", "FORWARD", "FULL",
                                   "BACKWARD_TRANSITIVE", "FORWARD_TRANSITIVE", "FULL_TRANSITIVE")


@dataclass(slots=True)
class BrokerConfig:
    # --- listeners and identity
    kafkaListeners: str = "PLAINTEXT://0.0.0.0:9092"
    kafkaAdvertisedListeners: str = ""  # empty: same as kafkaListeners (0.0.0.0 replaced by advertisedAddress)
    # NAME:PROTOCOL pairs (KoP; Kafka's listener.security.protocol.map); a listener named after a protocol
    # needs no entry
    kafkaProtocolMap: str = ""
    advertisedAddress: str = ""  # empty: 127.0.0.1 when listening on a wildcard address
    kafkaBrokerId: int = 1
    # Worker processes of one `kop standalone` node (kop/node/, docs/architecture.md): 1 = one process (the
    # default); N > 1 = N processes, worker i being broker kafkaBrokerId + i, each owning a share of the
    # partitions; 0 = one per CPU core. Embedded storage only.
    numWorkers: int = 1
    clusterName: str = "standalone"
    # --- topics and namespaces
    kafkaTenant: str = "public"
    kafkaNamespace: str = "default"
    kafkaMetadataTenant: str = "public"
    kafkaMetadataNamespace: str = "__kafka"
    # KoP: a SASL/PLAIN token login's username (tenant or tenant/namespace) is where its short topic names,
    # group ids and transactional ids live (kop/topics/scope.py); false: every login uses the defaults above
    kafkaEnableMultiTenantMetadata: bool = True
    allowAutoTopicCreation: bool = True
    # What a Pulsar producer, consumer or lookup auto-creates (Pulsar's setting and default): "non-partitioned", or
    # "partitioned" with defaultNumPartitions. Kafka clients always auto-create partitioned topics (num.partitions).
    allowAutoTopicCreationType: str = "non-partitioned"
    defaultNumPartitions: int = 1
    # --- requests and connections
    maxMessageSize: int = 5 * 1024 * 1024  # broker-wide default of max.message.bytes (KoP's default)
    socketRequestMaxBytes: int = 100 * 1024 * 1024
    maxQueuedRequests: int = 500  # per connection; reading pauses beyond this (back-pressure)
    connectionMaxIdleMs: int = 600000  # -1 disables
    fetchMaxWaitCapMs: int = 30000
    # Fetch answers sent from the ledger files with sendfile (issue 27) where possible: plain TCP, the
    # embedded storage, large batches (with localStoreVerifyChecksums: reads of 4 MiB or more, CRCs checked
    # first). false: always read into the process and written.
    fetchZeroCopy: bool = True
    maxIncrementalFetchSessionCacheSlots: int = 1000  # KIP-227 fetch sessions kept; 0 turns them off
    # --- request memory and connection limits (Kafka's queued.max.request.bytes, max.connections.per.ip,
    # max.connections.per.ip.overrides, max.connections; README "Hostile peers")
    queuedMaxRequestBytes: int = 256 * 1024 * 1024  # broker-wide; -1: unbounded (Kafka's default)
    maxConnectionsPerIp: int = 2147483647
    maxConnectionsPerIpOverrides: str = ""  # host:count,host:count
    maxConnections: int = 2147483647
    # --- managed ledger
    managedLedgerMaxEntriesPerLedger: int = 50000
    managedLedgerMaxSizePerLedgerMbytes: int = 2048
    managedLedgerMinLedgerRolloverTimeMinutes: int = 10
    managedLedgerMaxLedgerRolloverTimeMinutes: int = 240
    # --- embedded storage
    localStoreFsyncPolicy: str = "always"  # always (group commit) | interval | none
    localStoreFsyncIntervalMs: int = 1000
    # Damaged ledger files (issue #12, docs/operability.md): verify each entry's CRC when read, and what to
    # do when the start-up check finds damage: serve-intact (KAFKA_STORAGE_ERROR for the damaged range
    # only) or refuse-start.
    localStoreVerifyChecksums: bool = True
    localStoreDamagedLedgerPolicy: str = "serve-intact"  # serve-intact | refuse-start
    # --- BookKeeper + ZooKeeper storage (docs/bookkeeper.md), Pulsar's key names. storageBackend "" (auto)
    # means bookkeeper when metadataStoreUrl or zookeeperServers is set, else embedded.
    storageBackend: str = ""  # "" | embedded | bookkeeper
    metadataStoreUrl: str = ""  # zk:host:port[,host:port][/chroot]
    zookeeperServers: str = ""  # host:port[,host:port] - Pulsar's older key; metadataStoreUrl wins
    metadataStoreSessionTimeoutMillis: int = 30000
    bookkeeperMetadataServiceUri: str = ""  # "": zk+hierarchical://<the metadata store's servers>/ledgers
    managedLedgerDefaultEnsembleSize: int = 3
    managedLedgerDefaultWriteQuorum: int = 3
    managedLedgerDefaultAckQuorum: int = 2
    # --- several brokers on one ZooKeeper + BookKeeper (kop/cluster; docs/cluster.md): Pulsar's key
    defaultNumberOfNamespaceBundles: int = 4  # hash ranges per namespace; a bundle is the unit of ownership
    loadBalancerEnabled: bool = True  # hand bundles to a joining broker (graceful unload); false: owners keep them
    # --- retention (broker defaults of the per-topic retention.ms / retention.bytes)
    defaultRetentionTimeInMinutes: int = 7 * 24 * 60  # -1: keep forever
    defaultRetentionSizeInMB: int = -1
    retentionCheckIntervalMs: int = 60000
    # --- Pulsar backlog quota (kop/pulsar/backlog_quota.py): how far a Pulsar subscription may fall behind
    backlogQuotaDefaultLimitBytes: int = -1  # -1: no size limit
    backlogQuotaDefaultLimitSecond: int = -1  # -1: no time limit
    backlogQuotaDefaultRetentionPolicy: str = "producer_request_hold"  # or producer_exception, consumer_backlog_eviction
    backlogQuotaCheckEnabled: bool = True
    backlogQuotaCheckIntervalInSeconds: int = 60
    # --- log compaction of topics with cleanup.policy=compact (Kafka's log.cleaner.enable / backoff.ms)
    logCleanerEnabled: bool = True
    logCleanerIntervalMs: int = 15000
    # --- idempotent producers
    producerIdExpirationMs: int = 86400000
    # --- shutdown
    brokerShutdownTimeoutMs: int = 10000
    # --- group coordinator (KoP's names; Kafka's offsets.topic.num.partitions, group.*.ms, offsets.* keys)
    offsetsTopicNumPartitions: int = 50  # partitions of __consumer_offsets, fixed once the topic exists
    groupMinSessionTimeoutMs: int = 6000
    groupMaxSessionTimeoutMs: int = 1800000
    groupInitialRebalanceDelayMs: int = 3000  # a new group waits this long for more members to join
    groupMaxSize: int = 2147483647  # members per group
    # KIP-848 consumer groups (Kafka's group.consumer.* keys): the first assignor is the default one
    groupConsumerAssignors: str = "uniform,range"
    groupConsumerSessionTimeoutMs: int = 45000
    groupConsumerHeartbeatIntervalMs: int = 5000  # must be below groupConsumerSessionTimeoutMs
    groupConsumerMaxSize: int = 2147483647  # members per consumer group
    # online migration of a group with members between the classic and the consumer protocol (Kafka's
    # group.consumer.migration.policy): bidirectional, upgrade, downgrade or disabled
    groupConsumerMigrationPolicy: str = "bidirectional"
    # KIP-1071 streams groups (Kafka's group.streams.* keys; kop/coordinator/streams)
    groupStreamsSessionTimeoutMs: int = 45000
    groupStreamsHeartbeatIntervalMs: int = 5000  # must be below groupStreamsSessionTimeoutMs
    groupStreamsInitialRebalanceDelayMs: int = 3000  # a streams group that was empty waits this long to assign
    groupStreamsNumStandbyReplicas: int = 0  # standby copies of each task, on other processes
    offsetsRetentionMinutes: int = 10080  # offsets of an Empty group expire this long after it emptied
    offsetsRetentionCheckIntervalMs: int = 600000
    offsetMetadataMaxSize: int = 4096  # longest commit metadata string
    # --- transaction coordinator (Kafka's transaction.* / transactional.id.* settings)
    transactionStateLogNumPartitions: int = 50  # partitions of __transaction_state, fixed once it exists
    transactionMaxTimeoutMs: int = 900000  # longest transaction.timeout.ms a producer may ask for
    transactionalIdExpirationMs: int = 604800000  # an idle transactional id is forgotten after this long
    transactionAbortTimedOutTransactionCleanupIntervalMs: int = 10000  # how often timed-out transactions are aborted
    transactionRemoveExpiredTransactionalIdCleanupIntervalMs: int = 3600000  # how often idle ids are expired
    # KIP-890 part 1: the first transactional batch of a transaction on a partition needs the coordinator's word
    transactionPartitionVerificationEnable: bool = True
    # --- protocol handlers (comma separated: kafka, pulsar, or names from the kop.protocol_handlers
    # entry-point group)
    messagingProtocols: str = "kafka,pulsar"
    # --- the pulsar handler (kop/pulsar; docs/pulsar.md): Pulsar's binary protocol on this port, same topics
    brokerServicePort: int = 6650  # 0: an ephemeral port (logged at start-up)
    bindAddress: str = "0.0.0.0"  # Pulsar's key: the address the pulsar listener binds
    brokerServicePortTls: int = -1  # Pulsar's TLS port (pulsar+ssl://, the tls* keys); -1: none, 0: ephemeral
    # Pulsar's named listeners (kop/cluster/listeners.py): `name:pulsar://host:port,...` advertised to clients
    # that name one (listenerName); internalListenerName is answered to those that name none (default: the first)
    advertisedListeners: str = ""
    internalListenerName: str = ""
    brokerDeduplicationEnabled: bool = False  # Pulsar producers: drop resent sequence ids (kop/pulsar/dedup.py)
    # Pulsar's delayed delivery (kop/pulsar/delayed.py): Shared/Key_Shared subscriptions hold a message back until
    # its deliver_at_time; the tick is how early it may go (and how often the tracker wakes)
    delayedDeliveryEnabled: bool = True
    delayedDeliveryTickTimeMillis: int = 1000
    # Pulsar consumers' acks of single messages of a batch entry count (Pulsar's key and default: off = ignored until
    # the whole entry is acknowledged); kept in memory, not in the cursor (kop/pulsar/subscription.py)
    acknowledgmentAtBatchIndexLevelEnabled: bool = False
    # Pulsar's schema compatibility strategy for every topic (kop/schemas/versions.py): ALWAYS_INCOMPATIBLE,
    # ALWAYS_COMPATIBLE, BACKWARD, FORWARD, FULL, BACKWARD_TRANSITIVE, FORWARD_TRANSITIVE or FULL_TRANSITIVE
    schemaCompatibilityStrategy: str = "FULL"
    # --- admin HTTP: /metrics, admin v2 REST, health (kop/admin; docs/operability.md)
    webServicePort: int = 8080  # 0: an ephemeral port (logged at start-up); -1: no admin HTTP server
    webServiceBindAddress: str = "0.0.0.0"
    webServicePortTls: int = -1  # the admin HTTP server over HTTPS (the tls* keys); -1: none, 0: ephemeral
    # Index lookups (getMessageIdByIndex and its reverse) answer 412, as Pulsar does on a broker without
    # broker entry metadata, when false. Entries always carry it (the index is the Kafka offset).
    exposingBrokerEntryMetadataToAdminEnabled: bool = True
    # Pulsar consumers that ask for it (CONNECT feature flag) get broker entry metadata with each MESSAGE:
    # msg.index() = the message's Kafka offset (kop/pulsar/subscription.py). Pulsar's key and default.
    exposingBrokerEntryMetadataToClientEnabled: bool = False
    slowRequestThresholdMs: int = 1000  # one log line per slower request (Fetch: beyond its max_wait); -1: off
    statsUpdateFrequencyInSecs: int = 60  # window of the rates in topic stats
    metricsMaxTopicLabels: int = 1000  # topics beyond this share the topic label "__other__"
    metricsMaxGroupLabels: int = 100  # consumer groups beyond this share the group label "__other__"

    # --- security (docs/security.md, issue #14): TLS with Pulsar's key names, SASL with KoP's
    tlsCertificateFilePath: str = ""  # PEM certificate chain of the broker (SSL and SASL_SSL listeners)
    tlsKeyFilePath: str = ""  # its PKCS#8 PEM key
    tlsTrustCertsFilePath: str = ""  # PEM CA bundle client certificates are checked against
    tlsRequireTrustedClientCertOnConnect: bool = False  # SSL listeners: mTLS required (ssl.client.auth=required)
    tlsProtocols: str = "TLSv1.2,TLSv1.3"
    tlsCiphers: str = ""  # OpenSSL cipher list for TLSv1.2; "" = OpenSSL's default
    sslPrincipalMappingRules: str = "DEFAULT"  # Kafka's ssl.principal.mapping.rules
    authenticationEnabled: bool = False  # SASL listeners refuse to start without it
    # comma list of Pulsar provider classes (AUTHENTICATION_PROVIDERS); ...AuthenticationProviderToken also lets
    # Kafka's PLAIN take token:<jwt>. Another class is a start-up error with authenticationEnabled.
    authenticationProviders: str = ""
    anonymousUserRole: str = ""  # Pulsar port and admin REST: the role of a client that brings no credentials
    basicAuthConf: str = ""  # AuthenticationProviderBasic: htpasswd lines (a path, file:, data:, or base64)
    saslAllowedMechanisms: str = "PLAIN"  # PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER
    saslPlainUsersFile: str = ""  # user=password lines for PLAIN (Kafka's JAAS user_<name>)
    tokenSecretKey: str = ""  # file:..., data:;base64,... or base64 (Pulsar); wins over tokenPublicKey
    tokenPublicKey: str = ""
    tokenPublicAlg: str = "RS256"
    tokenAuthClaim: str = "sub"
    tokenAudienceClaim: str = ""
    tokenAudience: str = ""
    tokenAllowedClockSkewSeconds: int = 0
    saslOauthbearerJwksEndpointUrl: str = ""  # Kafka's sasl.oauthbearer.jwks.endpoint.url (http(s) or file:)
    saslOauthbearerJwksEndpointRefreshMs: int = 3600000
    saslOauthbearerJwksEndpointRetryBackoffMs: int = 100
    saslOauthbearerJwksEndpointRetryBackoffMaxMs: int = 10000
    saslOauthbearerExpectedAudience: str = ""  # comma list
    saslOauthbearerExpectedIssuer: str = ""
    saslOauthbearerClockSkewSeconds: int = 30
    saslOauthbearerSubClaimName: str = "sub"
    saslOauthbearerScopeClaimName: str = "scope"
    connectionsMaxReauthMs: int = 0  # KIP-368 connections.max.reauth.ms; 0 = no re-authentication required
    failedAuthenticationDelayMs: int = 300  # a failed authentication is answered and closed after this
    saslServerMaxReceiveSize: int = 524288  # Kafka's sasl.server.max.receive.size: frame cap before auth
    # Authorization (ACLs) and the admin REST's authentication (docs/security.md)
    authorizationEnabled: bool = False
    superUserRoles: str = ""  # comma list of roles (User: added), or Kafka's super.users form User:a;User:b
    allowEveryoneIfNoAclFound: bool = False  # Kafka's allow.everyone.if.no.acl.found
    adminOpenPaths: str = "/metrics,/health"  # admin HTTP paths served without a token when authenticating

    _derived: dict[str, Any] = field(default_factory=dict, repr=False)
    # The dynamic overlay (not a config key): topic config name -> the default a dynamic broker config sets for
    # it (log.retention.ms for retention.ms, ...), kept by kop/topics/broker_configs.py from the metadata store
    # and read by topic_config.effective before this file's defaults. The rules of the file stay above.
    _dynamic_topic_defaults: dict[str, str] = field(default_factory=dict, repr=False)

    # ------------------------------------------------------------------ loading
    @classmethod
    def keys(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls) if not f.name.startswith("_")]

    @classmethod
    def load(cls, path: str | Path | None = None, overrides: dict[str, str] | None = None) -> BrokerConfig:
        raw: dict[str, str] = {}
        if path is not None:
            raw.update(read_properties(Path(path)))
        raw.update(overrides or {})
        return cls.from_strings(raw)

    @classmethod
    def from_strings(cls, raw: dict[str, str]) -> BrokerConfig:
        fields_by_name = {f.name: f for f in dataclasses.fields(cls) if not f.name.startswith("_")}
        values: dict[str, Any] = {}
        for key, text in raw.items():
            f = fields_by_name.get(key)
            if f is None and key in REMOVED_KEYS:
                log.warning("config key %s is no longer read, ignored: %s", key, REMOVED_KEYS[key])
                continue
            if f is None:
                hint = _closest(key, fields_by_name)
                raise ConfigError(f"unknown config key {key!r}" + (f" (did you mean {hint!r}?)" if hint else ""))
            try:
                values[key] = _convert(f.type, text)
            except ValueError as e:
                raise ConfigError(f"bad value for {key}: {e}") from None
        cfg = cls(**values)
        cfg.validate()
        return cfg

    def _need(self, cond: bool, key: str, msg: str) -> None:
        if not cond:
            raise ConfigError(f"bad value for {key}: {msg} (got {getattr(self, key)!r})")

    def validate(self) -> None:
        """Every key's checks: the listeners and the network side here, storage and the rest below."""
        need = self._need
        try:
            self._derived["listeners"] = parse_listeners(self.kafkaListeners)
        except ValueError as e:
            raise ConfigError(f"bad value for kafkaListeners: {e}") from None
        try:
            adv = parse_listeners(self.kafkaAdvertisedListeners) if self.kafkaAdvertisedListeners else None
        except ValueError as e:
            raise ConfigError(f"bad value for kafkaAdvertisedListeners: {e}") from None
        if adv is not None:
            names = {lst.name for lst in self.listeners}
            for a in adv:
                need(a.name in names, "kafkaAdvertisedListeners", f"listener {a.name} is not in kafkaListeners")
        self._derived["advertised"] = adv
        self._validate_security()
        need(self.kafkaBrokerId >= 0, "kafkaBrokerId", "must be >= 0")
        need(0 <= self.numWorkers <= 256, "numWorkers", "0 (one per core) or 1..256")
        for key in ("kafkaTenant", "kafkaNamespace", "kafkaMetadataTenant", "kafkaMetadataNamespace"):
            need(bool(re.fullmatch(r"[A-Za-z0-9_.\-=:]+", getattr(self, key))), key, "must be a non-empty name")
        need(1 <= self.defaultNumPartitions <= 100000, "defaultNumPartitions", "must be between 1 and 100000")
        need(self.allowAutoTopicCreationType in ("partitioned", "non-partitioned"), "allowAutoTopicCreationType",
             "must be partitioned or non-partitioned")
        need(self.maxMessageSize > 0, "maxMessageSize", "must be > 0")
        need(1024 <= self.socketRequestMaxBytes <= 2**31 - 1, "socketRequestMaxBytes", "must be 1024..2^31-1")
        need(self.maxQueuedRequests >= 1, "maxQueuedRequests", "must be >= 1")
        need(self.maxIncrementalFetchSessionCacheSlots >= 0, "maxIncrementalFetchSessionCacheSlots", "must be >= 0")
        need(self.queuedMaxRequestBytes == -1 or self.queuedMaxRequestBytes >= 1024 * 1024, "queuedMaxRequestBytes",
             "-1 (unbounded) or >= 1 MiB")
        try:
            self._derived["ip_overrides"] = parse_ip_overrides(self.maxConnectionsPerIpOverrides)
        except ValueError as e:
            raise ConfigError(f"bad value for maxConnectionsPerIpOverrides: {e}") from None
        need(self.maxConnectionsPerIp >= 1 or (self.maxConnectionsPerIp == 0 and bool(self.ip_overrides)),
             "maxConnectionsPerIp", ">= 1, or 0 when maxConnectionsPerIpOverrides is set (as in Kafka)")
        need(self.maxConnections >= 0, "maxConnections", "must be >= 0")
        need(self.connectionMaxIdleMs == -1 or self.connectionMaxIdleMs > 0, "connectionMaxIdleMs", "-1 or > 0")
        self._validate_storage_and_services()

    def _validate_security(self) -> None:
        """Listener protocols, TLS files and SASL mechanisms: everything a secured listener needs must be
        there at start-up, and a SASL listener without authenticationEnabled refuses to start (KoP silently
        served such a listener without any mechanism, kop#1569)."""
        need = self._need
        try:
            pmap = parse_protocol_map(self.kafkaProtocolMap)
        except ValueError as e:
            raise ConfigError(f"bad value for kafkaProtocolMap: {e}") from None
        protocols: dict[str, str] = {}
        for lst in self.listeners:
            proto = pmap.get(lst.name, lst.name if lst.name in SECURITY_PROTOCOLS else None)
            if proto is None:
                raise ConfigError(f"bad value for kafkaListeners: listener {lst.name} is not a security protocol "
                                  f"({', '.join(SECURITY_PROTOCOLS)}) and kafkaProtocolMap does not name one for it")
            protocols[lst.name] = proto
        self._derived["protocols"] = protocols
        used = set(protocols.values())
        need(-1 <= self.brokerServicePortTls <= 65535, "brokerServicePortTls", "-1 (off), 0 (ephemeral) or a port")
        need(-1 <= self.webServicePortTls <= 65535, "webServicePortTls", "-1 (off), 0 (ephemeral) or a port")
        if used & {"SSL", "SASL_SSL"} or self.brokerServicePortTls >= 0 or self.webServicePortTls >= 0:
            need(bool(self.tlsCertificateFilePath), "tlsCertificateFilePath", "a TLS listener or port needs it")
            need(bool(self.tlsKeyFilePath), "tlsKeyFilePath", "a TLS listener or port needs it")
        need(not self.tlsRequireTrustedClientCertOnConnect or bool(self.tlsTrustCertsFilePath),
             "tlsRequireTrustedClientCertOnConnect", "needs tlsTrustCertsFilePath")
        bad = [p for p in self.tls_protocols if p not in TLS_VERSIONS]
        need(bool(self.tls_protocols) and not bad, "tlsProtocols", f"a comma list of {', '.join(TLS_VERSIONS)}")
        mechs = self.sasl_mechanisms
        unknown = [m for m in mechs if m not in SASL_MECHANISMS]
        need(not unknown, "saslAllowedMechanisms", f"a comma list of {', '.join(SASL_MECHANISMS)}")
        if used & {"SASL_PLAINTEXT", "SASL_SSL"}:
            if not self.authenticationEnabled:
                raise ConfigError("a SASL_PLAINTEXT or SASL_SSL listener needs authenticationEnabled=true (without "
                                  "it the listener would authenticate nobody); set it, or use PLAINTEXT/SSL")
            need(bool(mechs), "saslAllowedMechanisms", "a SASL listener needs at least one mechanism")
            if "PLAIN" in mechs:
                need(bool(self.saslPlainUsersFile) or self.token_auth_enabled, "saslAllowedMechanisms",
                     "PLAIN needs saslPlainUsersFile or the token provider (authenticationProviders with "
                     "AuthenticationProviderToken and tokenSecretKey/tokenPublicKey)")
            if "OAUTHBEARER" in mechs:
                need(bool(self.saslOauthbearerJwksEndpointUrl), "saslAllowedMechanisms",
                     "OAUTHBEARER needs saslOauthbearerJwksEndpointUrl")
        if self.authenticationEnabled:
            self._validate_authentication_providers()
        if self.token_auth_enabled:
            need(bool(self.tokenSecretKey or self.tokenPublicKey), "authenticationProviders",
                 "the token provider needs tokenSecretKey or tokenPublicKey")
        need(bool(self.tokenAudienceClaim) == bool(self.tokenAudience), "tokenAudience",
             "tokenAudienceClaim and tokenAudience are set together")
        need(self.tokenAllowedClockSkewSeconds >= 0, "tokenAllowedClockSkewSeconds", "must be >= 0")
        need(self.saslOauthbearerClockSkewSeconds >= 0, "saslOauthbearerClockSkewSeconds", "must be >= 0")
        need(self.saslOauthbearerJwksEndpointRefreshMs >= 1, "saslOauthbearerJwksEndpointRefreshMs", "must be >= 1")
        need(self.connectionsMaxReauthMs >= 0, "connectionsMaxReauthMs", "must be >= 0")
        need(self.failedAuthenticationDelayMs >= 0, "failedAuthenticationDelayMs", "must be >= 0")
        need(self.saslServerMaxReceiveSize >= 1024, "saslServerMaxReceiveSize", "must be >= 1024")

    def _validate_authentication_providers(self) -> None:
        """As Pulsar's AuthenticationService with authenticationEnabled: every listed class is loaded, so one this
        broker lacks is a start-up error naming it (Pulsar's ClassNotFoundException), and each provider's own
        required settings are checked (without authenticationEnabled Pulsar loads none, so neither do we)."""
        need = self._need
        providers = self.authentication_providers
        unknown = [p for p in providers if p not in AUTHENTICATION_PROVIDERS]
        need(not unknown, "authenticationProviders", f"this broker does not implement {', '.join(unknown)}; it "
             f"implements {', '.join(AUTHENTICATION_PROVIDERS)}")
        need(PROVIDER_BASIC not in providers or bool(self.basicAuthConf), "basicAuthConf",
             "AuthenticationProviderBasic needs it (No basic authentication config provided)")
        need(PROVIDER_TLS not in providers or bool(self.tlsTrustCertsFilePath), "tlsTrustCertsFilePath",
             "AuthenticationProviderTls needs it: only a certificate verified against it names a role")

    def _validate_storage_and_services(self) -> None:
        need = self._need
        need(self.managedLedgerMaxEntriesPerLedger >= 1, "managedLedgerMaxEntriesPerLedger", "must be >= 1")
        need(self.managedLedgerMaxSizePerLedgerMbytes >= 1, "managedLedgerMaxSizePerLedgerMbytes", "must be >= 1")
        need(self.managedLedgerMinLedgerRolloverTimeMinutes >= 0, "managedLedgerMinLedgerRolloverTimeMinutes", ">= 0")
        need(self.managedLedgerMaxLedgerRolloverTimeMinutes >= 1, "managedLedgerMaxLedgerRolloverTimeMinutes", ">= 1")
        need(self.localStoreFsyncPolicy in FSYNC_POLICIES, "localStoreFsyncPolicy", f"one of {FSYNC_POLICIES}")
        need(self.localStoreFsyncIntervalMs >= 1, "localStoreFsyncIntervalMs", "must be >= 1")
        need(self.localStoreDamagedLedgerPolicy in ("serve-intact", "refuse-start"),
             "localStoreDamagedLedgerPolicy", "serve-intact or refuse-start")
        need(self.storageBackend in ("", "embedded", "bookkeeper"), "storageBackend", "'', embedded or bookkeeper")
        need(self.storage_backend == "embedded" or bool(self.metadataStoreUrl or self.zookeeperServers),
             "storageBackend", "bookkeeper needs metadataStoreUrl (or zookeeperServers)")
        need(self.metadataStoreSessionTimeoutMillis >= 1000, "metadataStoreSessionTimeoutMillis", ">= 1000")
        need(1 <= self.defaultNumberOfNamespaceBundles <= 1024, "defaultNumberOfNamespaceBundles", "must be 1..1024")
        need(self.managedLedgerDefaultAckQuorum >= 1, "managedLedgerDefaultAckQuorum", "must be >= 1")
        need(self.managedLedgerDefaultWriteQuorum >= self.managedLedgerDefaultAckQuorum,
             "managedLedgerDefaultWriteQuorum", "must be >= managedLedgerDefaultAckQuorum")
        need(self.managedLedgerDefaultEnsembleSize >= self.managedLedgerDefaultWriteQuorum,
             "managedLedgerDefaultEnsembleSize", "must be >= managedLedgerDefaultWriteQuorum")
        need(self.defaultRetentionTimeInMinutes >= -1, "defaultRetentionTimeInMinutes", "-1 or >= 0")
        need(self.defaultRetentionSizeInMB >= -1, "defaultRetentionSizeInMB", "-1 or >= 0")
        need(self.retentionCheckIntervalMs >= 10, "retentionCheckIntervalMs", "must be >= 10")
        need(self.backlogQuotaDefaultRetentionPolicy in ("producer_request_hold", "producer_exception",
                                                         "consumer_backlog_eviction"),
             "backlogQuotaDefaultRetentionPolicy",
             "must be producer_request_hold, producer_exception or consumer_backlog_eviction")
        need(self.backlogQuotaCheckIntervalInSeconds >= 1, "backlogQuotaCheckIntervalInSeconds", "must be >= 1")
        need(self.logCleanerIntervalMs >= 10, "logCleanerIntervalMs", "must be >= 10")
        need(self.brokerShutdownTimeoutMs >= 0, "brokerShutdownTimeoutMs", "must be >= 0")
        need(bool(self.protocols), "messagingProtocols", "at least one protocol")
        need(0 <= self.brokerServicePort <= 65535, "brokerServicePort", "must be a port number (0: ephemeral)")
        need(self.schemaCompatibilityStrategy in SCHEMA_COMPATIBILITY_STRATEGIES, "schemaCompatibilityStrategy",
             "one of " + ", ".join(SCHEMA_COMPATIBILITY_STRATEGIES))
        need(1 <= self.offsetsTopicNumPartitions <= 100000, "offsetsTopicNumPartitions", "must be 1..100000")
        need(self.groupMinSessionTimeoutMs >= 0, "groupMinSessionTimeoutMs", "must be >= 0")
        need(self.groupMaxSessionTimeoutMs >= self.groupMinSessionTimeoutMs, "groupMaxSessionTimeoutMs",
             "must be >= groupMinSessionTimeoutMs")
        need(self.groupInitialRebalanceDelayMs >= 0, "groupInitialRebalanceDelayMs", "must be >= 0")
        need(self.groupMaxSize >= 1, "groupMaxSize", "must be >= 1")
        need(bool(self.consumer_assignors) and set(self.consumer_assignors) <= {"uniform", "range"},
             "groupConsumerAssignors", "a comma separated list of uniform and range")
        need(self.groupConsumerSessionTimeoutMs >= 1, "groupConsumerSessionTimeoutMs", "must be >= 1")
        need(1 <= self.groupConsumerHeartbeatIntervalMs < self.groupConsumerSessionTimeoutMs,
             "groupConsumerHeartbeatIntervalMs", "must be >= 1 and below groupConsumerSessionTimeoutMs")
        need(self.groupConsumerMaxSize >= 1, "groupConsumerMaxSize", "must be >= 1")
        need(self.groupStreamsInitialRebalanceDelayMs >= 0, "groupStreamsInitialRebalanceDelayMs", "must be >= 0")
        need(0 <= self.groupStreamsNumStandbyReplicas <= 2, "groupStreamsNumStandbyReplicas",
             "0 to 2 (Kafka's group.streams.max.standby.replicas)")
        need(1 <= self.groupStreamsHeartbeatIntervalMs < self.groupStreamsSessionTimeoutMs,
             "groupStreamsHeartbeatIntervalMs", "must be >= 1 and below groupStreamsSessionTimeoutMs")
        need(self.groupConsumerMigrationPolicy.strip().lower() in ("bidirectional", "upgrade", "downgrade", "disabled"),
             "groupConsumerMigrationPolicy", "bidirectional, upgrade, downgrade or disabled")
        need(self.offsetsRetentionMinutes >= 1, "offsetsRetentionMinutes", "must be >= 1")
        need(self.offsetsRetentionCheckIntervalMs >= 1, "offsetsRetentionCheckIntervalMs", "must be >= 1")
        need(self.offsetMetadataMaxSize >= 0, "offsetMetadataMaxSize", "must be >= 0")
        need(1 <= self.transactionStateLogNumPartitions <= 100000, "transactionStateLogNumPartitions",
             "must be 1..100000")
        need(self.transactionMaxTimeoutMs >= 1, "transactionMaxTimeoutMs", "must be >= 1")
        need(self.transactionalIdExpirationMs >= 1, "transactionalIdExpirationMs", "must be >= 1")
        need(self.transactionAbortTimedOutTransactionCleanupIntervalMs >= 1,
             "transactionAbortTimedOutTransactionCleanupIntervalMs", "must be >= 1")
        need(self.transactionRemoveExpiredTransactionalIdCleanupIntervalMs >= 1,
             "transactionRemoveExpiredTransactionalIdCleanupIntervalMs", "must be >= 1")
        need(-1 <= self.webServicePort <= 65535, "webServicePort", "-1 (off), 0 (ephemeral) or a port")
        need(self.slowRequestThresholdMs >= -1, "slowRequestThresholdMs", "-1 (off) or >= 0")
        need(self.statsUpdateFrequencyInSecs >= 1, "statsUpdateFrequencyInSecs", "must be >= 1")
        need(self.metricsMaxTopicLabels >= 0, "metricsMaxTopicLabels", "must be >= 0")
        need(self.metricsMaxGroupLabels >= 0, "metricsMaxGroupLabels", "must be >= 0")
        need(bool(self.tokenAudienceClaim) == bool(self.tokenAudience), "tokenAudience",
             "tokenAudienceClaim and tokenAudience are set together")
        need(self.tokenAllowedClockSkewSeconds >= 0, "tokenAllowedClockSkewSeconds", "must be >= 0")

    # ------------------------------------------------------------------ derived values
    @property
    def storage_backend(self) -> str:
        """"embedded" or "bookkeeper" (storageBackend, or auto: bookkeeper when ZooKeeper is configured)."""
        if self.storageBackend:
            return self.storageBackend
        return "bookkeeper" if (self.metadataStoreUrl or self.zookeeperServers) else "embedded"

    @property
    def ip_overrides(self) -> dict[str, int]:
        """maxConnectionsPerIpOverrides as {host or address: limit}."""
        return self._derived.get("ip_overrides", {})

    @property
    def listeners(self) -> tuple[Listener, ...]:
        if "listeners" not in self._derived:  # built directly (tests), not through load()/from_strings()
            self.validate()
        return self._derived["listeners"]

    @property
    def advertised_listeners(self) -> tuple[Listener, ...]:
        """What Metadata/FindCoordinator hand out: explicit advertised listeners, else the bind listeners
        with a wildcard host replaced by advertisedAddress (or 127.0.0.1)."""
        adv = self._derived.get("advertised")
        if adv:
            return adv
        host_for_wildcard = self.advertisedAddress or "127.0.0.1"
        return tuple(
            Listener(lst.name, host_for_wildcard if lst.host in ("", "0.0.0.0", "::") else lst.host, lst.port)
            for lst in self.listeners
        )

    @property
    def security_protocols(self) -> dict[str, str]:
        """{listener name: PLAINTEXT | SSL | SASL_PLAINTEXT | SASL_SSL}."""
        if "protocols" not in self._derived:
            self.validate()
        return self._derived["protocols"]

    @property
    def tls_protocols(self) -> list[str]:
        return [p.strip() for p in self.tlsProtocols.split(",") if p.strip()]

    @property
    def sasl_mechanisms(self) -> list[str]:
        """saslAllowedMechanisms, upper-cased, in the order given (SaslHandshake lists them so)."""
        return [m.strip().upper() for m in self.saslAllowedMechanisms.split(",") if m.strip()]

    @property
    def authentication_providers(self) -> list[str]:
        """authenticationProviders as a list of class names (Pulsar's comma list)."""
        return [p.strip() for p in self.authenticationProviders.split(",") if p.strip()]

    @property
    def token_auth_enabled(self) -> bool:
        """Pulsar's token provider is configured (PLAIN then takes token:<jwt> passwords)."""
        return "AuthenticationProviderToken" in self.authenticationProviders

    @property
    def protocols(self) -> list[str]:
        return [p.strip() for p in self.messagingProtocols.split(",") if p.strip()]

    @property
    def consumer_assignors(self) -> list[str]:
        """groupConsumerAssignors as names, the broker's default (Kafka: the first) first."""
        return [a.strip() for a in self.groupConsumerAssignors.split(",") if a.strip()]

    @property
    def migration_upgrade(self) -> bool:
        """groupConsumerMigrationPolicy lets a classic group with members become a consumer group."""
        return self.groupConsumerMigrationPolicy.strip().lower() in ("bidirectional", "upgrade")

    @property
    def migration_downgrade(self) -> bool:
        """groupConsumerMigrationPolicy lets a consumer group whose members all use the classic protocol
        become a classic group again."""
        return self.groupConsumerMigrationPolicy.strip().lower() in ("bidirectional", "downgrade")

    @property
    def dynamic_topic_defaults(self) -> dict[str, str]:
        """Topic-config defaults set at runtime by dynamic broker configs (empty: the file's defaults hold)."""
        return self._dynamic_topic_defaults

    def set_dynamic_topic_defaults(self, defaults: dict[str, str]) -> None:
        self._dynamic_topic_defaults = dict(defaults)

    @property
    def default_retention_ms(self) -> int:
        return -1 if self.defaultRetentionTimeInMinutes < 0 else self.defaultRetentionTimeInMinutes * 60000

    @property
    def default_retention_bytes(self) -> int:
        return -1 if self.defaultRetentionSizeInMB < 0 else self.defaultRetentionSizeInMB * 1024 * 1024


def _convert(type_name: object, text: str) -> int | bool | str:
    t = type_name if isinstance(type_name, str) else getattr(type_name, "__name__", str(type_name))
    text = text.strip()
    if t == "int":
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"expected an integer, got {text!r}") from None
    if t == "bool":
        return _bool(text)
    if t == "str":
        return text
    raise ValueError(f"unsupported type {t}")


def _closest(key: str, known: Mapping[str, object]) -> str | None:
    import difflib

    m = difflib.get_close_matches(key, list(known), n=1, cutoff=0.75)
    return m[0] if m else None


def read_properties(path: Path) -> dict[str, str]:
    """Java-properties style: `key=value` (or `key: value`), `#`/`!` comments, blank lines."""
    try:
        text = path.read_text()
    except OSError as e:
        raise ConfigError(f"cannot read config file {path}: {e.strerror}") from None
    out: dict[str, str] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s or s[0] in "#!":
            continue
        m = re.match(r"^([^=:\s]+)\s*[=:]\s*(.*)$", s)
        if not m:
            raise ConfigError(f"{path}:{lineno}: expected key=value, got {s!r}")
        out[m[1]] = m[2]
    return out


def parse_overrides(items: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"--override expects key=value, got {item!r}")
        k, v = item.split("=", 1)
        out[k.strip()] = v
    return out
