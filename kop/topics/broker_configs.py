"""Dynamic broker configs (Kafka's KIP-226): broker configs set at runtime with IncrementalAlterConfigs /
AlterConfigs on a BROKER resource, for this broker (resource name = its id) or for every broker (the
cluster-wide default, resource name ""), kept in the metadata store and applied without a restart.

Which names may be set, and how they are refused, are Apache Kafka's (DynamicBrokerConfig.validateConfigs and
ConfigAdminManager, checked against Kafka 4.2's jars; the 4.3 / 4.4 topic-config synonyms added; the messages
are Kafka 4.4's, whose DynamicBrokerConfig is Java: a java.util.HashSet printed, [a, b]): a name of Kafka's
broker config that is not dynamic gets "Cannot update these configs dynamically: [...]", a listener or
security config set cluster-wide "... broker id must be specified: [...]", a value of the wrong type or
range Kafka's ConfigDef message, all as INVALID_REQUEST (Kafka's KAFKA-13609: the validation failure of a
broker config is an InvalidRequestException there). A name Kafka does not know is accepted and stored, as
Kafka accepts custom broker properties.

What a dynamic value changes here: the broker-level synonym of a topic config (log.retention.ms,
message.max.bytes, compression.type, log.cleanup.policy, log.cleaner.delete.retention.ms, ...) is the
default of that topic config for every topic that does not set it (topic_config.effective reads
BrokerConfig.dynamic_topic_defaults, which this module keeps): the write rules, retention and the log cleaner
read it on their next use, so it applies at once. The other dynamic names (thread pools, SSL, listeners,
connection limits, log.cleaner.threads, ...) are validated, stored and described, without effect here, as the
topic configs without effect are.

Storage: one JSON node per resource, /kop/config/brokers/<id> and /kop/config/brokers/<default> (the names
Kafka's ZooKeeper mode used), written with compare-and-set. There is no watch on the metadata store: every
broker re-reads both nodes every second (the service's "broker-configs" chore) and before each DescribeConfigs
or alteration, so a cluster-wide default set through one broker of a ZooKeeper cluster applies on every
broker within a second. Per-broker > cluster default > the config file, as in Kafka.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable

from kop.config import BrokerConfig
from kop.storage.api import BadVersionError, MetadataStore, NodeExistsError

CONFIG_ROOT = "/kop/config/brokers"
DEFAULT_NODE = "<default>"

# Broker-level synonym of each topic config, as Kafka names them (ServerTopicConfigSynonyms; the configs without
# one have none on Kafka either: their broker default is only the topic default).
BROKER_SYNONYM = {
    "retention.ms": "log.retention.ms",
    "retention.bytes": "log.retention.bytes",
    "max.message.bytes": "message.max.bytes",
    "cleanup.policy": "log.cleanup.policy",
    "message.timestamp.type": "log.message.timestamp.type",
    "message.timestamp.before.max.ms": "log.message.timestamp.before.max.ms",
    "message.timestamp.after.max.ms": "log.message.timestamp.after.max.ms",
    "segment.bytes": "log.segment.bytes",
    "segment.ms": "log.roll.ms",
    "min.insync.replicas": "min.insync.replicas",
    "delete.retention.ms": "log.cleaner.delete.retention.ms",
    "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio",
    "min.compaction.lag.ms": "log.cleaner.min.compaction.lag.ms",
    "max.compaction.lag.ms": "log.cleaner.max.compaction.lag.ms",
    "compression.type": "compression.type",
    "compression.gzip.level": "compression.gzip.level",
    "compression.lz4.level": "compression.lz4.level",
    "compression.zstd.level": "compression.zstd.level",
    "file.delete.delay.ms": "log.segment.delete.delay.ms",
    "flush.messages": "log.flush.interval.messages",
    "index.interval.bytes": "log.index.interval.bytes",
    "segment.index.bytes": "log.index.size.max.bytes",
    "preallocate": "log.preallocate",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
    "local.retention.ms": "log.local.retention.ms",
    "local.retention.bytes": "log.local.retention.bytes",
    # Kafka 4.3 / 4.4 (ServerTopicConfigSynonyms); errors.deadletterqueue.group.enable has none.
    "max.decompressed.message.bytes": "max.decompressed.message.bytes",
    "remote.copy.lag.ms": "log.remote.copy.lag.ms",
    "remote.copy.lag.bytes": "log.remote.copy.lag.bytes",
}
TOPIC_OF = {broker: topic for topic, broker in BROKER_SYNONYM.items()}

# A value check: None (the type only), (lo, hi) a range (either end None: open), a tuple of strings the allowed
# values (of a STRING, or of each item of a LIST), or "gzip" (1..9 or -1).
Validator = tuple[float | None, float | None] | tuple[str, ...] | str | None

# Every dynamic broker config (name: Kafka type, value check): Kafka 4.2's DynamicConfig.Broker (its ConfigDef
# types and validators, the quota rates included), plus the topic-config synonyms Kafka 4.3 / 4.4 added.
DYNAMIC: dict[str, tuple[str, Validator]] = {
    "background.threads": ("INT", (1, None)),
    "compression.gzip.level": ("INT", "gzip"),
    "compression.lz4.level": ("INT", (1, 17)),
    "compression.type": ("STRING", ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")),
    "compression.zstd.level": ("INT", (-131072, 22)),
    "config.providers": ("LIST", None),
    "follower.replication.throttled.rate": ("LONG", (0, None)),
    "leader.replication.throttled.rate": ("LONG", (0, None)),
    "listener.security.protocol.map": ("STRING", None),
    "listeners": ("LIST", None),
    "log.cleaner.backoff.ms": ("LONG", (0, None)),
    "log.cleaner.dedupe.buffer.size": ("LONG", None),
    "log.cleaner.delete.retention.ms": ("LONG", (0, None)),
    "log.cleaner.io.buffer.load.factor": ("DOUBLE", None),
    "log.cleaner.io.buffer.size": ("INT", (0, None)),
    "log.cleaner.io.max.bytes.per.second": ("DOUBLE", None),
    "log.cleaner.max.compaction.lag.ms": ("LONG", (1, None)),
    "log.cleaner.min.cleanable.ratio": ("DOUBLE", (0, 1)),
    "log.cleaner.min.compaction.lag.ms": ("LONG", (0, None)),
    "log.cleaner.threads": ("INT", (0, None)),
    "log.cleanup.policy": ("LIST", ("compact", "delete")),
    "log.flush.interval.messages": ("LONG", (1, None)),
    "log.flush.interval.ms": ("LONG", None),
    "log.index.interval.bytes": ("INT", (0, None)),
    "log.index.size.max.bytes": ("INT", (4, None)),
    "log.local.retention.bytes": ("LONG", (-2, None)),
    "log.local.retention.ms": ("LONG", (-2, None)),
    "log.message.timestamp.after.max.ms": ("LONG", (0, None)),
    "log.message.timestamp.before.max.ms": ("LONG", (0, None)),
    "log.message.timestamp.type": ("STRING", ("CreateTime", "LogAppendTime")),
    "log.preallocate": ("BOOLEAN", None),
    "log.retention.bytes": ("LONG", None),
    "log.retention.ms": ("LONG", None),
    "log.roll.jitter.ms": ("LONG", None),
    "log.roll.ms": ("LONG", None),
    "log.segment.bytes": ("INT", (1048576, None)),
    "log.segment.delete.delay.ms": ("LONG", (0, None)),
    "max.connection.creation.rate": ("INT", (0, None)),
    "max.connections": ("INT", (0, None)),
    "max.connections.per.ip": ("INT", (0, None)),
    "max.connections.per.ip.overrides": ("STRING", None),
    "message.max.bytes": ("INT", (0, None)),
    "metric.reporters": ("LIST", None),
    "min.insync.replicas": ("INT", (1, None)),
    "num.io.threads": ("INT", (1, None)),
    "num.network.threads": ("INT", (1, None)),
    "num.recovery.threads.per.data.dir": ("INT", (1, None)),
    "num.replica.fetchers": ("INT", (1, None)),
    "principal.builder.class": ("CLASS", None),
    "producer.id.expiration.ms": ("INT", (1, None)),
    "remote.fetch.max.wait.ms": ("INT", (1, None)),
    "remote.list.offsets.request.timeout.ms": ("LONG", (1, None)),
    "remote.log.index.file.cache.total.size.bytes": ("LONG", (1, None)),
    "remote.log.manager.copier.thread.pool.size": ("INT", (1, None)),
    "remote.log.manager.copy.max.bytes.per.second": ("LONG", (1, None)),
    "remote.log.manager.expiration.thread.pool.size": ("INT", (1, None)),
    "remote.log.manager.fetch.max.bytes.per.second": ("LONG", (1, None)),
    "remote.log.manager.follower.thread.pool.size": ("INT", (1, None)),
    "remote.log.reader.threads": ("INT", (1, None)),
    "replica.alter.log.dirs.io.max.bytes.per.second": ("LONG", (0, None)),
    "sasl.enabled.mechanisms": ("LIST", None),
    "sasl.jaas.config": ("PASSWORD", None),
    "sasl.kerberos.kinit.cmd": ("STRING", None),
    "sasl.kerberos.min.time.before.relogin": ("LONG", None),
    "sasl.kerberos.principal.to.local.rules": ("LIST", None),
    "sasl.kerberos.service.name": ("STRING", None),
    "sasl.kerberos.ticket.renew.jitter": ("DOUBLE", None),
    "sasl.kerberos.ticket.renew.window.factor": ("DOUBLE", None),
    "sasl.login.refresh.buffer.seconds": ("SHORT", None),
    "sasl.login.refresh.min.period.seconds": ("SHORT", None),
    "sasl.login.refresh.window.factor": ("DOUBLE", None),
    "sasl.login.refresh.window.jitter": ("DOUBLE", None),
    "sasl.mechanism.inter.broker.protocol": ("STRING", None),
    "ssl.cipher.suites": ("LIST", None),
    "ssl.client.auth": ("STRING", ("required", "requested", "none")),
    "ssl.enabled.protocols": ("LIST", None),
    "ssl.endpoint.identification.algorithm": ("STRING", None),
    "ssl.engine.factory.class": ("CLASS", None),
    "ssl.key.password": ("PASSWORD", None),
    "ssl.keymanager.algorithm": ("STRING", None),
    "ssl.keystore.certificate.chain": ("PASSWORD", None),
    "ssl.keystore.key": ("PASSWORD", None),
    "ssl.keystore.location": ("STRING", None),
    "ssl.keystore.password": ("PASSWORD", None),
    "ssl.keystore.type": ("STRING", None),
    "ssl.protocol": ("STRING", None),
    "ssl.provider": ("STRING", None),
    "ssl.secure.random.implementation": ("STRING", None),
    "ssl.trustmanager.algorithm": ("STRING", None),
    "ssl.truststore.certificates": ("PASSWORD", None),
    "ssl.truststore.location": ("STRING", None),
    "ssl.truststore.password": ("PASSWORD", None),
    "ssl.truststore.type": ("STRING", None),
    "transaction.partition.verification.enable": ("BOOLEAN", None),
    "unclean.leader.election.enable": ("BOOLEAN", None),
    "max.decompressed.message.bytes": ("INT", (1, 2**31 - 9)),
    "log.remote.copy.lag.ms": ("LONG", (-1, None)),
    "log.remote.copy.lag.bytes": ("LONG", (-1, None)),
}
# The dynamic configs that only a broker's own resource may set (listeners, SSL and SASL settings), not the
# cluster-wide default: Kafka's PerBrokerConfigs.
PER_BROKER = frozenset({
    "listener.security.protocol.map", "listeners", "principal.builder.class", "sasl.enabled.mechanisms",
    "sasl.jaas.config", "sasl.kerberos.kinit.cmd", "sasl.kerberos.min.time.before.relogin",
    "sasl.kerberos.principal.to.local.rules", "sasl.kerberos.service.name",
    "sasl.kerberos.ticket.renew.jitter", "sasl.kerberos.ticket.renew.window.factor",
    "sasl.login.refresh.buffer.seconds", "sasl.login.refresh.min.period.seconds",
    "sasl.login.refresh.window.factor", "sasl.login.refresh.window.jitter",
    "sasl.mechanism.inter.broker.protocol", "ssl.cipher.suites", "ssl.client.auth", "ssl.enabled.protocols",
    "ssl.endpoint.identification.algorithm", "ssl.engine.factory.class", "ssl.key.password",
    "ssl.keymanager.algorithm", "ssl.keystore.certificate.chain", "ssl.keystore.key",
    "ssl.keystore.location", "ssl.keystore.password", "ssl.keystore.type", "ssl.protocol", "ssl.provider",
    "ssl.secure.random.implementation", "ssl.trustmanager.algorithm", "ssl.truststore.certificates",
    "ssl.truststore.location", "ssl.truststore.password", "ssl.truststore.type",
})
# Kafka's broker configs that are not dynamic (DynamicConfig.Broker.nonDynamicProps): setting one is refused.
NON_DYNAMIC = frozenset({
    "add.partitions.to.txn.retry.backoff.max.ms", "add.partitions.to.txn.retry.backoff.ms",
    "advertised.listeners", "alter.config.policy.class.name", "alter.log.dirs.replication.quota.window.num",
    "alter.log.dirs.replication.quota.window.size.seconds", "authorizer.class.name",
    "auto.create.topics.enable", "auto.leader.rebalance.enable", "broker.heartbeat.interval.ms",
    "broker.id", "broker.rack", "broker.session.timeout.ms", "client.quota.callback.class",
    "connection.failed.authentication.delay.ms", "connections.max.idle.ms", "connections.max.reauth.ms",
    "controlled.shutdown.enable", "controller.listener.names",
    "controller.performance.always.log.threshold.ms", "controller.performance.sample.period.ms",
    "controller.quorum.append.linger.ms", "controller.quorum.auto.join.enable",
    "controller.quorum.bootstrap.servers", "controller.quorum.election.backoff.max.ms",
    "controller.quorum.election.timeout.ms", "controller.quorum.fetch.timeout.ms",
    "controller.quorum.request.timeout.ms", "controller.quorum.retry.backoff.ms",
    "controller.quorum.voters", "controller.quota.window.num", "controller.quota.window.size.seconds",
    "controller.socket.timeout.ms", "create.topic.policy.class.name", "default.replication.factor",
    "delegation.token.expiry.check.interval.ms", "delegation.token.expiry.time.ms",
    "delegation.token.max.lifetime.ms", "delegation.token.secret.key",
    "delete.records.purgatory.purge.interval.requests", "delete.topic.enable", "early.start.listeners",
    "fetch.max.bytes", "fetch.purgatory.purge.interval.requests", "group.consumer.assignors",
    "group.consumer.heartbeat.interval.ms", "group.consumer.max.heartbeat.interval.ms",
    "group.consumer.max.session.timeout.ms", "group.consumer.max.size", "group.consumer.migration.policy",
    "group.consumer.min.heartbeat.interval.ms", "group.consumer.min.session.timeout.ms",
    "group.consumer.regex.refresh.interval.ms", "group.consumer.session.timeout.ms",
    "group.coordinator.append.linger.ms", "group.coordinator.rebalance.protocols",
    "group.coordinator.threads", "group.initial.rebalance.delay.ms", "group.max.session.timeout.ms",
    "group.max.size", "group.min.session.timeout.ms", "group.share.assignors",
    "group.share.delivery.count.limit", "group.share.enable", "group.share.heartbeat.interval.ms",
    "group.share.initialize.retry.interval.ms", "group.share.max.heartbeat.interval.ms",
    "group.share.max.record.lock.duration.ms", "group.share.max.session.timeout.ms",
    "group.share.max.share.sessions", "group.share.max.size", "group.share.min.heartbeat.interval.ms",
    "group.share.min.record.lock.duration.ms", "group.share.min.session.timeout.ms",
    "group.share.partition.max.record.locks", "group.share.persister.class.name",
    "group.share.record.lock.duration.ms", "group.share.session.timeout.ms",
    "group.streams.heartbeat.interval.ms", "group.streams.initial.rebalance.delay.ms",
    "group.streams.max.heartbeat.interval.ms", "group.streams.max.session.timeout.ms",
    "group.streams.max.size", "group.streams.max.standby.replicas",
    "group.streams.min.heartbeat.interval.ms", "group.streams.min.session.timeout.ms",
    "group.streams.num.standby.replicas", "group.streams.session.timeout.ms",
    "initial.broker.registration.timeout.ms", "inter.broker.listener.name",
    "internal.metadata.delete.delay.millis", "internal.metadata.log.segment.bytes",
    "internal.metadata.max.batch.size.in.bytes", "internal.metadata.max.fetch.size.in.bytes",
    "kafka.metrics.polling.interval.secs", "kafka.metrics.reporters",
    "leader.imbalance.check.interval.seconds", "log.cleaner.enable", "log.dir",
    "log.dir.failure.timeout.ms", "log.dirs", "log.flush.offset.checkpoint.interval.ms",
    "log.flush.scheduler.interval.ms", "log.flush.start.offset.checkpoint.interval.ms",
    "log.initial.task.delay.ms", "log.retention.check.interval.ms", "log.retention.hours",
    "log.retention.minutes", "log.roll.hours", "log.roll.jitter.hours",
    "max.incremental.fetch.session.cache.slots", "max.request.partition.size.limit", "metadata.log.dir",
    "metadata.log.max.record.bytes.between.snapshots", "metadata.log.max.snapshot.interval.ms",
    "metadata.log.segment.bytes", "metadata.log.segment.ms", "metadata.max.idle.interval.ms",
    "metadata.max.retention.bytes", "metadata.max.retention.ms", "metrics.num.samples",
    "metrics.recording.level", "metrics.sample.window.ms", "node.id", "num.partitions",
    "num.replica.alter.log.dirs.threads", "offset.metadata.max.bytes", "offsets.commit.timeout.ms",
    "offsets.load.buffer.size", "offsets.retention.check.interval.ms", "offsets.retention.minutes",
    "offsets.topic.compression.codec", "offsets.topic.num.partitions", "offsets.topic.replication.factor",
    "offsets.topic.segment.bytes", "process.roles", "producer.id.expiration.check.interval.ms",
    "producer.purgatory.purge.interval.requests", "queued.max.request.bytes", "queued.max.requests",
    "quota.window.num", "quota.window.size.seconds", "remote.log.manager.copy.quota.window.num",
    "remote.log.manager.copy.quota.window.size.seconds", "remote.log.manager.fetch.quota.window.num",
    "remote.log.manager.fetch.quota.window.size.seconds", "remote.log.manager.task.interval.ms",
    "remote.log.manager.task.retry.backoff.max.ms", "remote.log.manager.task.retry.backoff.ms",
    "remote.log.manager.task.retry.jitter", "remote.log.manager.thread.pool.size",
    "remote.log.metadata.custom.metadata.max.bytes", "remote.log.metadata.manager.class.name",
    "remote.log.metadata.manager.class.path", "remote.log.metadata.manager.impl.prefix",
    "remote.log.metadata.manager.listener.name", "remote.log.reader.max.pending.tasks",
    "remote.log.storage.manager.class.name", "remote.log.storage.manager.class.path",
    "remote.log.storage.manager.impl.prefix", "remote.log.storage.system.enable",
    "replica.fetch.backoff.ms", "replica.fetch.max.bytes", "replica.fetch.min.bytes",
    "replica.fetch.response.max.bytes", "replica.fetch.wait.max.ms",
    "replica.high.watermark.checkpoint.interval.ms", "replica.lag.time.max.ms", "replica.selector.class",
    "replica.socket.receive.buffer.bytes", "replica.socket.timeout.ms", "replication.quota.window.num",
    "replication.quota.window.size.seconds", "request.timeout.ms", "sasl.client.callback.handler.class",
    "sasl.login.callback.handler.class", "sasl.login.class", "sasl.login.connect.timeout.ms",
    "sasl.login.read.timeout.ms", "sasl.login.retry.backoff.max.ms", "sasl.login.retry.backoff.ms",
    "sasl.mechanism.controller.protocol", "sasl.oauthbearer.assertion.algorithm",
    "sasl.oauthbearer.assertion.claim.aud", "sasl.oauthbearer.assertion.claim.exp.seconds",
    "sasl.oauthbearer.assertion.claim.iss", "sasl.oauthbearer.assertion.claim.jti.include",
    "sasl.oauthbearer.assertion.claim.nbf.seconds", "sasl.oauthbearer.assertion.claim.sub",
    "sasl.oauthbearer.assertion.file", "sasl.oauthbearer.assertion.private.key.file",
    "sasl.oauthbearer.assertion.private.key.passphrase", "sasl.oauthbearer.assertion.template.file",
    "sasl.oauthbearer.client.credentials.client.id", "sasl.oauthbearer.client.credentials.client.secret",
    "sasl.oauthbearer.clock.skew.seconds", "sasl.oauthbearer.expected.audience",
    "sasl.oauthbearer.expected.issuer", "sasl.oauthbearer.jwks.endpoint.refresh.ms",
    "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms",
    "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms", "sasl.oauthbearer.jwks.endpoint.url",
    "sasl.oauthbearer.jwt.retriever.class", "sasl.oauthbearer.jwt.validator.class",
    "sasl.oauthbearer.scope", "sasl.oauthbearer.scope.claim.name", "sasl.oauthbearer.sub.claim.name",
    "sasl.oauthbearer.token.endpoint.url", "sasl.server.callback.handler.class",
    "sasl.server.max.receive.size", "security.inter.broker.protocol", "security.providers",
    "server.max.startup.time.ms", "share.coordinator.append.linger.ms",
    "share.coordinator.cold.partition.snapshot.interval.ms", "share.coordinator.load.buffer.size",
    "share.coordinator.snapshot.update.records.per.snapshot",
    "share.coordinator.state.topic.compression.codec", "share.coordinator.state.topic.min.isr",
    "share.coordinator.state.topic.num.partitions", "share.coordinator.state.topic.prune.interval.ms",
    "share.coordinator.state.topic.replication.factor", "share.coordinator.state.topic.segment.bytes",
    "share.coordinator.threads", "share.coordinator.write.timeout.ms",
    "share.fetch.purgatory.purge.interval.requests", "socket.connection.setup.timeout.max.ms",
    "socket.connection.setup.timeout.ms", "socket.listen.backlog.size", "socket.receive.buffer.bytes",
    "socket.request.max.bytes", "socket.send.buffer.bytes", "ssl.allow.dn.changes", "ssl.allow.san.changes",
    "ssl.principal.mapping.rules", "telemetry.max.bytes",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms", "transaction.max.timeout.ms",
    "transaction.remove.expired.transaction.cleanup.interval.ms", "transaction.state.log.load.buffer.size",
    "transaction.state.log.min.isr", "transaction.state.log.num.partitions",
    "transaction.state.log.replication.factor", "transaction.state.log.segment.bytes",
    "transaction.two.phase.commit.enable", "transactional.id.expiration.ms",
    "unclean.leader.election.interval.ms", "unstable.api.versions.enable",
    "unstable.feature.versions.enable",
})
# Kafka's DynamicSecurityConfigs (SslConfigs.RECONFIGURABLE_CONFIGS): settable only with a listener prefix.
SECURITY_CONFIGS = (
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
    "ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.password",
    "ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.truststore.certificates",
)
# Listener-prefixed configs that stay cluster-wide (Kafka's ClusterLevelListenerConfigs).
CLUSTER_LEVEL_LISTENER_CONFIGS = frozenset({"max.connections", "max.connection.creation.rate",
                                            "num.network.threads"})
_LISTENER_CONFIG = re.compile(r"listener\.name\.[^.]*\.(.*)")
_INT_BOUNDS = {"SHORT": 2**15 - 1, "INT": 2**31 - 1, "LONG": 2**63 - 1}


class BrokerConfigError(Exception):
    """An alteration refused with this Kafka error (its name, as kop.protocol.errors.ErrorCode spells it)."""

    def __init__(self, error: str, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


def _java_string_hash(s: str) -> int:
    """java.lang.String.hashCode (over UTF-16 code units), as an unsigned 32-bit int."""
    units = s.encode("utf-16-be")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h


def java_set(names: Iterable[str], presized_for: int | None = None) -> str:
    """How Kafka 4.4's messages print a java.util.HashSet of names: [a, b], in the set's iteration order - by
    hash bucket (HashMap.hash: h ^ h >>> 16, masked to the table size), names in one bucket in insertion order.
    The table is 16 buckets, doubled whenever the set holds more than 3/4 of them (a set filled by add), or
    sized for `presized_for` names (new HashSet(collection) of that many, later trimmed by retainAll)."""
    items = list(dict.fromkeys(names))
    if presized_for is None:
        size = 16
        while len(items) > size * 3 // 4:
            size *= 2
    else:
        size = 1
        while size < max(int(presized_for / 0.75) + 1, 16):
            size *= 2

    def bucket(name: str) -> int:
        h = _java_string_hash(name)
        return (h ^ (h >> 16)) & (size - 1)

    return "[" + ", ".join(sorted(items, key=bucket)) + "]"


def is_dynamic(name: str) -> bool:
    """Whether Kafka lets `name` be set at runtime (its read_only is the opposite); listener-prefixed names are
    judged by their base name, names Kafka does not know are custom properties (settable)."""
    m = _LISTENER_CONFIG.fullmatch(name)
    base = m[1] if m else name
    return base in DYNAMIC or base not in NON_DYNAMIC


def kafka_type(name: str) -> str | None:
    """The Kafka ConfigDef type of a dynamic config (None for a custom property)."""
    m = _LISTENER_CONFIG.fullmatch(name)
    entry = DYNAMIC.get(m[1] if m else name)
    return entry[0] if entry else None


def check_value(name: str, value: str) -> None:
    """Kafka's ConfigDef parse and validator for one dynamic config, with its messages; custom names pass."""
    entry = DYNAMIC.get(name)
    if entry is None:
        return
    ctype, validator = entry

    def bad(shown: str, why: str) -> BrokerConfigError:
        return BrokerConfigError("INVALID_REQUEST", f"Invalid value {shown} for configuration {name}: {why}")

    s = value.strip()
    number: float | None = None
    if ctype in _INT_BOUNDS:
        try:
            number = int(s, 10)
        except ValueError:
            raise bad(value, f"Not a number of type {ctype}") from None
        if not -_INT_BOUNDS[ctype] - 1 <= number <= _INT_BOUNDS[ctype]:
            raise bad(value, f"Not a number of type {ctype}")
    elif ctype == "DOUBLE":
        try:
            number = float(s)
        except ValueError:
            raise bad(value, "Not a number of type DOUBLE") from None
    elif ctype == "BOOLEAN":
        if s.lower() not in ("true", "false"):
            raise bad(value, "Expected value to be either true or false")
    if validator is None:
        return
    if validator == "gzip":
        if number is not None and number != -1 and not 1 <= number <= 9:
            raise bad(s, "Value must be between 1 and 9 or equal to -1")
        return
    if isinstance(validator, tuple) and validator and isinstance(validator[0], str):
        allowed = [str(v) for v in validator]
        for item in ([p.strip() for p in s.split(",") if p.strip()] if ctype == "LIST" else [s]):
            if item not in allowed:
                raise bad(item, f"String must be one of: {', '.join(allowed)}")
        return
    if isinstance(validator, tuple) and number is not None:
        lo, hi = validator
        if isinstance(lo, (int, float)) and number < lo:
            raise bad(s, f"Value must be at least {_fmt(lo)}")
        if isinstance(hi, (int, float)) and number > hi:
            raise bad(s, f"Value must be no more than {_fmt(hi)}")


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def validate(props: dict[str, str], per_broker: bool) -> None:
    """Kafka's DynamicBrokerConfig.validateConfigs on a resource's complete new set, in Kafka's order: names
    that are not dynamic, security configs without a listener prefix, each value's type and range, then the
    per-broker names on the cluster-wide default."""
    fixed = [n for n in props if n in NON_DYNAMIC and n not in DYNAMIC]
    if fixed:
        # Kafka: new HashSet(every name).retainAll(the non-dynamic ones)
        raise BrokerConfigError("INVALID_REQUEST",
                                f"Cannot update these configs dynamically: {java_set(fixed, len(props))}")
    unprefixed = [n for n in SECURITY_CONFIGS if n in props]
    if unprefixed:
        raise BrokerConfigError("INVALID_REQUEST", "These security configs can be dynamically updated only "
                                f"per-listener using the listener prefix: {java_set(unprefixed)}")
    for name, value in props.items():
        m = _LISTENER_CONFIG.fullmatch(name)
        check_value(m[1] if m else name, value)
    if not per_broker:
        own = [n for n in props if n in PER_BROKER or ((m := _LISTENER_CONFIG.fullmatch(n)) is not None
                                                      and m[1] not in CLUSTER_LEVEL_LISTENER_CONFIGS)]
        if own:
            raise BrokerConfigError("INVALID_REQUEST", "Cannot update these configs at default cluster level, "
                                    f"broker id must be specified: {java_set(own)}")


class BrokerConfigs:
    """This broker's dynamic configs: the cluster-wide defaults and its own, as last read from the metadata
    store, and the topic-config defaults they stand for, applied to the broker config."""

    def __init__(self, config: BrokerConfig, store: MetadataStore) -> None:
        self.config = config
        self.store = store
        self.default: dict[str, str] = {}  # the cluster-wide default (resource name "")
        self.own: dict[str, str] = {}  # this broker's (resource name = its id)

    @property
    def broker_id(self) -> str:
        return str(self.config.kafkaBrokerId)

    def check_resource(self, resource_name: str) -> None:
        """Kafka's ConfigAdminManager.validateResourceNameIsCurrentNodeId ("" is the cluster default)."""
        if resource_name == "":
            return
        try:
            node = int(resource_name)
        except ValueError:
            raise BrokerConfigError("INVALID_REQUEST",
                                    f"Node id must be an integer, but it is: {resource_name}") from None
        if node != self.config.kafkaBrokerId:
            raise BrokerConfigError("INVALID_REQUEST", f"Unexpected broker id, expected "
                                    f"{self.config.kafkaBrokerId}, but received {resource_name}")

    def configs(self, resource_name: str) -> dict[str, str]:
        return dict(self.default if resource_name == "" else self.own)

    def _path(self, resource_name: str) -> str:
        return f"{CONFIG_ROOT}/{DEFAULT_NODE if resource_name == '' else resource_name}"

    async def _read(self, resource_name: str) -> tuple[dict[str, str], int]:
        got = await self.store.get(self._path(resource_name))
        if got is None:
            return {}, -1
        configs = json.loads(got[0]).get("configs", {})
        return {str(k): str(v) for k, v in configs.items()}, got[1].version

    async def reload(self) -> None:
        """Re-read both resources (another broker of the cluster may have changed the default) and apply them."""
        self.default, _ = await self._read("")
        self.own, _ = await self._read(self.broker_id)
        self._apply()

    def _apply(self) -> None:
        merged = {**self.default, **self.own}
        self.config.set_dynamic_topic_defaults(
            {topic: merged[broker].strip() for broker, topic in TOPIC_OF.items() if broker in merged})

    async def alter(self, resource_name: str, change: Callable[[dict[str, str]], dict[str, str]],
                    validate_only: bool = False) -> None:
        """Replace a resource's dynamic configs by `change(current)` (which may raise BrokerConfigError), after
        Kafka's validation; compare-and-set, retried when another broker wrote the node in between."""
        self.check_resource(resource_name)
        while True:
            current, version = await self._read(resource_name)
            new = change(dict(current))
            validate(new, per_broker=resource_name != "")
            if validate_only:
                return
            try:
                await self.store.put(self._path(resource_name), json.dumps({"configs": new}).encode(),
                                     expected_version=version)
            except (BadVersionError, NodeExistsError):
                continue
            if resource_name == "":
                self.default = new
            else:
                self.own = new
            self._apply()
            return
