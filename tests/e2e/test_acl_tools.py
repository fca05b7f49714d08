"""`kafka-acls` and `kafka-configs --entity-type users` (the Kafka 4.x tools) against our broker and Apache Kafka
4.x with ACLs enforced: the same commands print the same output. Then the bad inputs of the ACL and SCRAM APIs,
as raw requests, answered the same by both: ACL filters with UNKNOWN elements (Kafka refuses to parse such a
request and closes the connection), creations Kafka's controller refuses (resource type ANY, pattern MATCH, a
CLUSTER not named kafka-cluster, an empty name, a principal without a type), SCRAM iterations out of range,
an empty user name, an unknown mechanism, a user named twice; and SECURITY_DISABLED from a broker without an
authorizer. Identities as in tests/support/acl_brokers.py (the tools run as the admin).
"""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest

from kop.protocol import api_info
from tests.support.acl_brokers import ADMIN_HOST, SUBJECT_HOST, RawClient, start_kafka, start_kop
from tests.support.broker import KopBroker


@pytest.fixture(scope="module")
def brokers(tmp_path_factory: pytest.TempPathFactory, java_tools: Any):
    kop = start_kop(tmp_path_factory.mktemp("kop-acl"))
    try:
        kafka = start_kafka(tmp_path_factory.mktemp("kafka-acl"))
    except BaseException:
        kop.stop()
        raise
    yield {"kop": kop, "kafka": kafka}
    kop.stop()
    kafka.stop()


def both(brokers: dict[str, Any], java_tools: Any, *args: object, token: str) -> str:
    """Run one tool command against each broker; the outputs (token made generic) must be equal."""
    out = {}
    for name, b in brokers.items():
        res = java_tools.run(args[0], "--bootstrap-server", b.bootstrap, *args[1:])
        stdout = res.stdout.replace(token, "<token>")
        # kafka-acls prints a resource's entries, kafka-configs a user's mechanisms, in the order of a hash map:
        # compare them as sets
        lines = [_sorted_items(ln) for ln in stdout.splitlines()]
        out[name] = (res.rc, sorted(lines), _error_line(res.stderr.replace(b.bootstrap, "<b>"), token))
    assert out["kop"] == out["kafka"], f"ours:\n{out['kop']}\nApache Kafka:\n{out['kafka']}"
    return "\n".join(out["kop"][1])


def _sorted_items(line: str) -> str:
    """`... are A=1, B=2` with its items in one order."""
    head, sep, items = line.partition(" are ")
    return head + sep + ", ".join(sorted(items.split(", "))) if sep else line


def _error_line(stderr: str, token: str) -> str:
    """The tool's own error line (a stack trace's frames differ between brokers' timing, its message does not)."""
    lines = [ln for ln in stderr.replace(token, "<token>").splitlines()
             if ln.startswith(("Error", "org.apache.kafka", "java.util.concurrent"))]
    return "\n".join(lines[:2])


def test_kafka_acls_add_list_remove(brokers, java_tools) -> None:
    token = uuid.uuid4().hex[:8]
    topic, group = f"orders-{token}", f"billing-{token}"
    added = both(brokers, java_tools, "kafka-acls", "--add", "--allow-principal", f"User:alice-{token}",
                 "--operation", "Read", "--operation", "Describe", "--topic", topic, token=token)
    assert "(principal=User:alice-<token>, host=*, operation=READ, permissionType=ALLOW)" in added
    both(brokers, java_tools, "kafka-acls", "--add", "--allow-principal", f"User:bob-{token}", "--consumer",
         "--topic", topic, "--group", group, token=token)
    both(brokers, java_tools, "kafka-acls", "--add", "--allow-principal", f"User:bob-{token}", "--producer",
         "--topic", f"orders-{token}-", "--resource-pattern-type", "prefixed", token=token)
    both(brokers, java_tools, "kafka-acls", "--add", "--deny-principal", f"User:mallory-{token}", "--deny-host",
         "127.0.0.3", "--operation", "All", "--topic", topic, token=token)
    listed = both(brokers, java_tools, "kafka-acls", "--list", "--topic", topic, token=token)
    assert "User:mallory-<token>, host=127.0.0.3, operation=ALL, permissionType=DENY" in listed
    matched = both(brokers, java_tools, "kafka-acls", "--list", "--topic", f"orders-{token}-eu",
                   "--resource-pattern-type", "match", token=token)
    assert "patternType=PREFIXED" in matched and "operation=WRITE" in matched
    both(brokers, java_tools, "kafka-acls", "--list", "--principal", f"User:bob-{token}", token=token)
    both(brokers, java_tools, "kafka-acls", "--remove", "--force", "--allow-principal", f"User:alice-{token}",
         "--operation", "Read", "--topic", topic, token=token)
    after = both(brokers, java_tools, "kafka-acls", "--list", "--topic", topic, token=token)
    assert "User:alice-<token>, host=*, operation=READ" not in after
    assert "User:alice-<token>, host=*, operation=DESCRIBE" in after
    both(brokers, java_tools, "kafka-acls", "--remove", "--force", "--topic", topic, token=token)
    both(brokers, java_tools, "kafka-acls", "--remove", "--force", "--group", group, token=token)
    both(brokers, java_tools, "kafka-acls", "--remove", "--force", "--topic", f"orders-{token}-",
         "--resource-pattern-type", "prefixed", token=token)
    gone = both(brokers, java_tools, "kafka-acls", "--list", "--principal", f"User:bob-{token}", token=token)
    assert "operation=" not in gone


def test_kafka_configs_scram_users(brokers, java_tools) -> None:
    token = uuid.uuid4().hex[:8]
    user = f"alice-{token}"
    # both mechanisms in one command is one request naming the user twice: DUPLICATE_RESOURCE on both
    both(brokers, java_tools, "kafka-configs", "--alter", "--add-config",
         "SCRAM-SHA-256=[iterations=8192,password=alice-secret],SCRAM-SHA-512=[password=alice-secret]",
         "--entity-type", "users", "--entity-name", user, token=token)
    for mechanism in ("SCRAM-SHA-256=[iterations=8192,password=alice-secret]", "SCRAM-SHA-512=[password=alice-secret]"):
        both(brokers, java_tools, "kafka-configs", "--alter", "--add-config", mechanism, "--entity-type", "users",
             "--entity-name", user, token=token)
    described = both(brokers, java_tools, "kafka-configs", "--describe", "--entity-type", "users",
                     "--entity-name", user, token=token)
    assert "SCRAM-SHA-256=iterations=8192" in described and "SCRAM-SHA-512=iterations=4096" in described
    both(brokers, java_tools, "kafka-configs", "--alter", "--delete-config", "SCRAM-SHA-512",
         "--entity-type", "users", "--entity-name", user, token=token)
    described = both(brokers, java_tools, "kafka-configs", "--describe", "--entity-type", "users",
                     "--entity-name", user, token=token)
    assert "SCRAM-SHA-512" not in described
    # too few iterations: Kafka's error, the same on both
    both(brokers, java_tools, "kafka-configs", "--alter", "--add-config", "SCRAM-SHA-256=[iterations=100,password=x]",
         "--entity-type", "users", "--entity-name", f"bob-{token}", token=token)


# ---- bad inputs, raw ------------------------------------------------------------------------------------------

def _call(b: Any, key: int, version: int, body: Any, source: str = ADMIN_HOST) -> Any:
    """The answer, or "closed" when the broker closed the connection instead."""
    with RawClient(b.bootstrap, source) as c:
        try:
            return c.call(key, version, body)
        except (ConnectionError, OSError):
            return "closed"


def _same(brokers: dict[str, Any], key: int, version: int, body: Any, source: str = ADMIN_HOST) -> Any:
    """Both brokers' answers, equal up to the order of Describe/AlterUserScramCredentials' results (Kafka's is a
    hash map's, so it changes with the names)."""
    got = {name: _call(b, key, version, body, source) for name, b in brokers.items()}
    for v in got.values():
        if key in (50, 51) and v != "closed":
            v.results.sort(key=lambda r: (r.user, r.error_code))
    a, b = (repr(v) for v in got.values())
    assert a == b, f"ours:\n{got['kop']}\nApache Kafka:\n{got['kafka']}"
    return got["kop"]


def _creation(rt: int, name: str, pt: int, principal: str, op: int = 3, perm: int = 3) -> Any:
    R = api_info(30).request_class
    return R.AclCreation(resource_type=rt, resource_name=name, resource_pattern_type=pt, principal=principal,
                         host="*", operation=op, permission_type=perm)


def test_create_acls_bad_bindings(brokers) -> None:
    """Each refused binding beside a valid one: Kafka's controller refuses it and stores the valid one."""
    R = api_info(30).request_class
    token = uuid.uuid4().hex[:8]
    for i, bad in enumerate([
        _creation(1, f"t-{token}", 3, "User:a"),  # resource type ANY
        _creation(2, f"t-{token}", 2, "User:a"),  # pattern MATCH
        _creation(2, f"t-{token}", 1, "User:a"),  # pattern ANY
        _creation(4, "other-cluster", 3, "User:a"),
        _creation(2, "", 3, "User:a"),
        _creation(2, f"t-{token}", 3, "User:a", op=1),  # operation ANY
        _creation(2, f"t-{token}", 3, "User:a", perm=1),  # permission ANY
    ]):
        resp = _same(brokers, 30, 3, R(creations=[bad, _creation(2, f"ok-{token}", 3, f"User:ok{i}-{token}")]))
        # ANY/MATCH cannot even be built into a binding: the whole request fails (UNKNOWN_SERVER_ERROR);
        # the others are refused one by one and the valid one is stored
        expected = [42, 0] if i in (3, 4) else [-1, -1]
        assert [r.error_code for r in resp.results] == expected, resp
    for unknown in ([_creation(0, "t", 3, "User:a")], [_creation(2, "t", 0, "User:a")],
                    [_creation(2, "t", 3, "User:a", op=0)], [_creation(2, "t", 3, "User:a", perm=0)]):
        assert _same(brokers, 30, 3, R(creations=unknown)) == "closed"  # Kafka refuses to parse the request
    # a code Kafka does not know reads as UNKNOWN: refused one by one, not a parse error
    for i, (rt, pt, op, perm, what) in enumerate([(99, 3, 3, 3, "resourceType"), (2, 99, 3, 3, "patternType"),
                                                 (2, 3, 99, 3, "operation"), (2, 3, 3, 99, "permissionType")]):
        resp = _same(brokers, 30, 3, R(creations=[_creation(rt, "t", pt, "User:a", op, perm),
                                                  _creation(2, f"ok-{token}", 3, f"User:u{i}-{token}")]))
        assert [(r.error_code, r.error_message) for r in resp.results] == [(42, f"Invalid {what} UNKNOWN"), (0, "")]


def test_create_acls_principal_without_type(brokers) -> None:
    """A principal that does not parse is refused with Kafka's message; the other creation is stored."""
    R = api_info(30).request_class
    token = uuid.uuid4().hex[:8]
    resp = _same(brokers, 30, 3, R(creations=[_creation(2, f"t-{token}", 3, "alice"),
                                              _creation(2, f"t-{token}", 3, f"User:fine-{token}")]))
    assert [r.error_code for r in resp.results] == [42, 0]


def _filter(**over: Any) -> dict[str, Any]:
    f = dict(resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1, principal_filter=None,
             host_filter=None, operation=1, permission_type=1)
    f.update(over)
    return f


def test_acl_filters_with_unknown_elements_close_the_connection(brokers) -> None:
    D, X = api_info(29).request_class, api_info(31).request_class
    for over in ({"resource_type_filter": 0}, {"pattern_type_filter": 0}, {"operation": 0}, {"permission_type": 0}):
        assert _same(brokers, 29, 3, D(**_filter(**over))) == "closed", over
        assert _same(brokers, 31, 3, X(filters=[X.DeleteAclsFilter(**_filter(**over))])) == "closed", over
    token = uuid.uuid4().hex[:8]
    # a filter that matches nothing is fine, on a type and name nobody uses
    resp = _same(brokers, 29, 3, D(**_filter(resource_type_filter=3, resource_name_filter=f"none-{token}",
                                             pattern_type_filter=3)))
    assert resp.error_code == 0 and resp.resources == []


def _upsert(name: str, mechanism: int = 1, iterations: int = 8192) -> Any:
    R = api_info(51).request_class
    return R.ScramCredentialUpsertion(name=name, mechanism=mechanism, iterations=iterations, salt=b"s" * 16,
                                      salted_password=b"p" * 32)


def test_scram_credentials_bad_inputs(brokers) -> None:
    A, D = api_info(51).request_class, api_info(50).request_class
    token = uuid.uuid4().hex[:8]
    resp = _same(brokers, 51, 0, A(deletions=[A.ScramCredentialDeletion(name=f"gone-{token}", mechanism=1)],
                                   upsertions=[_upsert(f"few-{token}", iterations=100),
                                               _upsert(f"many-{token}", iterations=20000),
                                               _upsert(""),
                                               _upsert(f"mech-{token}", mechanism=0),
                                               _upsert(f"twice-{token}"), _upsert(f"twice-{token}", mechanism=2),
                                               _upsert(f"ok-{token}")]))
    codes = {r.user.replace(token, "<t>"): r.error_code for r in resp.results}
    assert codes == {"gone-<t>": 91, "few-<t>": 93, "many-<t>": 93, "": 93, "mech-<t>": 33, "twice-<t>": 92,
                     "ok-<t>": 0}
    resp = _same(brokers, 50, 0, D(users=[D.UserName(name=f"ok-{token}"), D.UserName(name=f"ok-{token}"),
                                          D.UserName(name=f"none-{token}")]))
    assert sorted(r.error_code for r in resp.results) == [91, 92]


def test_describe_client_quotas(brokers) -> None:
    """No quotas are kept: a valid filter matches nothing; bad entity and match types and a principal without
    DESCRIBE_CONFIGS on the cluster get Kafka's errors."""
    D = api_info(48).request_class

    def q(entity_type: str, match_type: int) -> Any:
        return D(components=[D.ComponentData(entity_type=entity_type, match_type=match_type, match="alice")],
                 strict=False)

    assert _same(brokers, 48, 1, q("user", 0)).entries == []
    assert _same(brokers, 48, 1, q("bogus", 0)).error_code == 35
    assert _same(brokers, 48, 1, q("user", 7)).error_code == 42
    assert _same(brokers, 48, 1, q("user", 0), SUBJECT_HOST).error_code == 31


def test_no_authorizer_means_security_disabled(tmp_path, kafka_server) -> None:
    """Without authorizationEnabled (Kafka: without authorizer.class.name) the ACL APIs answer SECURITY_DISABLED."""
    ours = KopBroker(tmp_path / "kop", {"allowAutoTopicCreation": "true"}).start()
    try:
        brokers = {"kop": ours, "kafka": kafka_server}
        D, C, X = (api_info(k).request_class for k in (29, 30, 31))
        resp = _same(brokers, 29, 3, D(**_filter()))
        assert resp.error_code == 54 and re.search("No Authorizer is configured", resp.error_message)
        resp = _same(brokers, 30, 3, C(creations=[_creation(2, "t", 3, "User:a")]))
        assert [r.error_code for r in resp.results] == [54]
        resp = _same(brokers, 31, 3, X(filters=[X.DeleteAclsFilter(**_filter())]))
        assert [r.error_code for r in resp.filter_results] == [54]
    finally:
        ours.stop()
