"""Admin REST in cluster mode: a call about one partition made to a broker that does not own it answers
307 Temporary Redirect to the owner (Pulsar's validateTopicOwnership), Location = the owner's admin URL +
the same path and query; calls that are not about one partition are answered by any broker (partitioned stats gather each partition's
part from its owner).

Two `kop broker --config conf/broker.conf` processes share one ZooKeeper chroot and the 4 bookies of
tests/support/bookkeeper.py. Each partition's owner is read from Kafka Metadata (its leader), and every
partition is asked of both brokers: the owner answers 200, the other redirects, and a client that follows
the redirect (urllib, kop-admin) gets the owner's answer.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from tests.support.admin import kop_admin_json, ok, topic_url
from tests.support.bookkeeper import BookKeeperCluster, KopBookKeeperBroker
from tests.support.clients import create_topic, make_records, produce_kafka_python
from tests.support.cluster import eventually, metadata

BROKER_CONF = Path(__file__).resolve().parents[1] / "conf" / "broker.conf"
PARTITIONS = 6


class KopClusterBroker(KopBookKeeperBroker):
    """`kop broker --config conf/broker.conf` on this cluster (as in tests/test_cli_broker.py)."""

    def __init__(self, base_dir: Path, cluster: BookKeeperCluster, overrides: dict[str, object],
                 chroot: str) -> None:
        super().__init__(base_dir, cluster, overrides, chroot=chroot, config_file=BROKER_CONF)
        self.overrides.setdefault("kafkaAdvertisedListeners", f"PLAINTEXT://127.0.0.1:{self.port}")

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "kop.cli", "broker", "--config", str(self.config_file)]
        for k, v in self.overrides.items():
            cmd += ["--override", f"{k}={v}"]
        return cmd


def _get_no_redirect(url: str) -> tuple[int, dict[str, str], Any]:
    class _NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None

    try:
        with urllib.request.build_opener(_NoRedirect).open(url, timeout=60) as resp:
            status, headers, body = resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as e:
        status, headers, body = e.code, dict(e.headers), e.read()
    try:
        return status, headers, json.loads(body)
    except ValueError:
        return status, headers, body.decode(errors="replace")


def _follow(url: str) -> Any:
    """GET with urllib's default redirect handling (it repeats a GET at a 307's Location)."""
    with urllib.request.urlopen(url, timeout=60) as resp:
        assert resp.status == 200 and resp.url != url, (url, resp.status, resp.url)  # answered elsewhere
        return json.loads(resp.read())


def _settled_leaders(brokers: dict[int, KopClusterBroker], topic: str, bundles: int) -> dict[int, int]:
    """Each partition's leader, once both brokers' Metadata names the owner the bundle choice gives it with
    both brokers live. Why wait: the first broker owns every bundle until the second joins, then hands
    the second its share (loadBalancerEnabled); redirects are checked once that handover is over."""
    from kop.cluster.bundles import bundle_for, choose_owner

    want = {p: choose_owner(bundle_for("public", "default", topic, p, bundles), {1, 2}) for p in range(PARTITIONS)}

    def settled() -> bool:
        for b in brokers.values():
            md = metadata(b.bootstrap, [topic])
            if {p: md.leaders.get((topic, p), (-1, -1))[0] for p in range(PARTITIONS)} != want:
                return False
        return True

    eventually(f"both brokers name the settled owners of {topic}: {want}", settled)
    return want


def test_partition_calls_to_a_non_owner_redirect_to_the_owner(cluster, tmp_path):
    chroot = f"/kop-redirect-{uuid.uuid4().hex[:10]}"
    settings = {"offsetsTopicNumPartitions": 2, "defaultNumberOfNamespaceBundles": 8}
    brokers = {i: KopClusterBroker(tmp_path / f"b{i}", cluster, {**settings, "kafkaBrokerId": i}, chroot)
               for i in (1, 2)}
    try:
        for b in brokers.values():
            b.start()
        bootstrap = ",".join(b.bootstrap for b in brokers.values())
        admin = {i: b.admin_url for i, b in brokers.items()}
        topic = "redirected"
        create_topic(bootstrap, topic, PARTITIONS)
        leaders = _settled_leaders(brokers, topic, settings["defaultNumberOfNamespaceBundles"])
        records = make_records(60, PARTITIONS, base_ts=int(time.time() * 1000))
        produce_kafka_python(bootstrap, topic, records, "none")
        per_partition = 60 // PARTITIONS
        # Both brokers own some of the partitions (the bundle choice is a deterministic hash of the partition
        # name and the live broker ids: for this topic name it splits them), so both directions are tried.
        assert set(leaders.values()) == {1, 2}, leaders
        for p, owner in sorted(leaders.items()):
            other = 3 - owner
            base = topic_url("", f"{topic}-partition-{p}")  # the path, without a host
            for call in (f"{base}/stats?authoritative=false&trace=1",
                         f"{base}/internalStats",
                         f"{base}/getMessageIdByIndex?index=3"):
                status, headers, body = _get_no_redirect(admin[other] + call)
                assert status == 307, (p, call, status, body)
                assert headers["Location"] == admin[owner] + call  # same path and query, owner's host
                assert _get_no_redirect(admin[owner] + call)[0] == 200, (p, call)

            # A client that follows redirects (urllib here, as kop-admin) gets the owner's answer.
            stats = _follow(admin[other] + f"{base}/stats")
            assert stats["highWatermark"] == per_partition
            mid = _follow(admin[other] + f"{base}/getMessageIdByIndex?index=3")
            assert mid["partitionIndex"] == p
            back = _follow(admin[other] + f"{base}/getIndexByMessageId?ledgerId={mid['ledgerId']}"
                                     f"&entryId={mid['entryId']}")
            assert back["firstIndex"] <= 3 <= back["lastIndex"]
            assert kop_admin_json(admin[other], "topics", "stats",
                                  f"{topic}-partition-{p}")["highWatermark"] == per_partition

        # Calls that are not about one partition are answered by whichever broker is asked; partitioned
        # stats gather each partition's part from its owner, so both brokers give the whole topic.
        for i in (1, 2):
            assert ok(topic_url(admin[i], topic) + "/partitions") == {"partitions": PARTITIONS}
            whole = ok(topic_url(admin[i], topic) + "/partitioned-stats")
            assert whole["msgInCounter"] == 60
            assert {name: s["highWatermark"] for name, s in whole["partitions"].items()} == {
                f"persistent://public/default/{topic}-partition-{p}": per_partition for p in range(PARTITIONS)}
            internal = ok(topic_url(admin[i], topic) + "/partitioned-internalStats")
            assert len(internal["partitions"]) == PARTITIONS
            assert all(part["ledgers"] for part in internal["partitions"].values())
            assert f"persistent://public/default/{topic}-partition-0" in ok(
                f"{admin[i]}/admin/v2/persistent/public/default")
    finally:
        for b in brokers.values():
            b.stop()
        brokers[1].purge()
