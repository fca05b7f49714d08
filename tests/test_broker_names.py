"""KoP's topic-name mapping: short, tenant/ns/topic and persistent:// spellings name one topic."""

import pytest

from kop.topics.names import InvalidTopicName, TopicName, parse_topic_name


def p(name):
    return parse_topic_name(name, "public", "default")


def test_three_spellings_one_topic():
    assert p("t") == p("public/default/t") == p("persistent://public/default/t") == TopicName("public", "default", "t")
    assert p("t").canonical == "persistent://public/default/t"


def test_other_namespace():
    t = p("my-tenant/my-ns/orders")
    assert (t.tenant, t.namespace, t.local) == ("my-tenant", "my-ns", "orders")
    assert t.kafka_name("public", "default") == "my-tenant/my-ns/orders"
    assert p("orders").kafka_name("public", "default") == "orders"


def test_ledger_name_follows_pulsar_layout():
    assert p("t").ledger_name(3) == "public/default/persistent/t-partition-3"


def test_only_the_partition_suffix_is_reserved():
    """A Pulsar partition's default dead-letter topic is `<topic>-partition-<n>-<subscription>-DLQ`."""
    t = p("t-partition-0-sub-DLQ")
    assert t.ledger_name(0) == "public/default/persistent/t-partition-0-sub-DLQ-partition-0"


@pytest.mark.parametrize("bad", ["", ".", "..", "a b", "x" * 250, "a/b", "persistent://a/b", "a/b/c/d", "t-partition-1",
                                 "x-partition-0-y-partition-12", "ü"])
def test_invalid_names(bad):
    with pytest.raises(InvalidTopicName):
        p(bad)
