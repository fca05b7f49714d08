"""kop/security/scram_admin.py: the work of Describe/AlterUserScramCredentials with Kafka's checks, fed
with what kafka-python's admin client would send (its UserScramCredentialUpsertion salts the password)."""

from __future__ import annotations

import asyncio

from kafka.admin import UserScramCredentialUpsertion
from kafka.net.sasl.scram import ScramClient

from kop.protocol.errors import ErrorCode
from kop.security.sasl import Success
from kop.security.sasl.scram import InMemoryScramCredentialStore, ScramServer
from kop.security.scram_admin import (
    DescribedUser,
    ScramDeletion,
    ScramUpsertion,
    UserResult,
    alter_user_scram_credentials,
    describe_user_scram_credentials,
)


def upsert(user: str, mechanism: str, password: str, iterations: int = 4096) -> ScramUpsertion:
    u = UserScramCredentialUpsertion(user, mechanism, password, iterations=iterations)
    return ScramUpsertion(u.user, int(u.mechanism), u.iterations, u.salt, u.salted_password)


def test_alter_then_authenticate_then_describe_then_delete():
    async def main():
        store = InMemoryScramCredentialStore()
        results = await alter_user_scram_credentials(store, [], [
            upsert("alice", "SCRAM-SHA-256", "pw-a", 8192), upsert("bob", "SCRAM-SHA-512", "pw-b")])
        assert results == [UserResult("alice"), UserResult("bob")]
        client, server = ScramClient("alice", "pw-a", "SCRAM-SHA-256"), ScramServer("SCRAM-SHA-256", store)
        client.process_server_first_message((await server.evaluate(client.first_message())).data)
        assert isinstance(await server.evaluate(client.final_message()), Success)

        assert await describe_user_scram_credentials(store, None) == [
            DescribedUser("alice", credentials=[(1, 8192)]), DescribedUser("bob", credentials=[(2, 4096)])]
        assert await describe_user_scram_credentials(store, ["bob", "carol", "bob"]) == [
            DescribedUser("bob", ErrorCode.DUPLICATE_RESOURCE,
                          "Cannot describe SCRAM credentials for the same user twice in a single request: bob"),
            DescribedUser("carol", ErrorCode.RESOURCE_NOT_FOUND,
                          "Attempt to describe a user credential that does not exist: carol")]

        assert await alter_user_scram_credentials(store, [ScramDeletion("alice", 1)], []) == [UserResult("alice")]
        assert await describe_user_scram_credentials(store, None) == [DescribedUser("bob", credentials=[(2, 4096)])]

    asyncio.run(main())


def test_kafkas_per_user_checks():
    async def main():
        store = InMemoryScramCredentialStore()
        await alter_user_scram_credentials(store, [], [upsert("dora", "SCRAM-SHA-256", "pw")])
        results = await alter_user_scram_credentials(
            store,
            [ScramDeletion("ghost", 1), ScramDeletion("dora", 1), ScramDeletion("", 1), ScramDeletion("x", 0)],
            [upsert("few", "SCRAM-SHA-256", "pw", 4095), upsert("many", "SCRAM-SHA-512", "pw", 16385),
             upsert("dora", "SCRAM-SHA-512", "pw"), upsert("ok", "SCRAM-SHA-512", "pw", 16384)],
        )
        by_user = {r.user: (r.error_code, r.error_message) for r in results}
        assert by_user == {
            "ghost": (ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"),
            "dora": (ErrorCode.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request"),
            "": (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"),
            "x": (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"),
            "few": (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations"),
            "many": (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations"),
            "ok": (ErrorCode.NONE, None),
        }
        # dora was named twice: neither her deletion nor her new credential happened.
        assert await store.describe() == {"dora": {"SCRAM-SHA-256": 4096}, "ok": {"SCRAM-SHA-512": 16384}}

    asyncio.run(main())
