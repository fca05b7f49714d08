"""Pulsar's own Java admin client (`pulsar-client-admin`, the reference's version) against our admin REST and against Apache Pulsar
standalone, the same script on both, the answers compared (issue 13's admin "done when").

The script: createPartitionedTopic (and its 409 the second time), partitioned metadata (of the topic and of its
partition), the namespace's topic list (holding the partition, not the base name), subscriptions created at
earliest (409 the second time) and listed on the partition and on the topic, topic stats with per-subscription
msgBacklog / unackedMessages / consumers, skip, peek (values, keys, properties, event times, sequence ids, broker
entry indexes), reset cursor by message id and by publish time, expire, skip-all (clear backlog), the 404 of an
unknown subscription, what Pulsar refuses on a partitioned topic's base name, and unsubscribe.

What legitimately differs is normalised before comparing: message ids become the message's ordinal (ledger ids
are the brokers' own), publish times are compared with each broker's own (read back by a reader), producer names
and sequence ids not at all (the stored Kafka batch keeps neither the Pulsar producer's name nor its sequence
ids, kop/pulsar/convert.py, so a peek on ours has none), event times only as "none, or the publish time" (a Kafka
record always has a timestamp, which ours hands out as event time too; the script sets no event time, so that
the publish time - the Kafka timestamp on ours - is the same notion on both brokers for reset-by-time and
expire), bytes are not compared (Pulsar stores Pulsar entries,
we store Kafka batches). PIP-415's getMessageIdByIndex was not in Pulsar 4.0's admin client nor broker (it came
later), so it is checked on our broker only, against the peeked messages' broker entry indexes.

Runs on the `pulsar` target (the session's Apache Pulsar standalone) and starts one broker of ours beside it.
"""

from __future__ import annotations

import json
import time
import urllib.request
import uuid
from typing import Any

import pulsar
import pytest

from tests.e2e.conftest import Target
from tests.support.pulsar_java import PulsarJava

PULSAR_SIDE_TARGETS = ("pulsar",)
NAMESPACE = "public/default"
RECEIVE_MS = 30_000
N = 6


def produce(service_url: str, topic: str) -> list[tuple[tuple[int, int], int]]:
    """N unbatched messages; [((ledger, entry), publish time)] read back by a reader."""
    client = pulsar.Client(service_url, operation_timeout_seconds=60,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    try:
        p = client.create_producer(topic, batching_enabled=False)
        for i in range(N):
            # reset-by-time needs distinct publish times (milliseconds, set by the client): two sends in one
            # millisecond made the reset land one message earlier on whichever broker saw the tie, as Pulsar's
            # own rule (first message published at or after the time) says it should
            if i:
                time.sleep(0.005)
            p.send(f"v-{i}".encode(), properties={"idx": str(i)}, partition_key=f"k-{i % 2}", sequence_id=i)
        p.close()
        r = client.create_reader(topic, pulsar.MessageId.earliest)
        got = [r.read_next(RECEIVE_MS) for _ in range(N)]
        r.close()
        times = [m.publish_timestamp() for m in got]
        assert times == sorted(set(times)), times
        return [((m.message_id().ledger_id(), m.message_id().entry_id()), m.publish_timestamp()) for m in got]
    finally:
        client.close()


def run_script(service_url: str, admin_url: str, topic: str) -> dict[str, Any]:
    java = PulsarJava(service_url, admin_url)
    part = f"{topic}-partition-0"
    first = java.run(
        f"create-partitioned-topic {topic} 1",
        f"try create-partitioned-topic {topic} 1",
        f"partitioned-metadata {topic}",
        f"partitioned-metadata {topic}-partition-0",
        f"topics {NAMESPACE}",
    )
    msgs = produce(service_url, topic)
    order = {pos: i for i, (pos, _) in enumerate(msgs)}
    (l1, e1), _ = msgs[1]
    ts3 = msgs[3][1]
    names = ["create", "create-again", "subs-part", "subs-topic", "stats0", "skip", "stats-skip", "peek",
             "reset-id", "stats-id", "reset-time", "stats-time", "expire", "stats-expire", "skip-all",
             "stats-all", "skip-unknown", "skip-base", "peek-base", "unsubscribe", "subs-after"]
    answers = java.run(
        f"create-subscription {part} adm earliest",
        f"try create-subscription {part} adm earliest",
        f"subscriptions {part}",
        f"subscriptions {topic}",
        f"stats {part}",
        f"skip {part} adm 2",
        f"stats {part}",
        f"peek {part} adm 2",
        f"reset-cursor-id {part} adm {l1} {e1}",
        f"stats {part}",
        f"reset-cursor-time {part} adm {ts3}",
        f"stats {part}",
        f"expire {part} adm 3600",
        f"stats {part}",
        f"skip-all {part} adm",
        f"stats {part}",
        f"try skip {part} nope 1",
        f"try skip {topic} adm 1",
        f"try peek {topic} adm 1",
        f"unsubscribe {part} adm",
        f"subscriptions {part}",
    )
    out: dict[str, Any] = {"created": first[0], "created-again": first[1], "partitions": first[2],
                           "partition-of-partition": first[3],
                           # the namespace is shared with other tests on Apache Pulsar: ours must be listed
                           "listed": part in first[4] and topic not in first[4]}
    for name, answer in zip(names, answers, strict=True):
        if name.startswith("stats"):
            sub = answer["subscriptions"]["adm"]
            answer = {"msgInCounter": answer["msgInCounter"], "msgBacklog": sub["msgBacklog"],
                      "unackedMessages": sub["unackedMessages"], "consumers": len(sub.get("consumers") or [])}
        elif name == "peek":
            normalised = []
            for m in answer:
                ledger, entry = (int(x) for x in m["id"].split(":")[:2])
                i = order[(ledger, entry)]
                assert m["publishTime"] == msgs[i][1], (m, msgs[i])
                assert m["eventTime"] in (0, msgs[i][1]), m
                normalised.append({**m, "id": i, "publishTime": "same", "producerName": "not compared",
                                   "sequenceId": "not compared", "eventTime": "not compared"})
            answer = normalised
        out[name] = answer
    return out


def test_java_admin_answers_match_apache_pulsar(target: Target, pulsar_broker, request: pytest.FixtureRequest,
                                                tmp_path_factory: pytest.TempPathFactory) -> None:
    topic = f"persistent://{NAMESPACE}/adm-diff-{uuid.uuid4().hex[:8]}"
    theirs = run_script(pulsar_broker.service_url, pulsar_broker.admin_url, topic)
    ours_target = Target("kop", request, tmp_path_factory)
    try:
        kop = ours_target.pulsar_broker()
        ours = run_script(kop.service_url, kop.admin_url, topic)
        # PIP-415 on ours: the index of each peeked message gives back its entry
        for m in ours["peek"]:
            part = urllib.request.quote(f"{topic.rsplit('/', 1)[1]}-partition-0", safe="")
            url = f"{kop.admin_url}/admin/v2/persistent/{NAMESPACE}/{part}/getMessageIdByIndex?index={m['index']}"
            with urllib.request.urlopen(url, timeout=60) as resp:
                got = json.loads(resp.read())
            assert got["partitionIndex"] == 0 and got["ledgerId"] >= 0
    finally:
        ours_target.close()
    assert ours == theirs, json.dumps({"ours": ours, "theirs": theirs}, indent=1)
    # and the answers are the ones Pulsar documents (so a broken Pulsar run would not pass either)
    assert theirs["partitions"] == "1" or theirs["partitions"] == 1
    assert theirs["stats0"]["msgBacklog"] == N and theirs["stats-skip"]["msgBacklog"] == N - 2
    assert [m["value"] for m in theirs["peek"]] == ["v-2", "v-3"]
    assert theirs["stats-id"]["msgBacklog"] == N - 1 and theirs["stats-time"]["msgBacklog"] == N - 3
    assert theirs["stats-all"]["msgBacklog"] == 0 and theirs["subs-after"] == []
