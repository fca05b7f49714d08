"""Read-only look at an embedded data dir: managed-ledger infos and their ledger files.

Works offline and while a broker runs on the same directory: the sqlite database is opened read-only
(WAL readers never block the writer) and ledger files are only read, never locked. The current ledger's
entry count comes from scanning its frames (the info does not record it until the ledger is closed).

    python -m kop.offset.inspect DATA_DIR            # names of the managed ledgers
    python -m kop.offset.inspect DATA_DIR NAME       # one managed ledger as JSON
"""

from __future__ import annotations

import dataclasses
import json
import os
import sqlite3
import sys
from dataclasses import dataclass, field

from kop.managed_ledger.ledger import ML_ROOT
from kop.managed_ledger.protobuf import ManagedLedgerInfo
from kop.offset.interceptor import INDEX_PROPERTY
from kop.offset.retention import LOG_START_PROPERTY
from kop.offset.storage import LEDGERS_DIR, METADATA_FILE
from kop.storage.local.ledgers import read_index_file, scan_frames


@dataclass(slots=True)
class LedgerView:
    ledger_id: int
    entries: int | None  # from the info; for the current ledger, from scanning its file
    size: int | None
    timestamp: int | None  # ms, set when the ledger was closed
    current: bool = False
    on_disk: bool = False
    sealed: bool = False  # has its sidecar index (closed in the store)
    file_bytes: int = 0


@dataclass(slots=True)
class ManagedLedgerView:
    name: str
    version: int  # metadata-store version of the info
    ledgers: list[LedgerView] = field(default_factory=list)
    properties: dict[str, str] = field(default_factory=dict)

    @property
    def current_ledger_id(self) -> int | None:
        for lv in self.ledgers:
            if lv.current:
                return lv.ledger_id
        return None

    @property
    def index(self) -> int | None:
        """The "index" property: last durable offset as of the last info write (-1: none yet)."""
        value = self.properties.get(INDEX_PROPERTY)
        return None if value is None else int(value)

    @property
    def delete_records_offset(self) -> int | None:
        value = self.properties.get(LOG_START_PROPERTY)
        return None if value is None else int(value)

    @property
    def entries(self) -> int:
        return sum(lv.entries or 0 for lv in self.ledgers)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d.update(current_ledger_id=self.current_ledger_id, index=self.index, entries=self.entries)
        return d


def _connect(data_dir: str) -> sqlite3.Connection:
    path = os.path.join(data_dir, METADATA_FILE)
    if not os.path.exists(path):
        raise FileNotFoundError(path)
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True)


def list_managed_ledgers(data_dir: str | os.PathLike[str]) -> list[str]:
    """Names of the managed ledgers stored under data_dir."""
    db = _connect(os.fspath(data_dir))
    try:
        rows = db.execute(
            "SELECT path FROM nodes WHERE path LIKE ? AND length(value) > 0 ORDER BY path", (ML_ROOT + "/%",)
        ).fetchall()
    finally:
        db.close()
    names = [r[0][len(ML_ROOT) + 1 :] for r in rows]
    # A node with a value below another one is a cursor of that managed ledger, not a managed ledger.
    out: list[str] = []
    for n in names:
        if not any(n.startswith(m + "/") for m in out):
            out.append(n)
    return out


def inspect_managed_ledger(data_dir: str | os.PathLike[str], name: str) -> ManagedLedgerView | None:
    """The stored info of managed ledger `name` plus what its ledger files hold; None if it does not exist."""
    root = os.fspath(data_dir)
    db = _connect(root)
    try:
        row = db.execute("SELECT value, version FROM nodes WHERE path = ?", (f"{ML_ROOT}/{name}",)).fetchone()
    finally:
        db.close()
    if row is None or not row[0]:
        return None
    info = ManagedLedgerInfo.decode(bytes(row[0]))
    view = ManagedLedgerView(name, row[1], properties=dict(info.properties))
    ledger_dir = os.path.join(root, LEDGERS_DIR)
    for i, li in enumerate(info.ledgers):
        lv = LedgerView(li.ledger_id, li.entries, li.size, li.timestamp,
                        current=i == len(info.ledgers) - 1 and li.entries is None)
        log_path = os.path.join(ledger_dir, f"{li.ledger_id}.log")
        try:
            lv.file_bytes = os.path.getsize(log_path)
            lv.on_disk = True
        except FileNotFoundError:
            pass
        sealed = read_index_file(log_path[:-4] + ".idx")
        lv.sealed = sealed is not None
        if lv.on_disk and lv.entries is None:
            if sealed is not None:
                lv.entries, _, lv.size = sealed
            else:
                fd = os.open(log_path, os.O_RDONLY)
                try:
                    starts, _, payload, _ = scan_frames(fd)
                finally:
                    os.close(fd)
                lv.entries, lv.size = len(starts), payload
        view.ledgers.append(lv)
    return view


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or len(args) > 2:
        print(__doc__, file=sys.stderr)
        return 2
    if len(args) == 1:
        print(json.dumps(list_managed_ledgers(args[0]), indent=2))
        return 0
    view = inspect_managed_ledger(args[0], args[1])
    if view is None:
        print(f"no managed ledger {args[1]!r}", file=sys.stderr)
        return 1
    print(json.dumps(view.to_dict(), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
