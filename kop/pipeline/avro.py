"""`kop pipeline stream --value-format avro`: record values written by Confluent's Avro serializer, decoded by
Spark's `from_avro` with the schemas of a Confluent-compatible schema registry (ours: the broker's admin URL).

A Confluent-serialized value is `0x00` (magic), the writer schema's registry id (big-endian int32), then the
Avro binary body. The job never decodes in Python: the prefix is split off with Spark column functions
(`substring`, `conv(hex(...))`) and the body decoded with spark-avro's `from_avro` inside the JVM, so an
Avro topic costs what a JSON topic costs. Only the schema look-ups happen in Python, on the driver:

* At start, for each input topic, the latest version of subject `<topic>-value` (TopicNameStrategy), with
  `GET {registry}/subjects/<topic>-value/versions/latest`. That schema is the topic's *reader* schema for the
  job's whole run; it must be an Avro record with an integer (int or long, optionally nullable)
  `--amount-field`; the `--key-field` may be absent from it (the Kafka record key is used then, as in the
  JSON path) and is otherwise a string or an integer. Anything else stops the job before Spark starts
  (exit 2), as does a registry that cannot be reached or has no such subject.
* Records whose id is the latest's are decoded with it. Records written with another id (an older version,
  or one registered while the job runs) are decoded with *that* id's schema as the writer schema and
  resolved to the reader schema by Avro's schema resolution (`from_avro`'s `avroSchema` option): a field
  the writer lacks takes the reader's default, a field the reader lacks is skipped, int widens to long.
  The writer schemas are fetched once per id, with `GET {registry}/schemas/ids/<id>`, the first time a
  micro-batch meets the id: the batch is then aggregated a second time with the new decoder (ids are
  immutable in a registry, so this is the only extra pass an id ever costs). A registry that cannot be
  reached then fails the query (exit status 1) rather than miscount: the restarted job re-runs the batch.
* A record that cannot be decoded is not dropped and does not stop the job: it counts as a record of its
  (Kafka) key with `invalid` = 1 and no amount, exactly as a JSON value that does not parse. That covers a
  value without the Confluent prefix, an id the registry does not know (404) or that is not an Avro schema
  (or has schema references, which the job does not resolve), a body that does not decode, and a writer schema that Avro resolution cannot map to the reader schema
  (`from_avro` runs in PERMISSIVE mode). So `records` still counts every input record once and the
  checksums still prove exactly-once; the `invalid` column tells how many amounts are missing.

Determinism (the exactly-once argument of kop.pipeline.stream): a re-run batch decodes with the same writer
schemas (an id always names the same schema) and, within one run of the job, the same reader schema. A
batch re-run after a restart uses the latest schema *at that restart*; the rows it produces differ only if
the reader schema changed in a way that changes the key or amount of old records (a different default of
the amount field, for instance), which a compatible evolution of these two fields does not do.

Credentials, never printed: the registry URL may carry basic-auth ones (`http://user:secret@host:port`), sent
as `Authorization: Basic`, as Confluent's registry takes them; or the job sends a Bearer token
(`--schema-registry-token`, else the environment variable KOP_SCHEMA_REGISTRY_TOKEN, which keeps it out of the
process list), which is what KoP's registry takes when the broker's admin REST has `authenticationEnabled`
(Pulsar JWTs only, kop/admin/auth.py). One request carries one Authorization header, so giving both is refused.
A registry that answers 401 or 403 stops the job with a message that says whether a token was sent.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kop.pipeline.kafka_meta import PipelineError

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

log = logging.getLogger("kop.pipeline.avro")

REGISTRY_TIMEOUT_S = 30.0
TOKEN_ENV = "KOP_SCHEMA_REGISTRY_TOKEN"
_INTEGERS = ("int", "long")
_KEY_TYPES = ("string", "int", "long")


class RegistryClient:
    """The two look-ups the job needs from a Confluent-compatible schema registry REST API (urllib, sync)."""

    def __init__(self, url: str, timeout: float = REGISTRY_TIMEOUT_S, token: str | None = None) -> None:
        """`token`: a Bearer token; None reads the environment variable KOP_SCHEMA_REGISTRY_TOKEN (empty: none)."""
        self.base_url, self.auth_header = split_registry_url(url)
        self.timeout = timeout
        token = (os.environ.get(TOKEN_ENV, "") if token is None else token).strip()
        self.sends_token = bool(token)
        if token:
            if self.auth_header:
                raise PipelineError(f"the schema registry gets either basic-auth credentials (the user info of "
                                    f"--schema-registry) or a Bearer token (--schema-registry-token or {TOKEN_ENV}), "
                                    f"not both")
            self.auth_header = f"Bearer {token}"

    def _get(self, path: str) -> Any | None:
        """GET a JSON document; None on 404 (no such subject, version or id), PipelineError otherwise."""
        url = self.base_url + path
        req = urllib.request.Request(url, headers={"Accept": "application/vnd.schemaregistry.v1+json, application/json"})
        if self.auth_header:
            req.add_header("Authorization", self.auth_header)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None
            if e.code in (401, 403):
                if self.sends_token:
                    hint = "the Bearer token was refused (expired, signed with another key, or a role without access)"
                elif self.auth_header:
                    hint = "the basic-auth credentials of the URL were refused"
                else:
                    hint = (f"it needs credentials: a Bearer token (--schema-registry-token, or the environment "
                            f"variable {TOKEN_ENV}) or basic auth in the URL (http://USER:PASSWORD@HOST:PORT)")
                raise PipelineError(f"schema registry: GET {url} answered {e.code} ({_error_message(e)}): "
                                    f"{hint}") from None
            raise PipelineError(f"schema registry: GET {url} answered {e.code}: {_error_message(e)}") from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise PipelineError(f"schema registry at {self.base_url} cannot be reached: {reason}") from None
        except ValueError as e:
            raise PipelineError(f"schema registry: GET {url} did not answer JSON: {e}") from None

    def latest(self, subject: str) -> RegisteredSchema:
        quoted = urllib.parse.quote(subject, safe="")
        doc = self._get(f"/subjects/{quoted}/versions/latest")
        if doc is None:
            raise PipelineError(f"schema registry at {self.base_url} has no subject {subject!r}: register the "
                                f"topic's value schema first (or use --value-format json)")
        try:
            return RegisteredSchema(int(doc["id"]), str(doc["schema"]), str(doc.get("schemaType") or "AVRO"),
                                    subject, int(doc.get("version", 0)), bool(doc.get("references")))
        except (KeyError, TypeError, ValueError) as e:
            raise PipelineError(f"schema registry: unexpected answer for subject {subject!r}: {doc!r:.300}") from e

    def schema_by_id(self, schema_id: int) -> RegisteredSchema | None:
        """The schema with this global id; None when the registry does not know the id."""
        doc = self._get(f"/schemas/ids/{schema_id}")
        if doc is None:
            return None
        try:
            return RegisteredSchema(schema_id, str(doc["schema"]), str(doc.get("schemaType") or "AVRO"),
                                    references=bool(doc.get("references")))
        except (KeyError, TypeError) as e:
            raise PipelineError(f"schema registry: unexpected answer for id {schema_id}: {doc!r:.300}") from e


@dataclass(frozen=True, slots=True)
class RegisteredSchema:
    id: int
    schema: str  # the definition text (Avro: the schema JSON)
    schema_type: str = "AVRO"
    subject: str | None = None
    version: int = 0
    references: bool = False  # names types of other subjects: from_avro needs one self-contained schema


def split_registry_url(url: str) -> tuple[str, str | None]:
    """(the URL without user info or trailing slash, a Basic Authorization header or None)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise PipelineError(f"--schema-registry {redact(url)!r}: expected http(s)://[user:password@]host[:port][/path]")
    auth = None
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, netloc = netloc.rpartition("@")
        user, _, password = userinfo.partition(":")
        token = f"{urllib.parse.unquote(user)}:{urllib.parse.unquote(password)}".encode()
        auth = "Basic " + base64.b64encode(token).decode("ascii")
    base = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))
    return base, auth


def redact(url: str) -> str:
    """The URL with any password replaced by ***, for messages."""
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit((parts.scheme, f"{parts.username}:***@{netloc}", parts.path, parts.query, ""))


def _error_message(e: urllib.error.HTTPError) -> str:
    try:
        body = json.loads(e.read())
        if isinstance(body, dict):  # Confluent's {"error_code", "message"}; the admin REST's {"reason"}
            return str(body.get("message") or body.get("reason") or body)
        return str(body)
    except (ValueError, OSError):
        return str(e.reason)


def _avro_type_names(t: Any) -> list[Any]:
    """The branch type names of an Avro field type: "long" -> ["long"], ["null", "long"] -> ["null", "long"]."""
    branches = t if isinstance(t, list) else [t]
    # A logical type (timestamp-millis on a long, ...) is not a plain integer to Spark: named apart.
    return [(f"{b.get('type')}/{b['logicalType']}" if "logicalType" in b else b.get("type")) if isinstance(b, dict)
            else b for b in branches]


def check_reader_schema(schema: RegisteredSchema, key_field: str, amount_field: str) -> bool:
    """Refuse a latest schema the job cannot aggregate (PipelineError); True when it has the key field."""
    where = f"the latest schema of subject {schema.subject!r} (id {schema.id})"
    if schema.schema_type.upper() != "AVRO":
        raise PipelineError(f"{where} is {schema.schema_type}, not AVRO: use --value-format json for JSON values")
    if schema.references:
        raise PipelineError(f"{where} has schema references, which the job does not resolve: from_avro needs "
                            f"one self-contained schema")
    try:
        doc = json.loads(schema.schema)
    except ValueError as e:
        raise PipelineError(f"{where} is not JSON: {e}") from None
    if not isinstance(doc, dict) or doc.get("type") != "record":
        raise PipelineError(f"{where} is not an Avro record: the job sums a record's --amount-field")
    fields = {str(f.get("name")): f.get("type") for f in doc.get("fields", []) if isinstance(f, dict)}
    if amount_field not in fields:
        raise PipelineError(f"{where} has no field {amount_field!r} (--amount-field); fields: {sorted(fields)}")
    amount_types = [t for t in _avro_type_names(fields[amount_field]) if t != "null"]
    if not amount_types or any(t not in _INTEGERS for t in amount_types):
        raise PipelineError(f"{where}: field {amount_field!r} is {fields[amount_field]!r}, not an int or long")
    if key_field not in fields:
        return False
    key_types = [t for t in _avro_type_names(fields[key_field]) if t != "null"]
    if not key_types or any(t not in _KEY_TYPES for t in key_types):
        raise PipelineError(f"{where}: field {key_field!r} is {fields[key_field]!r}, not a string or an integer")
    return True


@dataclass
class TopicReader:
    topic: str
    latest: RegisteredSchema
    has_key_field: bool


@dataclass
class AvroValues:
    """The job's decoding state: each topic's reader schema (latest at start) and the writer schemas by id.

    `writers[id]` is the schema text, or None for an id the registry does not know or that is not Avro
    (its records are counted as invalid; the id is not asked for again)."""

    registry: RegistryClient
    readers: list[TopicReader]
    key_field: str
    amount_field: str
    writers: dict[int, str | None] = field(default_factory=dict)

    @classmethod
    def fetch(cls, registry_url: str, topics: list[str], key_field: str, amount_field: str,
              token: str | None = None) -> AvroValues:
        """Ask the registry for each topic's latest `<topic>-value` schema and check it (PipelineError).
        `token`: RegistryClient's (None: the environment's KOP_SCHEMA_REGISTRY_TOKEN, if any)."""
        registry = RegistryClient(registry_url, token=token)
        readers = []
        writers: dict[int, str | None] = {}
        for topic in topics:
            latest = registry.latest(f"{topic}-value")
            readers.append(TopicReader(topic, latest, check_reader_schema(latest, key_field, amount_field)))
            writers[latest.id] = latest.schema
            log.info("topic %s: reader schema = subject %s version %d (id %d)", topic, latest.subject,
                     latest.version, latest.id)
        return cls(registry, readers, key_field, amount_field, writers)

    def learn(self, ids: list[int]) -> bool:
        """Fetch the schemas of ids met for the first time. True when at least one of them decodes now."""
        new = False
        for schema_id in sorted(set(ids) - set(self.writers)):
            found = self.registry.schema_by_id(schema_id)
            why = None
            if found is None:
                why = "unknown to the registry"
            elif found.schema_type.upper() != "AVRO":
                why = f"a {found.schema_type} schema"
            elif found.references:
                why = "an Avro schema with references"
            if found is None or why is not None:
                log.warning("schema id %d is %s: its records are counted as invalid", schema_id, why)
                self.writers[schema_id] = None
            else:
                log.info("schema id %d: fetched from the registry (writer schema)", schema_id)
                self.writers[schema_id] = found.schema
                new = True
        return new

    def events(self, df: DataFrame) -> DataFrame:
        """Kafka source rows -> (key, amount, topic, partition, offset, timestamp, unknown_id), in the JVM.

        key: the reader schema's key field, else the Kafka key; amount: the amount field as long, null when
        the value could not be decoded; unknown_id: the prefix's id when no schema was fetched for it yet."""
        from pyspark.sql import functions as F
        from pyspark.sql.avro.functions import from_avro

        value = F.col("value")
        prefixed = (F.length(value) >= 5) & (F.substring(value, 1, 1) == F.lit(bytearray(b"\x00")))
        schema_id = F.conv(F.hex(F.substring(value, 2, 4)), 16, 10).cast("long")
        body = F.expr("substring(value, 6)")
        # One column per topic: CASE over the writer ids of from_avro(body, writer, reader = the topic's
        # latest), all of the reader schema's Catalyst type; null for other topics' records. A second
        # projection takes the two fields out of them, so each record is decoded once (Spark does not merge
        # projections where that would evaluate a non-trivial expression twice).
        records: list[str] = []
        keys: list[Column] = []
        amounts: list[Column] = []
        first = df
        for i, reader in enumerate(self.readers):
            options = {"mode": "PERMISSIVE", "avroSchema": reader.latest.schema}
            record: Column | None = None
            for sid, writer in sorted(self.writers.items()):
                if writer is None:
                    continue
                cond = prefixed & (F.col("topic") == F.lit(reader.topic)) & (schema_id == F.lit(sid))
                decoded = from_avro(body, writer, options)
                record = F.when(cond, decoded) if record is None else record.when(cond, decoded)
            if record is None:
                continue
            name = f"_record_{i}"
            first = first.withColumn(name, record)
            records.append(name)
            if reader.has_key_field:
                keys.append(F.col(name)[self.key_field].cast("string"))
            amounts.append(F.col(name)[self.amount_field].cast("long"))
        known = list(self.writers)
        unknown = prefixed & ~schema_id.isin(known) if known else prefixed
        first = first.withColumn("unknown_id", F.when(unknown, schema_id))
        return first.select(
            F.coalesce(*keys, F.col("key").cast("string")).alias("key"),
            (F.coalesce(*amounts) if amounts else F.lit(None).cast("long")).alias("amount"),
            "topic", "partition", "offset", "timestamp", "unknown_id",
        )
