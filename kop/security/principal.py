"""Principals and the mapping of a TLS client certificate to one.

A principal is what the authorizer reasons about: ``User:alice``. SASL gives it directly (the authenticated
name); a TLS client certificate gives it through Kafka's ``ssl.principal.mapping.rules`` applied to the
subject's distinguished name as Java's ``X500Principal.getName()`` prints it (RFC 2253). Operators carry
their rules over from Kafka, so the rule syntax, the regular-expression semantics that matter in practice
(whole-DN match, ``$n`` back references) and the DN text have to be Kafka's, byte for byte.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cryptography import x509

USER_TYPE = "User"


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    """``<type>:<name>``; the type is case-sensitive and almost always ``User``."""

    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> KafkaPrincipal:
        """Parse ``User:alice`` (split at the first colon, as Kafka's SecurityUtils.parseKafkaPrincipal)."""
        kind, sep, name = text.partition(":")
        if not sep or not kind:
            raise ValueError(f"Invalid principal (expected <type>:<name>): {text!r}")
        return cls(kind, name)

    @classmethod
    def user(cls, name: str) -> KafkaPrincipal:
        return cls(USER_TYPE, name)


ANONYMOUS = KafkaPrincipal(USER_TYPE, "ANONYMOUS")  # PLAINTEXT and cert-less TLS connections

# --- the subject DN as Java prints it ------------------------------------------------------------------

# Attribute keywords Java uses in RFC 2253 output; every other attribute is printed as its dotted OID with
# the value as '#' + hex of its DER encoding (RFC 2253 section 2.4), e.g. emailAddress.
_RFC2253_KEYWORDS = {
    "2.5.4.3": "CN", "2.5.4.6": "C", "2.5.4.7": "L", "2.5.4.8": "ST", "2.5.4.10": "O", "2.5.4.11": "OU",
    "2.5.4.9": "STREET", "0.9.2342.19200300.100.1.25": "DC", "0.9.2342.19200300.100.1.1": "UID",
}
# Java (sun.security.x509.AVA.toRFC2253String) backslash-escapes these anywhere in a value, which is a
# superset of what RFC 2253 demands ('=' and '#' inside a value included).
_ESCAPED = set(',=+<>#;"\\')


def _escape(value: str) -> str:
    out = []
    for ch in value:
        if ch in _ESCAPED:
            out.append("\\" + ch)
        elif ch == "\x00":
            out.append("\\00")
        else:
            out.append(ch)
    text = "".join(out)
    # A leading space, and trailing spaces, are escaped too (a leading '#' already is, above).
    if text.startswith(" "):
        text = "\\" + text
    stripped = text.rstrip(" ")
    if len(stripped) != len(text) and not stripped.endswith("\\"):
        text = stripped + "\\ " * (len(text) - len(stripped))
    return text


def _der_length(n: int) -> bytes:
    if n < 0x80:
        return bytes([n])
    body = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([0x80 | len(body)]) + body


def _der_value(attr: x509.NameAttribute) -> bytes:
    """The attribute value's DER encoding (tag, length, bytes) - what Java hex-prints for OIDs it has no
    RFC 2253 keyword for. Only string types occur in subject names."""
    # The ASN.1 universal tag the value was encoded with; cryptography keeps it only privately, so fall back
    # to UTF8String (12), what it writes for attributes it builds itself.
    asn1_type = getattr(attr, "_type", None)
    tag = getattr(asn1_type, "value", 12)
    raw = attr.value if isinstance(attr.value, bytes) else attr.value.encode(
        "utf-16-be" if tag == 30 else "utf-32-be" if tag == 28 else "utf-8")
    return bytes([tag]) + _der_length(len(raw)) + raw


def _ava(attr: x509.NameAttribute) -> str:
    oid = attr.oid.dotted_string
    keyword = _RFC2253_KEYWORDS.get(oid)
    if keyword is None:
        return f"{oid}=#{_der_value(attr).hex()}"
    value = attr.value if isinstance(attr.value, str) else attr.value.decode("utf-8", "replace")
    return f"{keyword}={_escape(value)}"


def rfc2253_name(name: x509.Name) -> str:
    """The DN as ``X500Principal.getName()`` prints it: most specific RDN first, ``,`` between RDNs and
    ``+`` inside a multi-valued RDN."""
    rdns = list(name.rdns)
    rdns.reverse()
    return ",".join("+".join(_ava(a) for a in rdn) for rdn in rdns)


def certificate_subject(cert: x509.Certificate | bytes) -> str:
    """The subject DN of a certificate (a parsed one, or DER bytes as ``getpeercert(True)`` gives)."""
    if isinstance(cert, bytes | bytearray):
        cert = x509.load_der_x509_certificate(bytes(cert))
    return rfc2253_name(cert.subject)


# --- ssl.principal.mapping.rules ---------------------------------------------------------------------


class NoMatchingRule(Exception):
    """No rule applied to the DN: Kafka fails the TLS authentication then."""


# One rule as Kafka's SslPrincipalMapper reads it: DEFAULT, or RULE:<regex>/<replacement>/<L|U>? where
# '/' and '\' inside the two parts are escaped with '\'. Anything else (what the last alternative
# catches) is an invalid rule.
_RULE = r"(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_RULE_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(?:,\s*|$)")
_RULE_PARSER = re.compile(_RULE)
_JAVA_NAMED_GROUP = re.compile(r"(?<!\\)\(\?<(?![=!])")


@dataclass(frozen=True, slots=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None = DEFAULT
    replacement: str = ""
    case: str = ""  # "", "L" or "U"

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        if not self.pattern.fullmatch(dn):
            return None
        # Java's String.replaceAll: every (non-overlapping) match in the DN is replaced; since the
        # pattern matched the whole DN that is normally one replacement, but an empty-matching tail can
        # add a second - re.sub with the same pattern behaves the same way.
        result = self.pattern.sub(_java_replacement(self.replacement, self.pattern.groups), dn)
        if self.case == "L":
            result = result.lower()
        elif self.case == "U":
            result = result.upper()
        return result


def _java_replacement(replacement: str, groups: int):
    """A function for re.sub that expands a java.util.regex replacement string: ``$n`` is group n
    (Kafka first turns a ``$n`` with n above the group count into a literal, trimming digits as Java
    does), ``\\x`` is a literal x."""

    def expand(m: re.Match[str]) -> str:
        out: list[str] = []
        i = 0
        while i < len(replacement):
            ch = replacement[i]
            if ch == "\\" and i + 1 < len(replacement):
                out.append(replacement[i + 1])
                i += 2
            elif ch == "$" and groups > 0 and i + 1 < len(replacement) and replacement[i + 1].isdigit():
                j = i + 1
                while j < len(replacement) and replacement[j].isdigit():
                    j += 1
                digits = replacement[i + 1:j]
                if digits.startswith("0"):
                    # Kafka leaves $0 alone; Java expands it to the whole match.
                    out.append(m.group(0) + digits[1:])
                    i = j
                    continue
                # Java takes the longest prefix of the digits that names an existing group.
                k = len(digits)
                while k > 1 and int(digits[:k]) > groups:
                    k -= 1
                if int(digits[:k]) > groups:
                    out.append("$" + digits)  # no such group: Kafka escapes it into a literal
                else:
                    out.append((m.group(int(digits[:k])) or "") + digits[k:])
                i = j
            elif ch == "$":
                raise ValueError(f"Illegal group reference in replacement {replacement!r}")
            else:
                out.append(ch)
                i += 1
        return "".join(out)

    return expand


class SslPrincipalMapper:
    """``ssl.principal.mapping.rules``: the first rule whose regex matches the whole DN names the user."""

    def __init__(self, rules: str | None = "DEFAULT") -> None:
        parsed = [self._parse(r) for r in self._split(rules if rules is not None else "DEFAULT")]
        self.rules = [r for r in parsed if r is not None]

    @staticmethod
    def _split(rules: str) -> list[str]:
        out = []
        pos = 0
        text = rules.strip()
        while pos <= len(text):
            m = _RULE_SPLITTER.search(text, pos)
            if m is None:
                break
            out.append(m.group(1))
            if m.end() == pos:  # an empty match at the end: Java's find() then stops
                break
            pos = m.end()
        return out

    @staticmethod
    def _parse(rule: str) -> _Rule | None:
        m = _RULE_PARSER.match(rule)
        if m is None:
            raise ValueError(f"Invalid rule: {rule}")
        if m.end() != len(rule):
            raise ValueError(f"Invalid rule: `{rule}`, unmatched substring: `{rule[m.end():]}`")
        if m.group(1) is not None:
            return _Rule(None)
        if m.group(2) is not None:
            # The regex is taken verbatim (escapes included), as Kafka hands it to java.util.regex;
            # Python's re agrees with Java on the constructs DN rules use (classes, groups, \\/ ...),
            # once Java's named groups (?<name>...) are spelled Python's way.
            return _Rule(re.compile(_JAVA_NAMED_GROUP.sub("(?P<", m.group(2))), m.group(3), m.group(4))
        return None  # an empty rule is ignored

    def name(self, dn: str) -> str:
        for rule in self.rules:
            result = rule.apply(dn)
            if result is not None:
                return result
        raise NoMatchingRule(f"No rules apply to {dn}")

    def principal(self, cert: x509.Certificate | bytes | None) -> KafkaPrincipal:
        """The principal of a TLS connection: ANONYMOUS without a (verified) client certificate."""
        if cert is None:
            return ANONYMOUS
        return KafkaPrincipal.user(self.name(certificate_subject(cert)))
