"""The embedded metadata store: sqlite with versioned compare-and-set (kop/storage/local/metadata.py)."""

from __future__ import annotations

import asyncio
import sqlite3

import pytest

from kop.storage.api import BadVersionError, NodeExistsError, NoSuchNodeError, NotEmptyError
from kop.storage.local.metadata import SqliteMetadataStore


def run(coro):
    return asyncio.run(coro)


def test_put_creates_at_version_0_and_each_put_adds_one(tmp_path):
    async def main():
        ms = SqliteMetadataStore(tmp_path)
        assert await ms.get("/a/b") is None
        assert (await ms.put("/a/b", b"v0")).version == 0
        assert (await ms.put("/a/b", b"v1")).version == 1
        value, stat = await ms.get("/a/b")
        assert value == b"v1" and stat.version == 1
        assert await ms.exists("/a/b") and await ms.exists("/a")  # the parent was created
        assert (await ms.get("/a"))[0] == b""
        await ms.close()

    run(main())


def test_compare_and_set(tmp_path):
    async def main():
        ms = SqliteMetadataStore(tmp_path)
        assert (await ms.put("/n", b"x", expected_version=-1)).version == 0
        with pytest.raises(NodeExistsError):
            await ms.put("/n", b"y", expected_version=-1)
        with pytest.raises(BadVersionError):
            await ms.put("/n", b"y", expected_version=3)
        with pytest.raises(BadVersionError):
            await ms.put("/absent", b"y", expected_version=0)
        assert (await ms.put("/n", b"y", expected_version=0)).version == 1
        assert (await ms.get("/n"))[0] == b"y"
        await ms.close()

    run(main())


def test_concurrent_writers_with_the_same_expected_version_one_wins(tmp_path):
    async def main():
        ms = SqliteMetadataStore(tmp_path)
        await ms.put("/n", b"0")
        results = await asyncio.gather(*(ms.put("/n", b"w%d" % i, expected_version=0) for i in range(10)),
                                       return_exceptions=True)
        assert sum(not isinstance(r, Exception) for r in results) == 1
        assert all(isinstance(r, BadVersionError) for r in results if isinstance(r, Exception))
        await ms.close()

    run(main())


def test_children_are_names_sorted(tmp_path):
    async def main():
        ms = SqliteMetadataStore(tmp_path)
        for p in ["/r/b", "/r/a", "/r/c/deep", "/other"]:
            await ms.put(p, b"")
        assert await ms.children("/r") == ["a", "b", "c"]
        assert await ms.children("/") == ["other", "r"]
        assert await ms.children("/r/a") == []
        assert await ms.children("/nothing") == []
        await ms.close()

    run(main())


def test_delete(tmp_path):
    async def main():
        ms = SqliteMetadataStore(tmp_path)
        await ms.put("/p/c", b"1")
        with pytest.raises(NotEmptyError):
            await ms.delete("/p")
        with pytest.raises(BadVersionError):
            await ms.delete("/p/c", expected_version=5)
        await ms.delete("/p/c", expected_version=0)
        with pytest.raises(NoSuchNodeError):
            await ms.delete("/p/c")
        await ms.put("/q/x/y", b"")
        await ms.delete_recursive("/q")
        assert not await ms.exists("/q") and not await ms.exists("/q/x/y")
        await ms.close()

    run(main())


def test_invalid_paths_are_rejected(tmp_path):
    async def main():
        ms = SqliteMetadataStore(tmp_path)
        for bad in ["relative", "/trailing/", "/double//slash"]:
            with pytest.raises(ValueError):
                await ms.put(bad, b"")
        await ms.close()

    run(main())


@pytest.mark.parametrize("durable", [True, False])
def test_values_survive_a_restart(tmp_path, durable):
    async def main():
        ms = SqliteMetadataStore(tmp_path, durable=durable)
        await ms.put("/k", b"\x00\x01binary\xff")
        await ms.put("/k", b"\x00\x02binary\xff")
        await ms.close()
        ms = SqliteMetadataStore(tmp_path, durable=durable)
        value, stat = await ms.get("/k")
        assert value == b"\x00\x02binary\xff" and stat.version == 1
        await ms.close()

    run(main())


def test_another_process_can_read_while_the_store_writes(tmp_path):
    """WAL mode: a read-only connection (the inspect tool) sees committed values without blocking writes."""

    async def main():
        ms = SqliteMetadataStore(tmp_path)
        await ms.put("/x", b"1")
        reader = sqlite3.connect(f"file:{tmp_path / 'metadata.db'}?mode=ro", uri=True)
        assert reader.execute("SELECT value FROM nodes WHERE path='/x'").fetchone()[0] == b"1"
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM nodes").fetchone()  # hold a read snapshot open
        await ms.put("/x", b"2")  # the writer is not blocked by it
        reader.execute("COMMIT")
        assert reader.execute("SELECT value FROM nodes WHERE path='/x'").fetchone()[0] == b"2"
        reader.close()
        await ms.close()

    run(main())
