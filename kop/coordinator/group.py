"""One classic consumer group: its members, generation, selected protocol and state machine.

This is the in-memory model of Kafka's classic group protocol (KIP-62 rebalance timeouts, KIP-345 static
members, KIP-394 member ids required on first join). It holds no I/O and no timers' logic: the state
machine (kop/coordinator/group_state.py) drives transitions and the coordinator persists the result. States
and their legal predecessors are Kafka's, so a group can never reach a state Kafka's own coordinator could
not. A parked JoinGroup or SyncGroup is held as an opaque token (whatever the caller uses to find the
request again - the async coordinator uses its future), so that this model and the state machine stay
free of asyncio.
"""

from __future__ import annotations

import enum
import struct
import uuid
from collections import Counter
from collections.abc import Hashable
from dataclasses import dataclass, field

CONSUMER_PROTOCOL_TYPE = "consumer"
UNKNOWN_MEMBER_ID = ""
EMPTY_ASSIGNMENT = b""


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


S = GroupState
# Kafka's valid previous states of each state.
_VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    S.EMPTY: frozenset({S.PREPARING_REBALANCE}),
    S.PREPARING_REBALANCE: frozenset({S.STABLE, S.COMPLETING_REBALANCE, S.EMPTY}),
    S.COMPLETING_REBALANCE: frozenset({S.PREPARING_REBALANCE}),
    S.STABLE: frozenset({S.COMPLETING_REBALANCE}),
    S.DEAD: frozenset({S.STABLE, S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE, S.EMPTY, S.DEAD}),
}


def new_member_uuid() -> str:
    """The random part of a member id: a java.util.UUID string, as Apache Kafka 4.x generates
    (clientId + "-" + UUID.randomUUID()), so member ids look alike in tools' output."""
    return str(uuid.uuid4())


@dataclass(eq=False)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]  # (name, metadata) in the member's order of preference
    assignment: bytes = EMPTY_ASSIGNMENT
    # The parked JoinGroup / SyncGroup request's token. A member "is awaiting" while a token is set, even
    # when the client went away (its request task was cancelled): Kafka keeps the callback too.
    join_token: Hashable | None = None
    sync_token: Hashable | None = None
    is_new: bool = False

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def awaiting_join(self) -> bool:
        return self.join_token is not None

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_token is not None

    def metadata(self, protocol: str | None) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        raise KeyError(f"member {self.member_id} does not support protocol {protocol}")

    def vote(self, candidates: set[str]) -> str:
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols

    def has_satisfied_heartbeat(self) -> bool:
        """Asked when the member's session timer fires (no heartbeat arrived in time): only members parked
        in a rebalance are excused, and new members never (their join may be abandoned)."""
        if self.is_new:
            return False
        return self.awaiting_join or self.awaiting_sync


@dataclass(eq=False)
class ClassicGroup:
    group_id: str
    state: GroupState = S.EMPTY
    previous_state: GroupState = S.EMPTY
    state_timestamp: int | None = None  # ms when the current state was entered (None: unknown)
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # group instance id -> member id
    pending_join_members: set[str] = field(default_factory=set)  # KIP-394: ids handed out, not yet joined
    pending_sync_members: set[str] = field(default_factory=set)
    num_awaiting_join: int = 0
    supported_protocols: Counter[str] = field(default_factory=Counter)
    new_member_added: bool = False
    subscribed_topics: set[str] | None = None

    # ------------------------------------------------------------------ state
    def is_in(self, *states: GroupState) -> bool:
        return self.state in states

    def transition_to(self, target: GroupState, now_ms: int) -> None:
        if self.state not in _VALID_PREVIOUS[target]:
            raise RuntimeError(f"group {self.group_id}: illegal transition {self.state.value} -> {target.value}")
        self.previous_state = self.state
        self.state = target
        self.state_timestamp = now_ms

    def can_rebalance(self) -> bool:
        return self.state in _VALID_PREVIOUS[S.PREPARING_REBALANCE]

    def uses_consumer_protocol(self) -> bool:
        return self.protocol_type == CONSUMER_PROTOCOL_TYPE

    # ------------------------------------------------------------------ members
    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def static_member_id(self, instance_id: str | None) -> str | None:
        return None if instance_id is None else self.static_members.get(instance_id)

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.num_awaiting_join and not self.pending_join_members

    def not_yet_rejoined(self) -> list[Member]:
        return [m for m in self.members.values() if not m.awaiting_join]

    def add(self, member: Member, join_token: Hashable | None) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        self.supported_protocols.update(name for name, _ in member.protocols)
        member.join_token = join_token
        if join_token is not None:
            self.num_awaiting_join += 1
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.pending_join_members.discard(member.member_id)
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is not None:
            self.supported_protocols.subtract(name for name, _ in member.protocols)
            self.supported_protocols += Counter()  # drop zero counts
            if member.awaiting_join:
                self.num_awaiting_join -= 1
            if member.group_instance_id is not None:
                self.static_members.pop(member.group_instance_id, None)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        self.pending_join_members.discard(member_id)
        self.pending_sync_members.discard(member_id)
        return member

    def update_member(self, member: Member, protocols: list[tuple[str, bytes]], rebalance_timeout_ms: int,
                      session_timeout_ms: int, join_token: Hashable | None) -> Hashable | None:
        """Take a rejoining member's new protocols and timeouts, and park `join_token`. Returns the token of
        a JoinGroup still parked from before, which the caller must answer: Kafka reads one request per
        connection at a time, this broker serves pipelined requests concurrently and answers them in order,
        so a forgotten parked request would hold back every later answer on its connection."""
        old = member.join_token
        superseded = old if join_token is not None and old is not None and old != join_token else None
        self.supported_protocols.subtract(name for name, _ in member.protocols)
        self.supported_protocols.update(name for name, _ in protocols)
        self.supported_protocols += Counter()
        member.protocols = protocols
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        if join_token is not None:
            if not member.awaiting_join:
                self.num_awaiting_join += 1
            member.join_token = join_token
        elif member.awaiting_join:
            member.join_token = None
            self.num_awaiting_join -= 1
        return superseded

    def take_join(self, member: Member) -> Hashable | None:
        """Unpark the member's JoinGroup and return its token (None when none was parked): the caller
        answers it."""
        token = member.join_token
        if token is not None:
            member.join_token = None
            self.num_awaiting_join -= 1
        return token

    @staticmethod
    def take_sync(member: Member) -> Hashable | None:
        token = member.sync_token
        member.sync_token = None
        return token

    def replace_static_member(self, instance_id: str, old_member_id: str, new_member_id: str
                              ) -> tuple[Member, Hashable | None, Hashable | None]:
        """KIP-345: a static member rejoined under a new member id and keeps its assignment. Returns the
        member and the tokens of the old id's parked JoinGroup and SyncGroup, which the caller fences."""
        member = self.members.pop(old_member_id, None)
        if member is None:
            raise RuntimeError(f"static member {instance_id} ({old_member_id}) is not in group {self.group_id}")
        join_token = self.take_join(member)
        sync_token = self.take_sync(member)
        member.member_id = new_member_id
        self.members[new_member_id] = member
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id
        self.static_members[instance_id] = new_member_id
        return member, join_token, sync_token

    def add_pending_member(self, member_id: str) -> None:
        self.pending_join_members.add(member_id)

    def maybe_elect_new_joined_leader(self) -> bool:
        """Make sure the leader is a member that rejoined; False when no member did."""
        if self.leader_id is None:
            return False
        leader = self.members.get(self.leader_id)
        if leader is not None and leader.awaiting_join:
            return True
        for m in self.members.values():
            if m.awaiting_join:
                self.leader_id = m.member_id
                return True
        return False

    # ------------------------------------------------------------------ protocols
    def candidate_protocols(self) -> set[str]:
        n = len(self.members)
        return {name for name, count in self.supported_protocols.items() if count == n}

    def supports_protocols(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        if self.state == S.EMPTY:
            return bool(protocol_type) and bool(protocols)
        return self.protocol_type == protocol_type and any(
            self.supported_protocols.get(name, 0) == len(self.members) for name, _ in protocols)

    def select_protocol(self) -> str:
        """Every member votes for its most preferred protocol that all members support; the most votes
        win (ties go to the protocol voted for first, in member order)."""
        if not self.members:
            raise RuntimeError("cannot select a protocol for an empty group")
        candidates = self.candidate_protocols()
        votes: Counter[str] = Counter(m.vote(candidates) for m in self.members.values())
        return max(votes, key=lambda p: votes[p])  # max() keeps the first of equal counts

    def init_next_generation(self, now_ms: int) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(S.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(S.EMPTY, now_ms)

    def compute_subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to, from their ConsumerProtocol subscriptions (read with the
        version-0 prefix every version shares); None when unknown (not the consumer protocol, or a
        subscription that does not parse)."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        if not self.members:
            return set()
        if self.protocol_name is None:
            return None
        topics: set[str] = set()
        try:
            for m in self.members.values():
                topics.update(parse_subscription_topics(m.metadata(self.protocol_name)))
        except (ValueError, KeyError):
            return None
        return topics

    def is_subscribed_to(self, topic: str) -> bool:
        return self.subscribed_topics is not None and topic in self.subscribed_topics

    def rebalance_timeout_ms(self) -> int:
        """The longest rebalance timeout of the members: how long a rebalance may wait for them."""
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)


def parse_subscription_topics(data: bytes) -> list[str]:
    """The topic list of a ConsumerProtocolSubscription (int16 version, then v0's array of strings)."""
    try:
        (version,) = struct.unpack_from(">h", data, 0)
        if version < 0:
            raise ValueError("negative subscription version")
        (n,) = struct.unpack_from(">i", data, 2)
        pos = 6
        if n < 0 or n > len(data):
            raise ValueError("bad topic count")
        out = []
        for _ in range(n):
            (ln,) = struct.unpack_from(">h", data, pos)
            pos += 2
            if ln < 0 or pos + ln > len(data):
                raise ValueError("bad topic name")
            out.append(data[pos:pos + ln].decode("utf-8"))
            pos += ln
        return out
    except (struct.error, UnicodeDecodeError) as e:
        raise ValueError(f"subscription does not parse: {e}") from None
