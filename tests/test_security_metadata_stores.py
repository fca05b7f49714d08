"""kop/security/metadata_stores.py: SCRAM users and ACLs in the MetadataStore (the embedded sqlite one
here), shared by two brokers' authenticators/authorizers and surviving a restart."""

from __future__ import annotations

import asyncio
import json

from kafka.net.sasl.scram import ScramClient

from kop.security.acl import AclBinding, AclBindingFilter, AclOperation, AclPermissionType, Authorizer
from kop.security.acl.model import PatternType, ResourceType
from kop.security.metadata_stores import MetadataAclStore, MetadataScramCredentialStore
from kop.security.principal import KafkaPrincipal
from kop.security.sasl import Success
from kop.security.sasl.scram import ScramCredential, ScramServer
from kop.storage.local.metadata import SqliteMetadataStore

# Spaces and '!' are outside base64's alphabet, so the check that the stored credential does not hold the
# password cannot be met by chance inside a random salt or key (a 2-letter password once was: "...iQJpwQ...").
PASSWORD = "not in base64!"
READ_T = AclBinding.of(ResourceType.TOPIC, "t", PatternType.LITERAL, "User:alice", "*", AclOperation.READ,
                       AclPermissionType.ALLOW)


def test_scram_users_created_on_one_broker_authenticate_on_another(tmp_path):
    async def main():
        ms = SqliteMetadataStore(tmp_path)
        broker1, broker2 = MetadataScramCredentialStore(ms), MetadataScramCredentialStore(ms)
        for user in ("alice", "team/x.y"):
            await broker1.put(user, "SCRAM-SHA-256", ScramCredential.from_password("SCRAM-SHA-256", PASSWORD))
        await broker1.put("alice", "SCRAM-SHA-512", ScramCredential.from_password("SCRAM-SHA-512", PASSWORD, iterations=8192))
        client, server = ScramClient("team/x.y", PASSWORD, "SCRAM-SHA-256"), ScramServer("SCRAM-SHA-256", broker2)
        client.process_server_first_message((await server.evaluate(client.first_message())).data)
        done = await server.evaluate(client.final_message())
        assert isinstance(done, Success) and done.principal == KafkaPrincipal.user("team/x.y")
        assert await broker2.describe() == {"alice": {"SCRAM-SHA-256": 4096, "SCRAM-SHA-512": 8192},
                                            "team/x.y": {"SCRAM-SHA-256": 4096}}
        stored = (await ms.get("/kop/security/scram/alice/SCRAM-SHA-256"))[0]
        assert PASSWORD.encode() not in stored and set(json.loads(stored)) == {
            "salt", "iterations", "stored_key", "server_key"}
        assert await broker2.delete("team/x.y", "SCRAM-SHA-256")
        assert not await broker2.delete("team/x.y", "SCRAM-SHA-256")
        assert await ms.children("/kop/security/scram") == ["alice"]
        await ms.close()

    asyncio.run(main())


def test_acls_created_on_one_broker_are_enforced_by_another_and_survive_restart(tmp_path):
    async def main():
        ms = SqliteMetadataStore(tmp_path)
        one = Authorizer(store=MetadataAclStore(ms))
        two = Authorizer(store=MetadataAclStore(ms))
        await one.load()
        await two.load()
        seen = await two.store.version()
        assert await one.create_acls([READ_T, READ_T]) == [None, None]
        assert await two.store.version() != seen  # broker two notices a change ...
        await two.load()  # ... and reloads
        alice = KafkaPrincipal.user("alice")
        assert two.authorize(alice, "10.0.0.1", AclOperation.READ, ResourceType.TOPIC, "t")
        assert len(await ms.children("/kop/security/acls")) == 1  # the duplicate is one node
        await ms.close()

        ms2 = SqliteMetadataStore(tmp_path)
        three = Authorizer(store=MetadataAclStore(ms2))
        await three.load()
        assert three.describe_acls(AclBindingFilter()) == [READ_T]
        [result] = await three.delete_acls([AclBindingFilter()])
        assert result.deleted == [READ_T]
        assert await MetadataAclStore(ms2).load() == set()
        await ms2.close()

    asyncio.run(main())
