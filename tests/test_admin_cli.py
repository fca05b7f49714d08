"""kop-admin without a broker: topic-name forms, argument errors (exit 2), an unreachable server (exit 1),
and the table renderings. The answers against a live broker are checked in tests/e2e/test_admin.py."""

from __future__ import annotations

import argparse

import pytest

from kop.admin.cli import main, namespace_path, show_internal_stats, show_message_id, topic_path


@pytest.mark.parametrize("name,path", [
    ("orders", "/admin/v2/persistent/public/default/orders"),
    ("orders-partition-3", "/admin/v2/persistent/public/default/orders-partition-3"),
    ("t1/ns1/orders", "/admin/v2/persistent/t1/ns1/orders"),
    ("persistent://t1/ns1/orders-partition-0", "/admin/v2/persistent/t1/ns1/orders-partition-0"),
    ("non-persistent://t1/ns1/x", "/admin/v2/non-persistent/t1/ns1/x"),
    ("persistent://t/n/a b", "/admin/v2/persistent/t/n/a%20b"),
])
def test_topic_names(name, path):
    assert topic_path(name) == path


@pytest.mark.parametrize("bad", ["a/b", "a/b/c/d", "persistent://a/b", "http://a/b/c", "persistent://a//c"])
def test_bad_topic_names(bad):
    with pytest.raises(argparse.ArgumentTypeError):
        topic_path(bad)


def test_namespaces():
    assert namespace_path("public/default") == "public/default"
    with pytest.raises(argparse.ArgumentTypeError):
        namespace_path("public")


@pytest.mark.parametrize("argv", [
    [],
    ["topics"],
    ["topics", "get-message-id-by-index", "orders-partition-0"],  # --index is required
    ["topics", "get-message-id-by-index", "--index", "one", "orders-partition-0"],
    ["topics", "get-index-by-message-id", "-l", "1", "orders-partition-0"],  # --entry is required
    ["topics", "list", "nonamespace"],
    ["topics", "stats", "a/b/c/d"],
    ["topics", "frobnicate"],
])
def test_bad_arguments_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    assert "usage:" in capsys.readouterr().err


def test_unreachable_server_exits_1_with_the_address(capsys):
    from tests.support.net import free_port

    url = f"http://127.0.0.1:{free_port()}"
    assert main(["--admin-url", url, "tenants", "list"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("kop-admin: cannot reach the admin service at " + url)


def test_json_and_admin_url_are_accepted_after_the_command(capsys):
    from tests.support.net import free_port

    url = f"http://127.0.0.1:{free_port()}"
    assert main(["topics", "list", "public/default", "--json", "--admin-url", url]) == 1
    assert url in capsys.readouterr().err


def test_tables():
    assert show_message_id({"ledgerId": 7, "entryId": 3, "partitionIndex": 0}).splitlines() == [
        "ledgerId        7", "entryId         3", "partitionIndex  0"]
    assert "MessageId.earliest" in show_message_id({"ledgerId": -1, "entryId": -1, "partitionIndex": -1})
    out = show_internal_stats({
        "numberOfEntries": 4, "lastConfirmedEntry": "2:0", "currentIndex": 9,
        "ledgers": [{"ledgerId": 1, "entries": 3, "size": 300, "timestamp": 5}, {"ledgerId": 2, "entries": 1,
                                                                                   "size": 90, "timestamp": 0}],
        "cursors": {"g": {"markDeletePosition": "1:2", "readPosition": "2:0", "messagesConsumedCounter": 6,
                          "msgBacklog": 4}},
        "properties": {"index": "8"},
    })
    assert "numberOfEntries     4" in out and "currentIndex        9" in out
    assert any(line.split() == ["1", "3", "300", "5"] for line in out.splitlines())
    assert any(line.split() == ["2", "1", "90", "-"] for line in out.splitlines())  # the open ledger
    assert any(line.split() == ["g", "1:2", "2:0", "6", "4"] for line in out.splitlines())
