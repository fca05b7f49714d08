"""Cluster mode (two brokers sharing ZooKeeper and the bookies, tests/support/cluster.py): ACLs and SCRAM users
created through one broker are enforced by the other (issue #14). Both live in the metadata store
(kop/security/metadata_stores.py); a broker re-reads the ACLs when their change counter moves
(ACL_RELOAD_INTERVAL, kop/server/service.py) and reads SCRAM credentials from the store on each use.

Identities as in tests/support/acl_brokers.py: User:ANONYMOUS from 127.0.0.1 (the admin) and from 127.0.0.2
(the subject). allowEveryoneIfNoAclFound=true lets the admin create the first ACL (nothing is bound to the
cluster) and the subject describe a topic while no ACL is bound to it; an ACL for the admin's host on the
topic then shuts the subject out.
"""

from __future__ import annotations

import uuid
from typing import Any

from kop.protocol import api_info
from tests.support.acl_brokers import ADMIN_HOST, PRINCIPAL, SUBJECT_HOST, RawClient, create_acls
from tests.support.clients import create_topic
from tests.support.cluster import eventually, start_brokers, stop_brokers

Z16 = b"\0" * 16


def describe_topic(bootstrap: str, topic: str) -> int:
    """The subject's Metadata error code for the topic."""
    M = api_info(3).request_class
    with RawClient(bootstrap, SUBJECT_HOST) as c:
        resp = c.call(3, 12, M(topics=[M.MetadataRequestTopic(topic_id=Z16, name=topic)],
                                allow_auto_topic_creation=False))
    return resp.topics[0].error_code


def test_acls_and_scram_users_are_shared(cluster, tmp_path_factory) -> None:
    brokers = start_brokers(tmp_path_factory, cluster, 2, authorizationEnabled="true",
                            allowEveryoneIfNoAclFound="true")
    try:
        one, two = brokers
        topic = f"shared-{uuid.uuid4().hex[:8]}"
        create_topic(one.bootstrap, topic, 2)
        eventually("the subject to see the topic through the second broker",
                   lambda: describe_topic(two.bootstrap, topic) == 0)

        with RawClient(one.bootstrap, ADMIN_HOST) as c:
            resp = create_acls(c, [(2, topic, 3, PRINCIPAL, ADMIN_HOST, 8, 3)])  # DESCRIBE for the admin's host
        assert [r.error_code for r in resp.results] == [0]
        eventually("the second broker to enforce the ACL created through the first",
                   lambda: describe_topic(two.bootstrap, topic) == 29, timeout=30)
        assert describe_topic(one.bootstrap, topic) == 29

        X = api_info(31).request_class
        with RawClient(two.bootstrap, ADMIN_HOST) as c:
            resp = c.call(31, 3, X(filters=[X.DeleteAclsFilter(
                resource_type_filter=2, resource_name_filter=topic, pattern_type_filter=3, principal_filter=None,
                host_filter=None, operation=1, permission_type=1)]))
        assert [len(r.matching_acls) for r in resp.filter_results] == [1]
        eventually("the first broker to drop the ACL deleted through the second",
                   lambda: describe_topic(one.bootstrap, topic) == 0, timeout=30)

        user = f"alice-{uuid.uuid4().hex[:6]}"
        A, D = api_info(51).request_class, api_info(50).request_class
        with RawClient(one.bootstrap, ADMIN_HOST) as c:
            resp = c.call(51, 0, A(deletions=[], upsertions=[A.ScramCredentialUpsertion(
                name=user, mechanism=2, iterations=8192, salt=b"s" * 16, salted_password=b"p" * 64)]))
        assert [r.error_code for r in resp.results] == [0]
        with RawClient(two.bootstrap, ADMIN_HOST) as c:
            described: Any = c.call(50, 0, D(users=[D.UserName(name=user)]))
        assert [(r.user, r.error_code, [(i.mechanism, i.iterations) for i in r.credential_infos])
                for r in described.results] == [(user, 0, [(2, 8192)])]
    finally:
        stop_brokers(brokers)
