"""kop/admin/tenant_access.py's rules, sans-IO: which tenant a path belongs to and what a role that may not
administer it gets (Pulsar 4.0.7's answers, checked against Apache Pulsar in tests/e2e/test_pulsar_permissions.py)."""

from __future__ import annotations

from kop.admin.tenant_access import NOT_TENANT_ADMIN, Refusal, rule


def test_tenant_paths_name_their_tenant_and_listing_tenants_is_for_super_users() -> None:
    listing = rule("GET", "/admin/v2/tenants", "bob")
    assert listing is not None and listing.tenant is None and listing.refusal.status == 401
    assert "[LIST_TENANTS]" in listing.refusal.reason
    update = rule("POST", "/admin/v2/tenants/acme", "bob")
    assert update is not None and update.tenant == "acme" and "[UPDATE_TENANT]" in update.refusal.reason


def test_namespace_paths_are_refused_with_the_check_pulsar_makes() -> None:
    create = rule("PUT", "/admin/v2/namespaces/acme/ns", "bob")
    assert create == ("acme", Refusal(401, "Unauthorized to validateTenantOperation for originalPrincipal [null] "
                                           "and clientAppId [bob] about operation [CREATE_NAMESPACE] on tenant [acme]"))
    ttl = rule("GET", "/admin/v2/namespaces/acme/ns/messageTTL", "bob")
    assert ttl is not None and ttl.refusal == Refusal(
        403, "Unauthorized to validateNamespacePolicyOperation for operation [READ] on namespace [acme/ns] on policy [TTL]")
    grant = rule("POST", "/admin/v2/namespaces/acme/ns/permissions/carol", "bob")
    assert grant is not None and "[GRANT_PERMISSION]" in grant.refusal.reason and grant.refusal.status == 403


def test_topic_paths() -> None:
    perms = rule("DELETE", "/admin/v2/persistent/acme/ns/t/permissions/carol", "bob")
    assert perms == ("acme", Refusal(401, NOT_TENANT_ADMIN))
    ttl = rule("POST", "/admin/v2/persistent/acme/ns/t/messageTTL", "bob")
    assert ttl is not None and ttl.refusal.reason == ("Unauthorized to validateTopicPolicyOperation for operation "
                                                      "[WRITE] on topic [persistent://acme/ns/t] on policy [TTL]")
    listing = rule("GET", "/admin/v2/persistent/acme/ns", "bob")
    assert listing is not None and "[GET_TOPICS]" in listing.refusal.reason


def test_paths_outside_a_tenant_are_left_to_the_super_user_rule() -> None:
    assert rule("GET", "/admin/v2/clusters", "bob") is None
    assert rule("GET", "/admin/v2/brokers/health", "bob") is None
    assert rule("GET", "/metrics", "bob") is None
