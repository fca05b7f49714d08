"""Fuzzing in CI: 20 000 seeded mutations of real requests (every API and version served; tests/fuzz.py) sent to a
broker subprocess, then the health check: alive, ApiVersions and Metadata answered, a producer and a consumer
round-trip records, and no frame left without an answer or a close (a hang). `make fuzz` runs 10^6.

Handler tracebacks in the broker log (a request that decoded but made a handler raise; the broker logs it and
closes that connection) are findings too: the test lists them and fails on any not in KNOWN_FINDINGS.
"""

from __future__ import annotations

from tests import fuzz

FRAMES = 20_000
SEED = 12

# Findings of the fuzzer that belong to another part and are tracked there (the broker survives them: one
# connection is closed). Each entry is a substring of the log line.
KNOWN_FINDINGS: tuple[str, ...] = (
    # Metadata v10/v11 with a null topic name (a topic id lookup, which Kafka serves only from v12): the answer
    # cannot be encoded; Kafka answers INVALID_REQUEST. kop/kafka/apis/metadata.py.
    "cannot encode Metadata response",
)


def test_mutated_requests_neither_crash_nor_hang_the_broker(kop_broker) -> None:
    broker = kop_broker(**fuzz.BROKER_OVERRIDES)
    stats = fuzz.run_frames(broker.bootstrap, FRAMES, SEED, concurrency=16)
    assert stats.frames == FRAMES, stats
    assert broker.alive(), "the broker died while being fuzzed"
    assert stats.hangs == 0, f"frames neither answered nor closed within {fuzz.HANG_SECONDS}s: {stats.hang_examples}"
    # Both outcomes occur: the corpus and mutations reach the handlers, not only the header check.
    assert stats.answered > FRAMES // 20 and stats.closed > FRAMES // 2, stats
    fuzz.health_check(broker.bootstrap)
    findings = [f for f in fuzz.log_findings(broker.log_path) if not any(k in f for k in KNOWN_FINDINGS)]
    assert not findings, "handlers raised on fuzzed requests:\n" + "\n".join(findings[:20])
