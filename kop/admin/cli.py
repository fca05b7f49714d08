"""`kop-admin`: the admin REST from a shell, modeled on pulsar-admin.

    kop-admin [--admin-url URL] [--json] topics list public/default
    kop-admin topics stats persistent://public/default/orders-partition-0
    kop-admin topics internal-stats orders-partition-0
    kop-admin topics get-message-id-by-index --index 42 persistent://public/default/orders-partition-0
    kop-admin topics get-index-by-message-id --ledger 7 --entry 3 orders-partition-0
    kop-admin topics subscriptions orders
    kop-admin topics create-subscription -s audit -m earliest orders
    kop-admin topics reset-cursor -s audit -t 1h orders          (or -m 7:3 on one partition)
    kop-admin topics skip -s audit -n 10 orders-partition-0
    kop-admin topics expire-messages -s audit -t 1d orders
    kop-admin topics clear-backlog -s audit orders
    kop-admin topics peek-messages -s audit -n 3 orders-partition-0
    kop-admin topics unsubscribe -s audit [-f] orders
    kop-admin tenants list | get acme | create [-r roles] [-c clusters] acme | delete acme
    kop-admin namespaces list acme | create acme/orders | delete acme/orders | policies acme/orders

Readable tables by default, the server's JSON with --json. Topic names are Pulsar's: `persistent://t/ns/x`,
`t/ns/x`, or `x` (public/default), with `-partition-<i>` for one partition. Exit status: 0 done, 1 the
server refused (its reason is printed, e.g. an unknown topic) or could not be reached, 2 bad arguments.

It talks HTTP with the standard library (urllib): a CLI that runs once per command gains nothing from an
async client, and one dependency fewer keeps `kop-admin` usable wherever the broker package installs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any

DEFAULT_URL = os.environ.get("KOP_ADMIN_URL", "http://127.0.0.1:8080")


class CliError(Exception):
    """A failure to report on stderr with exit status 1."""


# ---------------------------------------------------------------------------------------------- HTTP


class AdminClient:
    def __init__(self, base_url: str, timeout: float = 30, token: str | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        # a Pulsar token for a broker with authenticationEnabled (kop/admin/auth.py)
        self.auth = {"Authorization": f"Bearer {token}"} if token else {}

    def get(self, path: str, **query: Any) -> Any:
        q = {k: v for k, v in query.items() if v is not None}
        url = self.base_url + path + (("?" + urllib.parse.urlencode(q)) if q else "")
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers=self.auth), timeout=self.timeout) as resp:
                body = resp.read()
        except urllib.error.HTTPError as e:
            raise CliError(f"{_reason(e.read())} (HTTP {e.code})") from None
        except urllib.error.URLError as e:
            raise CliError(f"cannot reach the admin service at {self.base_url}: {e.reason}") from None
        except OSError as e:
            raise CliError(f"cannot reach the admin service at {self.base_url}: {e}") from None
        try:
            return json.loads(body)
        except ValueError:
            return body.decode(errors="replace")

    def send(self, method: str, path: str, body: Any = None) -> tuple[dict[str, str], bytes]:
        """A PUT/POST/DELETE (or a GET of a raw body): the response headers and body."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base_url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json", **self.auth})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return dict(resp.headers), resp.read()
        except urllib.error.HTTPError as e:
            raise CliError(f"{_reason(e.read())} (HTTP {e.code})") from None
        except (urllib.error.URLError, OSError) as e:
            raise CliError(f"cannot reach the admin service at {self.base_url}: {getattr(e, 'reason', e)}") from None


def _reason(body: bytes) -> str:
    try:
        data = json.loads(body)
    except ValueError:
        return body.decode(errors="replace").strip() or "no reason given"
    if isinstance(data, dict) and "reason" in data:
        return str(data["reason"])
    return json.dumps(data)


# ---------------------------------------------------------------------------------------------- names


def topic_path(name: str) -> str:
    """`persistent://t/ns/x`, `t/ns/x` or `x` -> the admin v2 path of the topic."""
    domain = "persistent"
    rest = name
    if "://" in name:
        domain, rest = name.split("://", 1)
        if domain not in ("persistent", "non-persistent"):
            raise argparse.ArgumentTypeError(f"unknown topic domain {domain!r} in {name!r} (use persistent://)")
    parts = rest.split("/")
    if len(parts) == 1:
        parts = ["public", "default", parts[0]]
    if len(parts) != 3 or not all(parts):
        raise argparse.ArgumentTypeError(
            f"invalid topic name {name!r}: expected persistent://tenant/namespace/topic, tenant/namespace/topic "
            "or topic")
    tenant, ns, local = (urllib.parse.quote(p, safe="") for p in parts)
    return f"/admin/v2/{domain}/{tenant}/{ns}/{local}"


def namespace_path(name: str) -> str:
    parts = name.split("/")
    if len(parts) != 2 or not all(parts):
        raise argparse.ArgumentTypeError(f"invalid namespace {name!r}: expected tenant/namespace")
    return "/".join(urllib.parse.quote(p, safe="") for p in parts)


def message_id(text: str) -> dict[str, int]:
    """`earliest`, `latest` or `ledger:entry` -> Pulsar's MessageIdImpl JSON."""
    if text == "earliest":
        return {"ledgerId": -1, "entryId": -1, "partitionIndex": -1}
    if text == "latest":
        return {"ledgerId": (1 << 63) - 1, "entryId": (1 << 63) - 1, "partitionIndex": -1}
    parts = text.split(":")
    try:
        return {"ledgerId": int(parts[0]), "entryId": int(parts[1]), "partitionIndex": -1}
    except (ValueError, IndexError):
        raise argparse.ArgumentTypeError(f"expected earliest, latest or ledgerId:entryId, got {text!r}") from None


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def duration_s(text: str) -> int:
    """pulsar-admin's relative times: `90` (seconds), `100m`, `3h`, `2d`, `5w`."""
    unit = text[-1:].lower()
    try:
        return int(text[:-1]) * _UNITS[unit] if unit in _UNITS else int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a duration like 30s, 100m, 3h, 2d, 5w; got {text!r}") from None


def integer(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    return value


# ---------------------------------------------------------------------------------------------- output


def _table(rows: Sequence[Sequence[Any]], header: Sequence[str] | None = None) -> str:
    cells = [[str(c) for c in r] for r in ([header] if header else []) + list(rows)]
    if not cells:
        return ""
    widths = [max(len(r[i]) for r in cells) for i in range(len(cells[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells)


def _scalars(d: dict[str, Any]) -> list[tuple[str, Any]]:
    return [(k, _fmt(v)) for k, v in d.items() if not isinstance(v, dict | list)]


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3f}"
    return str(v)


def show_list(data: Any) -> str:
    return "\n".join(str(x) for x in data)


def show_kv(data: dict[str, Any]) -> str:
    return _table(_scalars(data))


def show_all(data: dict[str, object]) -> str:
    """Every field, lists and objects as JSON (a tenant's roles, a namespace's policies)."""
    return _table([(k, v if not isinstance(v, dict | list) else json.dumps(v)) for k, v in data.items()])


def show_message_id(data: dict[str, Any]) -> str:
    out = _table(_scalars(data))
    if data.get("ledgerId") == -1 and data.get("entryId") == -1:
        out += "\n(MessageId.earliest: that index was already deleted by retention)"
    return out


def show_stats(data: dict[str, Any]) -> str:
    parts = [_table(_scalars(data))]
    subs = data.get("subscriptions") or {}
    if subs:
        rows = [(name, s.get("type", ""), s.get("msgBacklog", ""), s.get("unackedMessages", "-"),
                 len(s["consumers"]) if "consumers" in s else "-", s.get("committedOffset", "-"))
                for name, s in subs.items()]
        parts.append("\nSUBSCRIPTIONS (Pulsar subscriptions and Kafka consumer groups)\n" + _table(
            rows, ("NAME", "TYPE", "BACKLOG", "UNACKED", "CONSUMERS", "COMMITTED OFFSET")))
    per = data.get("partitions") or {}
    if per:
        rows = [(name, s["msgInCounter"], s["bytesInCounter"], s["msgOutCounter"], s["bytesOutCounter"],
                 s["storageSize"]) for name, s in per.items()]
        parts.append("\nPARTITIONS\n" + _table(rows, ("PARTITION", "MSG IN", "BYTES IN", "MSG OUT", "BYTES OUT",
                                                     "STORAGE")))
    return "\n".join(parts)


def show_internal_stats(data: dict[str, Any]) -> str:
    if "partitions" in data and "metadata" in data:
        return "\n\n".join(f"== {name}\n{show_internal_stats(s)}" for name, s in data["partitions"].items())
    parts = [_table(_scalars(data))]
    ledgers = data.get("ledgers") or []
    parts.append("\nLEDGERS\n" + _table([(li["ledgerId"], li["entries"], li["size"], li.get("timestamp") or "-")
                                          for li in ledgers], ("LEDGER ID", "ENTRIES", "SIZE", "CLOSED AT (ms)")))
    cursors = data.get("cursors") or {}
    if cursors:
        rows = [(n, c["markDeletePosition"], c["readPosition"], c["messagesConsumedCounter"], c["msgBacklog"])
                for n, c in cursors.items()]
        parts.append("\nCURSORS (consumer groups)\n" + _table(
            rows, ("NAME", "MARK DELETE", "READ POSITION", "COMMITTED OFFSET", "BACKLOG")))
    props = data.get("properties") or {}
    if props:
        parts.append("\nPROPERTIES\n" + _table(sorted(props.items())))
    return "\n".join(parts)


def show_messages(data: list[tuple[dict[str, str], bytes]]) -> str:
    out = []
    for headers, body in data:
        out.append(f"Message ID: {headers.get('X-Pulsar-Message-ID', '?')}")
        for k, v in sorted(headers.items()):
            if k.startswith("X-Pulsar-") and k != "X-Pulsar-Message-ID":
                out.append(f"  {k[len('X-Pulsar-'):]}: {v}")
        out.append("  payload: " + body.decode(errors="replace"))
    return "\n".join(out)


def _done(_: Any) -> str:
    return "done"


def _peek(a: AdminClient, n: argparse.Namespace) -> tuple[Any, Callable[[Any], str]]:
    sub = urllib.parse.quote(n.subscription, safe="")
    got = [a.send("GET", f"{n.topic}/subscription/{sub}/position/{i}") for i in range(1, n.count + 1)]
    if getattr(n, "json", False):
        return [{"headers": h, "payload": b.decode(errors="replace")} for h, b in got], show_list
    return got, show_messages


def _reset(a: AdminClient, n: argparse.Namespace) -> tuple[Any, Callable[[Any], str]]:
    import time

    sub = urllib.parse.quote(n.subscription, safe="")
    if n.message_id is not None:
        body = dict(n.message_id, isExcluded=n.exclude_reset_position)
        a.send("POST", f"{n.topic}/subscription/{sub}/resetcursor", body)
    else:
        ts = n.timestamp if n.timestamp is not None else int(time.time() * 1000) - n.time * 1000
        a.send("POST", f"{n.topic}/subscription/{sub}/resetcursor/{ts}")
    return None, _done


def _sub_commands(topics: argparse._SubParsersAction, cmd: Callable[..., argparse.ArgumentParser]) -> None:
    """The Pulsar subscription verbs (pulsar-admin topics ...)."""

    def q(n: argparse.Namespace) -> str:
        return urllib.parse.quote(n.subscription, safe="")

    def s(c: argparse.ArgumentParser) -> None:
        c.add_argument("-s", "--subscription", required=True, help="subscription name")
        c.add_argument("topic", type=topic_path, help="a topic or one partition (topic-partition-<i>)")

    c = cmd(topics, "subscriptions", lambda a, n: (a.get(f"{n.topic}/subscriptions"), show_list),
            "the Pulsar subscriptions of a topic")
    c.add_argument("topic", type=topic_path)
    c = cmd(topics, "create-subscription",
            lambda a, n: (a.send("PUT", f"{n.topic}/subscription/{q(n)}", n.message_id) and None, _done),
            "create a durable subscription at a position (default latest)")
    c.add_argument("-m", "--message-id", type=message_id, default=message_id("latest"),
                   help="earliest, latest or ledgerId:entryId")
    s(c)
    c = cmd(topics, "unsubscribe",
            lambda a, n: (a.send("DELETE", f"{n.topic}/subscription/{q(n)}?force={str(n.force).lower()}")
                          and None, _done),
            "delete a subscription (its cursor)")
    c.add_argument("-f", "--force", action="store_true", help="disconnect its consumers first")
    s(c)
    c = cmd(topics, "reset-cursor", _reset,
            "move a subscription to a time or a message id (its consumers are disconnected and come back there)")
    g = c.add_mutually_exclusive_group(required=True)
    g.add_argument("-t", "--time", type=duration_s, help="this long ago: 30s, 100m, 3h, 2d, 5w")
    g.add_argument("--timestamp", type=integer, help="a publish time in ms since the epoch")
    g.add_argument("-m", "--message-id", type=message_id, help="ledgerId:entryId (one partition only)")
    c.add_argument("-e", "--exclude-reset-position", action="store_true", help="start after that message")
    s(c)
    c = cmd(topics, "skip",
            lambda a, n: (a.send("POST", f"{n.topic}/subscription/{q(n)}/skip/{n.count}") and None, _done),
            "skip the next N unacknowledged entries of a subscription (one partition)")
    c.add_argument("-n", "--count", type=integer, required=True, help="how many entries")
    s(c)
    c = cmd(topics, "expire-messages",
            lambda a, n: (a.send("POST", f"{n.topic}/subscription/{q(n)}/expireMessages/{n.expire_time}")
                          and None, _done),
            "acknowledge the messages of a subscription published more than a given time ago")
    c.add_argument("-t", "--expire-time", type=duration_s, required=True, help="30s, 100m, 3h, 2d, 5w")
    s(c)
    c = cmd(topics, "clear-backlog",
            lambda a, n: (a.send("POST", f"{n.topic}/subscription/{q(n)}/skip_all") and None, _done),
            "skip everything a subscription has not acknowledged")
    s(c)
    c = cmd(topics, "peek-messages", _peek, "show the next N unacknowledged messages of a subscription")
    c.add_argument("-n", "--count", type=integer, default=1, help="how many (default 1)")
    s(c)
    c = cmd(topics, "compact", lambda a, n: (a.send("PUT", f"{n.topic}/compaction") and None, _done),
            "start a compaction (each partition of a topic) for readCompacted consumers")
    c.add_argument("topic", type=topic_path, help="a topic or one partition (topic-partition-<i>)")
    c = cmd(topics, "compaction-status",
            lambda a, n: (a.get(f"{n.topic}/compaction"),
                          lambda st: st["status"] + (f": {st['lastError']}" if st.get("lastError") else "")),
            "the status of a partition's compaction: NOT_RUN, RUNNING, SUCCESS or ERROR (with the error)")
    c.add_argument("topic", type=topic_path, help="one partition (topic-partition-<i>)")


def _tenant(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def _create_tenant(a: AdminClient, n: argparse.Namespace) -> tuple[None, Callable[[object], str]]:
    clusters = n.allowed_clusters.split(",") if n.allowed_clusters else a.get("/admin/v2/clusters")
    roles = n.admin_roles.split(",") if n.admin_roles else []
    a.send("PUT", f"/admin/v2/tenants/{n.tenant}", {"adminRoles": roles, "allowedClusters": clusters})
    return None, _done


def _tenant_commands(tenants: argparse._SubParsersAction, namespaces: argparse._SubParsersAction,
                     cmd: Callable[..., argparse.ArgumentParser]) -> None:
    """tenants list/get/create/delete, namespaces list/create/delete/policies (kop/admin/namespaces.py)."""
    cmd(tenants, "list", lambda a, n: (a.get("/admin/v2/tenants"), show_list), "list the tenants")
    c = cmd(tenants, "get", lambda a, n: (a.get(f"/admin/v2/tenants/{n.tenant}"), show_all),
            "a tenant's admin roles and allowed clusters")
    c.add_argument("tenant", type=_tenant)
    c = cmd(tenants, "create", _create_tenant, "create a tenant")
    c.add_argument("-r", "--admin-roles", default="", help="comma-separated admin roles")
    c.add_argument("-c", "--allowed-clusters", default="",
                   help="comma-separated clusters (default: the broker's clusters)")
    c.add_argument("tenant", type=_tenant)
    c = cmd(tenants, "delete", lambda a, n: (a.send("DELETE", f"/admin/v2/tenants/{n.tenant}") and None, _done),
            "delete a tenant (it must have no namespaces)")
    c.add_argument("tenant", type=_tenant)

    c = cmd(namespaces, "list", lambda a, n: (a.get(f"/admin/v2/namespaces/{n.tenant}"), show_list),
            "list the namespaces of a tenant")
    c.add_argument("tenant", type=_tenant)
    c = cmd(namespaces, "create",
            lambda a, n: (a.send("PUT", f"/admin/v2/namespaces/{n.namespace}") and None, _done),
            "create a namespace (its tenant must exist)")
    c.add_argument("namespace", type=namespace_path, help="tenant/namespace")
    c = cmd(namespaces, "delete",
            lambda a, n: (a.send("DELETE", f"/admin/v2/namespaces/{n.namespace}") and None, _done),
            "delete a namespace (it must have no topics)")
    c.add_argument("namespace", type=namespace_path, help="tenant/namespace")
    c = cmd(namespaces, "policies", lambda a, n: (a.get(f"/admin/v2/namespaces/{n.namespace}"), show_all),
            "the policies of a namespace")
    c.add_argument("namespace", type=namespace_path, help="tenant/namespace")


# ---------------------------------------------------------------------------------------------- commands

Command = Callable[[AdminClient, argparse.Namespace], tuple[Any, Callable[[Any], str]]]


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--admin-url", default=argparse.SUPPRESS,
                        help=f"the broker's admin HTTP address (default {DEFAULT_URL}, or $KOP_ADMIN_URL)")
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                        help="print the server's JSON instead of tables")
    common.add_argument("--token", default=argparse.SUPPRESS,
                        help="a Pulsar token sent as `Authorization: Bearer` (default $KOP_ADMIN_TOKEN)")

    p = argparse.ArgumentParser(prog="kop-admin", parents=[common],
                                description="Administer a KoP-in-Python broker through its admin REST (pulsar-admin style).")
    groups = p.add_subparsers(dest="group", required=True, metavar="{topics,namespaces,tenants,brokers}")

    def cmd(sub: argparse._SubParsersAction, name: str, fn: Command, help: str) -> argparse.ArgumentParser:
        c = sub.add_parser(name, parents=[common], help=help, description=help)
        c.set_defaults(fn=fn)
        return c

    topics = groups.add_parser("topics", help="topics and partitions").add_subparsers(
        dest="command", required=True, metavar="COMMAND")
    c = cmd(topics, "list", lambda a, n: (a.get(f"/admin/v2/persistent/{n.namespace}"), show_list),
            "list the topic partitions of a namespace")
    c.add_argument("namespace", type=namespace_path, help="tenant/namespace")
    c = cmd(topics, "list-partitioned-topics",
            lambda a, n: (a.get(f"/admin/v2/persistent/{n.namespace}/partitioned"), show_list),
            "list the (partitioned) topics of a namespace")
    c.add_argument("namespace", type=namespace_path, help="tenant/namespace")
    c = cmd(topics, "get-partitioned-topic-metadata",
            lambda a, n: (a.get(f"{n.topic}/partitions"), show_kv), "the partition count of a topic")
    c.add_argument("topic", type=topic_path)
    c = cmd(topics, "stats", lambda a, n: (a.get(f"{n.topic}/stats"), show_stats),
            "rates, counters, storage size and backlog of one partition")
    c.add_argument("topic", type=topic_path, help="a partition: persistent://tenant/ns/topic-partition-<i>")
    c = cmd(topics, "partitioned-stats",
            lambda a, n: (a.get(f"{n.topic}/partitioned-stats",
                                perPartition="true" if n.per_partition else "false"), show_stats),
            "stats of a topic, summed over its partitions")
    c.add_argument("--per-partition", action="store_true", help="also show each partition")
    c.add_argument("topic", type=topic_path)
    c = cmd(topics, "internal-stats", lambda a, n: (a.get(f"{n.topic}/internalStats"), show_internal_stats),
            "managed-ledger state of one partition: ledgers, entries, index, cursors")
    c.add_argument("topic", type=topic_path, help="a partition: persistent://tenant/ns/topic-partition-<i>")
    c = cmd(topics, "partitioned-internal-stats",
            lambda a, n: (a.get(f"{n.topic}/partitioned-internalStats"), show_internal_stats),
            "internal stats of every partition of a topic")
    c.add_argument("topic", type=topic_path)
    c = cmd(topics, "get-message-id-by-index",
            lambda a, n: (a.get(f"{n.topic}/getMessageIdByIndex", index=n.index), show_message_id),
            "PIP-415: the message id (ledger, entry, partition) of the entry holding an index (Kafka offset)")
    c.add_argument("-i", "--index", type=integer, required=True, help="the index (Kafka offset)")
    c.add_argument("topic", type=topic_path, help="a partition: persistent://tenant/ns/topic-partition-<i>")
    c = cmd(topics, "get-index-by-message-id",
            lambda a, n: (a.get(f"{n.topic}/getIndexByMessageId", ledgerId=n.ledger, entryId=n.entry,
                                batchIndex=n.batch_index), show_kv),
            "the reverse of get-message-id-by-index: the index range of the entry at ledger:entry")
    c.add_argument("-l", "--ledger", type=integer, required=True, help="ledger id")
    c.add_argument("-e", "--entry", type=integer, required=True, help="entry id")
    c.add_argument("-b", "--batch-index", type=integer, default=None,
                   help="a record's position in the batch (then index is that record's)")
    c.add_argument("topic", type=topic_path, help="a partition: persistent://tenant/ns/topic-partition-<i>")

    _sub_commands(topics, cmd)

    namespaces = groups.add_parser("namespaces", help="namespaces").add_subparsers(
        dest="command", required=True, metavar="COMMAND")
    tenants = groups.add_parser("tenants", help="tenants").add_subparsers(
        dest="command", required=True, metavar="COMMAND")
    _tenant_commands(tenants, namespaces, cmd)

    brokers = groups.add_parser("brokers", help="this broker").add_subparsers(
        dest="command", required=True, metavar="COMMAND")
    cmd(brokers, "healthcheck", lambda a, n: (a.get("/admin/v2/brokers/health"), str),
        "ok when the broker answers")
    cmd(brokers, "ready", lambda a, n: (a.get("/admin/v2/brokers/ready"), str),
        "ok when the broker has started and accepts clients")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    client = AdminClient(getattr(args, "admin_url", DEFAULT_URL),
                         token=getattr(args, "token", None) or os.environ.get("KOP_ADMIN_TOKEN") or None)
    try:
        data, show = args.fn(client, args)
    except CliError as e:
        print(f"kop-admin: {e}", file=sys.stderr)
        return 1
    if data is None:
        print(show(data))
    elif getattr(args, "json", False) and not isinstance(data, str):
        print(json.dumps(data, indent=2))
    else:
        print(data.strip() if isinstance(data, str) else show(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
