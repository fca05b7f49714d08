"""Damaged ledger files under a real broker (issue #12): a truncated sealed ledger, a flipped byte inside an
entry and garbage after the last entry. Each is logged once, shown by the admin internal stats and the
metrics, and reported by `kop storage check`; the damaged range answers KAFKA_STORAGE_ERROR (56) while the
intact offsets before and after it are served on the same connection, and produce keeps working. A torn
tail after a crash (not damage: never acknowledged) is dropped with one log line and counted.

Each record is produced as its own batch (one ledger entry), ten entries per ledger, so offset = entry
number across ledgers: ledger 0 of the partition holds offsets 0..9, ledger 1 10..19, ledger 2 20..29.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from kop.offset.inspect import inspect_managed_ledger
from kop.storage.local.ledgers import HEADER_SIZE, check_ledger_file
from tests.support.clients import create_topic
from tests.support.wire import Negotiated, batch_headers

KAFKA_STORAGE_ERROR = 56
TOPIC = "damaged"
LEDGER_NAME = f"public/default/persistent/{TOPIC}-partition-0"


def _produce(bootstrap: str, values: list[bytes]) -> list[int]:
    """Each value as its own batch with acks=all; returns the acknowledged offsets."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0, retries=0)
    try:
        offsets = []
        for v in values:
            offsets.append(producer.send(TOPIC, v, partition=0).get(timeout=30).offset)
        return offsets
    finally:
        producer.close()


def _offsets(p) -> list[int]:
    out = []
    for h in batch_headers(p.records):
        out.extend(range(h["base_offset"], h["base_offset"] + h["last_offset_delta"] + 1))
    return out


def _ledgers(data_dir) -> list[int]:
    view = inspect_managed_ledger(data_dir, LEDGER_NAME)
    assert view is not None
    return [lv.ledger_id for lv in view.ledgers if lv.entries]


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def _metric(text: str, name: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and not line.startswith("#"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def _storage_check(data_dir) -> tuple[int, str]:
    r = subprocess.run([sys.executable, "-m", "kop.cli", "storage", "check", "--data-dir", str(data_dir)],
                       capture_output=True, text=True, timeout=120, env=dict(os.environ))
    return r.returncode, r.stdout + r.stderr


@pytest.fixture
def written(kop_broker):
    """A stopped broker whose partition holds offsets 0..29 in three sealed ledgers of ten entries."""
    broker = kop_broker(managedLedgerMaxEntriesPerLedger=10, managedLedgerMinLedgerRolloverTimeMinutes=0,
                        allowAutoTopicCreation="false")
    create_topic(broker.bootstrap, TOPIC, 1)
    assert _produce(broker.bootstrap, [b"v%02d" % i for i in range(30)]) == list(range(30))
    broker.stop()
    assert _storage_check(broker.data_dir)[0] == 0  # clean before the damage
    ledgers = _ledgers(broker.data_dir)
    assert len(ledgers) == 3
    return broker, ledgers


def _entry_bounds(path, entry: int) -> tuple[int, int]:
    chk = check_ledger_file(str(path))
    start = chk.starts[entry]
    stop = chk.starts[entry + 1] if entry + 1 < chk.entries else chk.end
    return start, stop


def _damage_log_lines(broker) -> list[str]:
    run = broker.log_path.read_text(errors="replace").rsplit("===== start #", 1)[-1]
    return [line for line in run.splitlines() if "damaged storage" in line]


def _assert_served(broker, damaged: list[int], kind: str, ledger_id: int) -> None:
    """Every offset but `damaged` is served, the damaged ones answer KAFKA_STORAGE_ERROR - all on one
    connection; then the log line, admin stats and metrics."""
    with Negotiated(broker.bootstrap) as c:
        served: list[int] = []
        offset = 0
        while offset < 30:
            p = c.fetch(TOPIC, 0, offset)
            if offset in damaged:
                assert p.error_code == KAFKA_STORAGE_ERROR, (offset, p.error_code)
                offset += 1
                continue
            assert p.error_code == 0, (offset, p.error_code)
            got = _offsets(p)
            assert got and got[0] == offset
            assert not set(got) & set(damaged)  # the intact entries before the damage, not past it
            served.extend(got)
            offset = got[-1] + 1
        assert served == [o for o in range(30) if o not in damaged]
        # Timestamp searches step over the damage instead of failing the request.
        assert c.list_offset(TOPIC, 0, 0)[:2] == (0, 0)
        assert c.list_offset(TOPIC, 0, -3)[0] == 0
        # Produce is not held up: the damage is in sealed history, the current ledger is new.
        assert c.produce(TOPIC, 0, _one_batch(b"after")).error_code == 0

    if damaged:
        lines = _damage_log_lines(broker)
        assert len(lines) == 1, lines
        assert f"ledger {ledger_id}" in lines[0] and f"offsets {damaged[0]}..{damaged[-1]}" in lines[0], lines
    admin = broker.admin_url
    status, body = _get(f"{admin}/admin/v2/persistent/public/default/{TOPIC}-partition-0/internalStats")
    assert status == 200, body
    found = json.loads(body)["storageDamage"]
    assert [(d["ledgerId"], d["kind"]) for d in found["ledgers"]] == [(ledger_id, kind)]
    if damaged:
        assert [(r["firstOffset"], r["lastOffset"]) for r in found["ranges"]] == [(damaged[0], damaged[-1])]
        assert found["damagedReads"] >= 1
    metrics = _get(f"{admin}/metrics")[1]
    assert _metric(metrics, f'kop_storage_damaged{{kind="{kind}"}}') == 1
    if damaged:
        assert _metric(metrics, "kop_storage_damaged_reads_total") >= 1
    assert "Traceback" not in broker.log_path.read_text(errors="replace").rsplit("===== start #", 1)[-1]


def _one_batch(value: bytes) -> bytes:
    from kop.protocol.records import build_batch

    return build_batch([(None, value)])


def test_truncated_sealed_ledger(written):
    broker, ledgers = written
    path = broker.data_dir / "ledgers" / f"{ledgers[0]}.log"
    os.truncate(path, path.stat().st_size - 5)  # entry 9 (offset 9) loses its last bytes
    code, out = _storage_check(broker.data_dir)
    assert code == 1, out
    assert f"ledger {ledgers[0]}: truncated: entries 9..9" in out and LEDGER_NAME in out and "offsets 9..9" in out
    broker.start()
    _assert_served(broker, [9], "truncated", ledgers[0])


def test_flipped_byte_inside_an_entry(written):
    broker, ledgers = written
    path = broker.data_dir / "ledgers" / f"{ledgers[1]}.log"
    start, stop = _entry_bounds(path, 4)  # offset 14
    with open(path, "r+b") as f:
        f.seek(stop - 3)  # inside the record batch, not its headers
        b = f.read(1)
        f.seek(stop - 3)
        f.write(bytes([b[0] ^ 0x40]))
    code, out = _storage_check(broker.data_dir)
    assert code == 1, out
    assert f"ledger {ledgers[1]}: checksum: entries 4..4, bytes {start}..{stop}" in out and "offsets 14..14" in out
    broker.start()
    _assert_served(broker, [14], "checksum", ledgers[1])


def test_garbage_after_the_last_entry(written):
    broker, ledgers = written
    path = broker.data_dir / "ledgers" / f"{ledgers[2]}.log"
    size = path.stat().st_size
    with open(path, "ab") as f:
        f.write(os.urandom(HEADER_SIZE + 7))
    code, out = _storage_check(broker.data_dir)
    assert code == 1, out
    assert f"ledger {ledgers[2]}: trailing-garbage: no entry (after the last one), bytes {size}..{size + 23}" in out
    broker.start()
    # No acknowledged offset lies in the garbage: every offset is served; the damage is still said.
    _assert_served(broker, [], "trailing-garbage", ledgers[2])
    run = broker.log_path.read_text(errors="replace").rsplit("===== start #", 1)[-1]
    assert sum(f"ledger {ledgers[2]}: trailing-garbage" in line for line in run.splitlines()) == 1


def test_refuse_start_policy(written):
    broker, ledgers = written
    path = broker.data_dir / "ledgers" / f"{ledgers[0]}.log"
    os.truncate(path, path.stat().st_size - 5)
    r = subprocess.run(broker.command() + ["--override", "localStoreDamagedLedgerPolicy=refuse-start"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stderr
    assert "kop: cannot start: damaged ledger files" in r.stderr and f"ledger {ledgers[0]}: truncated" in r.stderr


def test_truncated_last_ledger_keeps_numbering(written):
    """The issue's case: the partition's last ledger cut short. Its last entry cannot be read at open, so
    the offset counter comes from the stored index property: the next produce gets offset 30, not a
    reused one."""
    broker, ledgers = written
    path = broker.data_dir / "ledgers" / f"{ledgers[2]}.log"
    os.truncate(path, path.stat().st_size - 5)  # offset 29
    broker.start()
    with Negotiated(broker.bootstrap) as c:
        assert c.produce(TOPIC, 0, _one_batch(b"next")).base_offset == 30
        assert _offsets(c.fetch(TOPIC, 0, 20)) == list(range(20, 29))
        assert c.fetch(TOPIC, 0, 29).error_code == KAFKA_STORAGE_ERROR
        assert _offsets(c.fetch(TOPIC, 0, 30)) == [30]


def test_torn_tail_after_a_crash_is_logged_once_and_counted(kop_broker):
    broker = kop_broker(allowAutoTopicCreation="false")
    create_topic(broker.bootstrap, TOPIC, 1)
    assert _produce(broker.bootstrap, [b"v%02d" % i for i in range(5)]) == list(range(5))
    broker.kill()
    view = inspect_managed_ledger(broker.data_dir, LEDGER_NAME)
    current = view.ledgers[-1]
    assert current.current and not current.sealed
    with open(broker.data_dir / "ledgers" / f"{current.ledger_id}.log", "ab") as f:
        f.write(b"\x12\x34\x56\x78\x00\x00\x01\x00" + b"\x00" * 13)  # a frame header and a few bytes: torn
    broker.start()
    with Negotiated(broker.bootstrap) as c:
        assert _offsets(c.fetch(TOPIC, 0, 0)) == list(range(5))
        assert c.produce(TOPIC, 0, _one_batch(b"next")).base_offset == 5
    run = broker.log_path.read_text(errors="replace").rsplit("===== start #", 1)[-1]
    torn = [line for line in run.splitlines() if "torn tail" in line]
    assert len(torn) == 1, torn
    assert f"ledger {current.ledger_id}" in torn[0] and "21 bytes" in torn[0] and "after entry 4" in torn[0]
    metrics = _get(f"{broker.admin_url}/metrics")[1]
    assert _metric(metrics, 'kop_storage_recovery_steps_total{step="torn_tails"}') == 1
    assert _metric(metrics, 'kop_storage_recovery_steps_total{step="torn_bytes"}') == 21
    assert _metric(metrics, 'kop_storage_damaged{') == 0  # a torn tail is not damage
