"""kop.admin.views over a real BrokerService on the embedded storage (in-process, real files): the PIP-415
lookup where compaction left gaps, which a broker subprocess cannot be made to do on demand."""

from __future__ import annotations

from pathlib import Path

import pytest

from kop.admin import views
from kop.admin.views import AdminError
from kop.config import BrokerConfig
from kop.protocol.records import NewRecord, build_batch
from kop.server.service import BrokerService
from kop.server.storage import open_embedded_storage


def batch(*keys: bytes | None) -> bytes:
    return build_batch([NewRecord(k, b"v", (), 1_700_000_000_000) for k in keys])


async def _service(tmp: Path) -> BrokerService:
    config = BrokerConfig.load(overrides={"managedLedgerMinLedgerRolloverTimeMinutes": "0"})
    service = BrokerService(config, await open_embedded_storage(tmp, config))
    await service.topics.load()
    return service


async def test_message_id_by_index_across_compaction_gaps(tmp_path: Path) -> None:
    service = await _service(tmp_path)
    try:
        topic = await service.topics.create(service.topics.parse("compacted"), 1)
        plog = await service.topics.partition_log(topic, 0)
        # offsets: 0 a, 1 b | 2 a | 3 c, 4 c | 5 b | 6 (no key)
        for keys in ((b"a", b"b"), (b"a",), (b"c", b"c"), (b"b",), (None,)):
            await plog.append(batch(*keys), len(keys) - 1, 1_700_000_000_000)
        ref = views.resolve(service, "public", "default", "compacted-partition-0")
        before = [await views.message_id_by_index(service, ref, i) for i in range(7)]
        assert len({(m["ledgerId"], m["entryId"]) for m in before}) == 5
        await plog.compact(roll_current=True)
        # batch 0 lost both records (gap 0-1), batch 2 keeps offset 4, the keyless batch 6 is gone
        stored = [(lid, n) for lid, n in plog.ml.ledger_counts() if n]
        entries = [(lid, e) for lid, n in stored for e in range(n)]
        assert len(entries) == 3
        first, second, third = ({"ledgerId": lid, "entryId": e, "partitionIndex": 0} for lid, e in entries)
        assert plog.log_start_offset == 0  # compaction keeps the log start
        got = {i: await views.message_id_by_index(service, ref, i) for i in range(6)}
        assert got == {0: first, 1: first, 2: first, 3: second, 4: second, 5: third}
        with pytest.raises(AdminError) as e:
            await views.message_id_by_index(service, ref, 6)  # compacted away, nothing after it
        assert e.value.status == 404 and "compaction" in e.value.reason
        back = await views.index_by_message_id(service, ref, second["ledgerId"], second["entryId"])
        assert (back["index"], back["firstIndex"], back["lastIndex"], back["numMessages"]) == (4, 3, 4, 1)
        one = await views.index_by_message_id(service, ref, second["ledgerId"], second["entryId"], 0)
        assert one["index"] == 4  # the surviving record of offsets 3-4 is offset 4, at batch position 0
        with pytest.raises(AdminError) as e:
            await views.index_by_message_id(service, ref, second["ledgerId"], second["entryId"], 1)
        assert e.value.status == 404
    finally:
        await service.topics.close()
        await service.storage.close()


async def test_a_topic_created_by_another_broker_is_read_from_the_store_before_a_404(tmp_path: Path) -> None:
    """Cluster mode: a partitioned topic's call fanned out by the broker that just created the topic can reach a
    partition's owner before that owner's watch told it of the topic (CI met the 404 "...-partition-0 not
    found"). The owner reads the topic's record again before answering 404; in standalone mode there is no
    other broker, and an unknown topic is 404 at once."""
    service = await _service(tmp_path)
    try:
        name = service.topics.parse("made-elsewhere")
        topic = await service.topics.create(name, 3)
        del service.topics._topics[name.canonical], service.topics._by_id[topic.topic_id]  # the watch is late
        with pytest.raises(AdminError) as e:
            await views.resolve_fresh(service, "public", "default", "made-elsewhere-partition-2")
        assert e.value.status == 404  # standalone: nothing to read again

        class Ownership:  # cluster mode as the topic cache sees it: a namespace watch on each learned topic
            async def watch_namespace(self, namespace: str) -> None:
                return None

        service.topics.ownership = Ownership()  # type: ignore[assignment]
        ref = await views.resolve_fresh(service, "public", "default", "made-elsewhere-partition-2")
        assert ref.topic.partitions == 3 and ref.partition == 2
        with pytest.raises(AdminError) as e:
            await views.resolve_fresh(service, "public", "default", "made-elsewhere-partition-3")
        assert e.value.status == 404  # still 404 for a partition the stored topic does not have
    finally:
        service.topics.ownership = None
        await service.topics.close()
