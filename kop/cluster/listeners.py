"""Pulsar's named listeners: `advertisedListeners`, `internalListenerName`, and which address a lookup answers.

A broker behind NAT or in Kubernetes is reached at different addresses from different networks. Pulsar lets it
advertise several named listeners (`advertisedListeners=internal:pulsar://10.0.0.5:6650,external:pulsar://
broker-0.example.com:16650`); a client that names one (`listenerName`, sent as the binary LOOKUP's
`advertised_listener_name`, or the HTTP lookup's `listenerName` query / `X-Pulsar-ListenerName` header) is
answered with that listener's pulsar:// and pulsar+ssl:// addresses; a client that names none gets the internal
listener's (`internalListenerName`, default the first one named). A name the broker does not have is refused as
Pulsar 5.0 does: ServiceNotReady "The broker '<broker id>' does not have '<name>' listener configured." (measured on
the reference; Pulsar 4.0 said "the broker do not have <name> listener"), the broker id being Pulsar's: the
advertised host and the web service port (`broker_id`).

Why here (kop/cluster): the addresses travel in the broker's registration (BrokerInfo.listeners), so a lookup
answered by a broker that does not own the topic picks the owner's address under the client's listener name, and
the binary and the HTTP lookup (kop/pulsar/lookup.py, kop/admin/lookup.py) share this one selection rule.
Registration entries: the unnamed `pulsar` / `pulsar+ssl` (the internal listener's, or the bound address without
named listeners) and `pulsar@<name>` / `pulsar+ssl@<name>` per named listener. Only the advertised address is
named: every listener is served by the one bound port (`bindAddress`:`brokerServicePort`), as Pulsar's named
listeners without `bindAddresses`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

PLAIN, TLS = "pulsar", "pulsar+ssl"
_SCHEMES = (PLAIN, TLS, "http", "https")


class ListenerError(ValueError):
    """A malformed `advertisedListeners` / `internalListenerName` (a start-up error naming the key)."""


class UnknownListener(LookupError):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name

    def refusal(self, broker: str) -> str:
        """Pulsar's words, as clients log them, naming the broker by its id (`broker_id`)."""
        return f"The broker '{broker}' does not have '{self.name}' listener configured."


def broker_id(web_url: str | None, fallback: str) -> str:
    """Pulsar's id of a broker, as its lookups and messages name it: `host:port` of its web service URL (the
    advertised address and webServicePort); `fallback` (the registration key) for a broker without one."""
    if not web_url:
        return fallback
    return web_url.split("://", 1)[-1].rstrip("/")


@dataclass
class NamedListeners:
    """The parsed keys: listener name -> scheme -> (host, port), in the order named; `internal` the default."""

    by_name: dict[str, dict[str, tuple[str, int]]] = field(default_factory=dict)
    internal: str | None = None

    def entries(self) -> list[tuple[str, str, int]]:
        """The registration entries (name, host, port) of every named listener's pulsar addresses."""
        out: list[tuple[str, str, int]] = []
        for name, schemes in self.by_name.items():
            for scheme in (PLAIN, TLS):
                if scheme in schemes:
                    host, port = schemes[scheme]
                    out.append((f"{scheme}@{name}", host, port))
        return out

    def internal_address(self, scheme: str) -> tuple[str, int] | None:
        return self.by_name.get(self.internal or "", {}).get(scheme)


def parse(advertised: str, internal: str = "") -> NamedListeners:
    """`name:scheme://host:port` entries, comma-separated; one address per scheme per name."""
    out = NamedListeners()
    for item in (s.strip() for s in advertised.split(",")):
        if not item:
            continue
        name, sep, url = item.partition(":")
        scheme, sep2, address = url.partition("://")
        host, sep3, port_text = address.rpartition(":")
        if not (sep and sep2 and sep3 and name and host) or scheme not in _SCHEMES or not port_text.isdigit():
            raise ListenerError(f"bad value for advertisedListeners: {item!r} is not "
                                f"<name>:<{'|'.join(_SCHEMES)}>://<host>:<port>")
        port = int(port_text)
        if not 0 < port <= 65535:
            raise ListenerError(f"bad value for advertisedListeners: {item!r} has no valid port")
        schemes = out.by_name.setdefault(name, {})
        if scheme in schemes:
            raise ListenerError(f"bad value for advertisedListeners: listener {name} has two {scheme} addresses")
        schemes[scheme] = (host.strip("[]"), port)
    if internal and internal not in out.by_name:
        raise ListenerError(f"bad value for internalListenerName: {internal!r} is not a listener of "
                            f"advertisedListeners ({', '.join(out.by_name) or 'none'})")
    for name, schemes in out.by_name.items():
        if PLAIN not in schemes and TLS not in schemes:
            raise ListenerError(f"bad value for advertisedListeners: listener {name} has no pulsar:// or "
                                "pulsar+ssl:// address")
    out.internal = internal or next(iter(out.by_name), None)
    return out


def select(registered: Iterable[tuple[str, str, int]], listener: str | None) -> tuple[str | None, str | None]:
    """(pulsar:// URL, pulsar+ssl:// URL) that a lookup naming `listener` (None: none named) answers from a
    broker's registration; UnknownListener when it was named and the broker does not have it."""
    entries = {name: (host, port) for name, host, port in registered}
    plain_key, tls_key = (PLAIN, TLS) if not listener else (f"{PLAIN}@{listener}", f"{TLS}@{listener}")
    plain, tls = entries.get(plain_key), entries.get(tls_key)
    if listener and plain is None and tls is None:
        raise UnknownListener(listener)
    return (None if plain is None else f"pulsar://{_host(plain[0])}:{plain[1]}",
            None if tls is None else f"pulsar+ssl://{_host(tls[0])}:{tls[1]}")


def _host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
