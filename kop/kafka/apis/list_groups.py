"""ListGroups (key 16): v0-v5.

- v4+ filters by state (case-insensitive, Kafka's state names) and v5+ by group type: "classic",
  "consumer" (KIP-848 groups, listed with protocol type "consumer" and their states Empty, Assigning,
  Reconciling, Stable, as Kafka 4.x) or "share" (KIP-932 share groups, kop/coordinator/share: protocol type
  "share", states Empty and Stable) or "streams" (KIP-1071 groups, kop/coordinator/streams: protocol type
  "streams", states Empty, NotReady, Assigning, Reconciling, Stable). Kafka 4.x tools need v5:
  kafka-consumer-groups --list --type and --reset-offsets (which also lists streams groups) fail on a
  broker below it.
- Groups that only hold committed offsets (commits outside group management, or after their members left)
  are listed as Empty: with protocol type "" for the former, "consumer" for the latter, as Kafka 4.x.
- While any __consumer_offsets partition is still loading the answer is COORDINATOR_LOAD_IN_PROGRESS (the
  list would be incomplete); clients retry.
- A tenant login (kop/topics/scope.py) lists only its own groups, under the ids it uses; a default login
  lists every group, tenants' as `tenant/ns/g` (the same rule as Metadata's topic listing).
"""

from __future__ import annotations

from collections.abc import Iterable

from kop.coordinator.coordinator import ListedGroup
from kop.kafka import authorize
from kop.kafka.context import RequestContext
from kop.protocol.messages import ListGroupsRequest, ListGroupsResponse

API_KEY = 16
VERSIONS = (0, 5)


def _share_groups(ctx: RequestContext, states: Iterable[str], types: Iterable[str]) -> list[ListedGroup]:
    """The share groups listed (kop/coordinator/share/groups.py), filtered as the group coordinator filters its own."""
    want_states = {s.strip().lower() for s in states}
    want_types = {t.strip().lower() for t in types}
    if want_types and "share" not in want_types:
        return []
    return [ListedGroup(g.group_id, "share", g.state, "share") for g in ctx.handler.share.groups.groups.values()
            if not want_states or g.state.lower() in want_states]


async def handle(ctx: RequestContext, req: ListGroupsRequest) -> ListGroupsResponse:
    R = ListGroupsResponse
    v = ctx.version
    coordinator = ctx.coordinator
    states, types = req.states_filter if v >= 4 else (), req.types_filter if v >= 5 else ()
    error, groups = coordinator.list_groups(states, types)
    groups += _share_groups(ctx, states, types)
    names = ctx.names
    # (id as this connection spells it, group): a tenant login lists only its own groups
    listed = [(g.group_id, g) for g in groups] if names.default else \
        [(names.client_id(g.group_id), g) for g in groups if names.owns_id(g.group_id)]
    if not authorize.cluster_allowed(ctx, authorize.Op.DESCRIBE):  # then only the groups it may describe
        listed = [(gid, g) for gid, g in listed if authorize.group_allowed(ctx, authorize.Op.DESCRIBE, gid)]
    return R(
        throttle_time_ms=0,
        error_code=error,
        groups=[R.ListedGroup(group_id=gid, protocol_type=g.protocol_type, group_state=g.state,
                              group_type=g.group_type) for gid, g in listed],
    )
