"""`kop storage check --data-dir DIR` (kop/cli.py): exit status 0 on a clean store, 1 when an entry is
damaged, 2 without a ledger directory; a torn tail of an unsealed ledger (what a crash leaves, dropped by
recovery, never acknowledged) is a note, not damage. tests/test_storage_damage.py runs it on the damage a
real broker meets (truncated, flipped byte, trailing garbage) and checks the partition and offsets named."""

from __future__ import annotations

import asyncio
import subprocess
import sys

from kop.storage.local.ledgers import HEADER_SIZE, LocalLedgerStore


def _check(data_dir) -> tuple[int, str]:
    r = subprocess.run([sys.executable, "-m", "kop.cli", "storage", "check", "--data-dir", str(data_dir)],
                       capture_output=True, text=True, timeout=120)
    return r.returncode, r.stdout + r.stderr


def _write(ledgers_dir, sealed: int, unsealed: int) -> list[int]:
    async def main() -> list[int]:
        store = LocalLedgerStore(ledgers_dir, fsync="none")
        ids = []
        for n, seal in ((sealed, True), (unsealed, False)):
            lh = await store.create_ledger()
            for i in range(n):
                await lh.append(b"%03d" % i * 30)
            if seal:
                await lh.close()
            ids.append(lh.ledger_id)
        await store.close()
        return ids

    return asyncio.run(main())


def test_clean_store_exits_0_and_a_torn_tail_is_only_a_note(tmp_path):
    sealed, unsealed = _write(tmp_path / "ledgers", 5, 3)
    code, out = _check(tmp_path)
    assert code == 0, out
    assert "checked 2 ledger(s), 8 entries: 0 damaged" in out
    with open(tmp_path / "ledgers" / f"{unsealed}.log", "ab") as f:
        f.write(b"\x00" * 7)
    code, out = _check(tmp_path)
    assert code == 0, out
    assert f"ledger {unsealed}" in out and "7 bytes after entry 2" in out and "torn tail" in out


def test_every_damaged_entry_is_listed_and_exits_1(tmp_path):
    sealed, unsealed = _write(tmp_path / "ledgers", 5, 4)
    frame = HEADER_SIZE + 90
    for lid, entries in ((sealed, (1, 2)), (unsealed, (1,))):
        with open(tmp_path / "ledgers" / f"{lid}.log", "r+b") as f:
            for e in entries:
                f.seek(e * frame + HEADER_SIZE + 10)
                f.write(b"#")
    code, out = _check(tmp_path)
    assert code == 1, out
    # Consecutive damaged entries are one run; the unsealed ledger's damaged entry is followed by valid ones.
    assert f"ledger {sealed}: checksum: entries 1..2, bytes {frame}..{3 * frame}" in out
    assert f"ledger {unsealed}: checksum: entries 1..1, bytes {frame}..{2 * frame}" in out
    assert "2 damaged place(s)" in out


def test_no_ledger_directory_exits_2(tmp_path):
    code, out = _check(tmp_path / "nothing")
    assert code == 2 and "no ledger directory" in out
