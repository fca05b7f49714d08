"""Fuzzing the Pulsar port in CI: 20 000 seeded mutations of real Pulsar commands (every command type the handler
serves, built with kop.pulsar.codec; tests/fuzz_pulsar.py, on tests/fuzz.py's machinery) sent to a broker
subprocess, then the health check: alive, a pulsar-client producer/consumer round trip and a Kafka producer/consumer
round trip, and no frame left without an answer or a close (a hang). `make fuzz` runs 10^6.

Handler tracebacks in the broker log (a command that decoded but made a handler raise; the connection is closed)
are findings too: the test lists them and fails on any.
"""

from __future__ import annotations

from tests import fuzz
from tests.fuzz_pulsar import PULSAR

FRAMES = 20_000
SEED = 12


def test_mutated_pulsar_commands_neither_crash_nor_hang_the_broker(kop_broker) -> None:
    broker = kop_broker(**fuzz.BROKER_OVERRIDES)
    address = PULSAR.address(broker)
    stats = fuzz.run_frames(address, FRAMES, SEED, concurrency=16, target=PULSAR)
    assert stats.frames == FRAMES, stats
    assert broker.alive(), "the broker died while being fuzzed"
    assert stats.hangs == 0, f"frames neither answered nor closed within {fuzz.HANG_SECONDS}s: {stats.hang_examples}"
    # Both outcomes occur: the corpus and mutations reach the command handlers, not only the frame decoder.
    assert stats.answered > FRAMES // 20 and stats.closed > FRAMES // 2, stats
    PULSAR.health(address, broker.bootstrap)
    findings = fuzz.log_findings(broker.log_path)
    assert not findings, "handlers raised on fuzzed commands:\n" + "\n".join(findings[:20])
