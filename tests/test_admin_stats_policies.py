"""What a topic's stats say of the policies that apply to it (kop/admin/views.py `_policy_stats`), as Apache Pulsar's
TopicStats says it: `backlogQuotaLimitSize` / `backlogQuotaLimitTime` (-1: no quota of that type) and
`deduplicationStatus` ("Enabled" / "Disabled"), resolved topic policy > namespace policy > broker key.

Ours only: the e2e module tests/e2e/test_pulsar_admin_cli.py checks the defaults on both brokers through
pulsar-admin, but Apache Pulsar 4.0's stats do not always follow a namespace's message_age quota change (seen:
`topics get-backlog-quotas -ap` shows the new limit while `topics stats` keeps -1), so the changes are checked
here, against our broker's REST.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.admin import create_partitioned_topic, ok, rest, topic_url
from tests.support.broker import KopBroker

NS = "public/default"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KopBroker]:
    b = KopBroker(tmp_path_factory.mktemp("kop-stats-policies"), {"backlogQuotaDefaultLimitSecond": 7200})
    b.start()
    yield b
    b.stop()


def _limits(stats: dict[str, Any]) -> tuple[int, int, str | None]:
    return stats["backlogQuotaLimitSize"], stats["backlogQuotaLimitTime"], stats.get("deduplicationStatus")


def test_stats_follow_the_policies(broker: KopBroker) -> None:
    admin = broker.admin_url
    local = f"sp-{uuid.uuid4().hex[:8]}"
    assert rest(admin, "PUT", f"persistent/{NS}/{local}")[0] == 204  # non-partitioned
    stats = topic_url(admin, local) + "/stats"
    assert _limits(ok(stats)) == (-1, 7200, "Disabled")  # the broker's keys

    quota = {"limitSize": 10 << 20, "limitTime": -1, "policy": "producer_exception"}
    assert rest(admin, "POST", f"namespaces/{NS}/backlogQuota?backlogQuotaType=destination_storage", quota)[0] == 204
    assert rest(admin, "POST", f"namespaces/{NS}/deduplication", True)[0] == 204
    try:
        assert _limits(ok(stats)) == (10 << 20, 7200, "Enabled")  # the namespace's, type by type
        age = {"limitSize": -1, "limitTime": 60, "policy": "producer_request_hold"}
        assert rest(admin, "POST", f"persistent/{NS}/{local}/backlogQuota?backlogQuotaType=message_age", age)[0] == 204
        assert rest(admin, "POST", f"persistent/{NS}/{local}/deduplicationEnabled", False)[0] == 204
        assert _limits(ok(stats)) == (10 << 20, 60, "Disabled")  # the topic's own over the namespace's

        parted = f"sp-{uuid.uuid4().hex[:8]}"
        create_partitioned_topic(admin, parted, 2)
        # partitioned-stats: the partitions' limits (not summed); de-duplication only per partition, as Pulsar's
        assert _limits(ok(topic_url(admin, parted) + "/partitioned-stats")) == (10 << 20, 7200, None)
    finally:
        rest(admin, "DELETE", f"namespaces/{NS}/backlogQuota?backlogQuotaType=destination_storage")
        rest(admin, "DELETE", f"namespaces/{NS}/deduplication")
