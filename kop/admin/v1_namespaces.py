"""Pulsar's v1 namespace paths (`/admin/namespaces/...`, three-part names `tenant/cluster/namespace`): what of them
this broker answers as Apache Pulsar 4.0 does, and the one refusal where it does not.

Why: Pulsar's Java admin client (and so `pulsar-admin`) sends a three-part namespace name to the v1 paths
(`namespaces().createNamespace("t/c/ns")` is `PUT /admin/namespaces/t/c/ns`). Without these routes every such call
answered aiohttp's bare `404: Not Found`, where Pulsar answers its own checks first - and applications meet those
answers, e.g. 403 for a cluster the tenant is not allowed on.

Served, in the order of Pulsar's v1 `Namespaces.createNamespace` (validateNamespaceName, then
validateClusterForTenantAsync for a non-global namespace):

* `GET /admin/namespaces/{tenant}`: the tenant's namespaces, as the v2 list (Pulsar's internalGetTenantNamespaces,
  which both versions call); 404 "Tenant not found";
* `PUT /admin/namespaces/{tenant}/{cluster}/{namespace}`: 412 "Namespace name is not valid" for a bad name, 404
  "Tenant does not exist", 403 "Cluster [c] is not in the list of allowed clusters list for tenant [t]" for a
  cluster the tenant does not allow (`global` skips that check, as in Pulsar).

The difference: v1 namespaces themselves (deprecated since Pulsar 2.0, PIP-10/PIP-11) are not kept here - topics
are named `tenant/namespace/topic` only (kop/topics/names.py) - so a create that passes those checks is refused
with 412 and a reason saying so, where Pulsar creates the namespace. Nothing else of v1 is served (404).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from aiohttp import web

from kop.admin.views import AdminError
from kop.topics.namespaces import NamespaceError, check_name

if TYPE_CHECKING:
    from kop.admin.server import AdminServer

V1 = "/admin/namespaces"
GLOBAL = "global"  # Pulsar's NamespaceName.isGlobal(): a v1 namespace replicated by its policies, not its name
NOT_SERVED = ("v1 namespace names (tenant/cluster/namespace) are not supported by this broker: use a v2 name "
              "(tenant/namespace)")


def add_routes(server: AdminServer, r: web.UrlDispatcher) -> None:
    store = server.service.topics.namespaces

    async def list_namespaces(request: web.Request) -> web.Response:
        tenant = request.match_info["tenant"]
        await store.refresh(tenant)
        try:
            names = store.namespaces(tenant)
        except NamespaceError as e:
            raise AdminError(e.status, e.reason) from None
        return web.Response(text=json.dumps(names), content_type="application/json")

    async def create_namespace(request: web.Request) -> web.Response:
        m = request.match_info
        tenant, cluster = m["tenant"], m["cluster"]
        try:
            for name in (tenant, cluster, m["namespace"]):
                check_name(name, "Namespace")
        except NamespaceError as e:
            raise AdminError(e.status, e.reason) from None
        await store.refresh(tenant)
        if tenant not in store.tenants():
            raise AdminError(404, "Tenant does not exist")
        allowed = store.tenant(tenant).get("allowedClusters")
        if cluster != GLOBAL and not (isinstance(allowed, list) and cluster in allowed):
            raise AdminError(403, f"Cluster [{cluster}] is not in the list of allowed clusters list for tenant "
                                  f"[{tenant}]")
        raise AdminError(412, NOT_SERVED)

    r.add_get(V1 + "/{tenant}", list_namespaces)
    r.add_put(V1 + "/{tenant}/{cluster}/{namespace}", create_namespace)
