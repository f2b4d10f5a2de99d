"""SSRF guard for webhook URLs: refuse URLs that reach this host or its private networks.

Two moments use it (docs/api.md, Webhooks; `SWITCHBOARD_ALLOW_PRIVATE_WEBHOOK_URLS` turns it off):

1. Create/update of a subscription: `resolve_public_addresses(url, allow_private=...)` refuses
   the URL with InvalidInput (a 400 `{"detail": ...}`).
2. Every connection a delivery opens (app/webhooks/sender.py): `check_url_form` judges the URL
   before the request (IP literals included), and `GuardedResolver` is the HTTP client's only
   resolver, so each new connection goes to an address checked in that same lookup, never to
   whatever the host resolves to a moment later. That defeats DNS rebinding (public at check
   time, 127.0.0.1 at connect time). A kept-alive connection stays on its checked address.

Rules, and why:

- The URL is parsed with `httpx.URL`, and the sender refuses a URL whose host its own parser
  (yarl) reads differently, so the checked host is the host that is connected to.
  Backslashes, whitespace and control characters are refused before parsing: parsers disagree
  about them (`http://127.0.0.1:80\\@evil.com/`).
- Credentials in the URL (`user:pass@`) are refused, as is any `@` in the authority: clients
  send them as Basic auth, they would be stored and shown in plain text with the subscription,
  and `http://evil.com@127.0.0.1/` is a classic way to disguise the real host.
- The host is resolved with getaddrinfo and *every* address must be public. getaddrinfo also
  turns legacy numeric forms (`2130706433`, `0x7f.1`, `0177.0.0.1`, `127.1`, `0`) into the
  addresses they mean, so those are judged by where they really go.
- `localhost` and `*.localhost` are refused without a lookup (RFC 6761 reserves them).
- A host that does not resolve is refused ("URL host could not be resolved").
- Any port 1-65535 is allowed: the address decides what is reachable, and integrators do run
  receivers on odd ports.
- With `allow_private=True` the URL is still parsed and checked for its form, but nothing is
  resolved and no address is judged: the operator chose to allow internal receivers (local
  development, tests that post to 127.0.0.1). `resolve_public_addresses` then returns `[]` and
  the delivery connects to whatever the host resolves to.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network
from typing import Any

import aiohttp
import httpx
import yarl
from aiohttp.abc import AbstractResolver, ResolveResult

from app.kit.errors import InvalidInput
from app.webhooks.events import validate_url_scheme

IPAddress = IPv4Address | IPv6Address

# Resolves (host, port) to address texts; the default asks the system like a connect would.
Resolver = Callable[[str, int], Awaitable[Sequence[str]]]
# True for an address a delivery must not reach.
AddressJudge = Callable[[IPAddress], bool]

RESOLVE_TIMEOUT_SECONDS = 5.0
FORBIDDEN_ADDRESS_MESSAGE = "URL must not resolve to a private, loopback or link-local address"
UNRESOLVABLE_HOST_MESSAGE = "URL host could not be resolved"

# IANA special-purpose ranges, listed outright so the verdict does not depend on which Python
# patch release computed `is_private` / `is_global` (they changed with CVE-2024-4032).
_FORBIDDEN_IPV4 = tuple(
    IPv4Network(network)
    for network in (
        "0.0.0.0/8",  # "this network"; 0.0.0.0 reaches this host on Linux
        "10.0.0.0/8",
        "100.64.0.0/10",  # shared address space (CGNAT); cloud metadata lives here too
        "127.0.0.0/8",
        "169.254.0.0/16",  # link-local, cloud metadata 169.254.169.254
        "172.16.0.0/12",
        "192.0.0.0/24",  # IETF protocol assignments
        "192.0.2.0/24",
        "192.88.99.0/24",  # deprecated 6to4 relay anycast
        "192.168.0.0/16",
        "198.18.0.0/15",  # benchmarking
        "198.51.100.0/24",
        "203.0.113.0/24",
        "224.0.0.0/4",  # multicast
        "240.0.0.0/4",  # reserved, includes 255.255.255.255
    )
)
_FORBIDDEN_IPV6 = tuple(
    IPv6Network(network)
    for network in (
        "::/96",  # unspecified, loopback and deprecated IPv4-compatible ::a.b.c.d
        "64:ff9b:1::/48",  # local-use NAT64 (RFC 8215)
        "100::/64",  # discard-only
        "2001::/23",  # IETF protocol assignments, includes Teredo 2001::/32
        "2001:db8::/32",  # documentation
        "3fff::/20",  # documentation
        "5f00::/16",  # SRv6 SIDs
        "fc00::/7",  # unique local
        "fe80::/10",  # link-local
        "fec0::/10",  # deprecated site-local
        "ff00::/8",  # multicast
    )
)
_NAT64_WELL_KNOWN = IPv6Network("64:ff9b::/96")
_IPV4_MAPPED = IPv6Network("::ffff:0:0/96")

# An ASCII host as httpx hands it over (IDNA already applied): DNS labels or an IPv6 literal.
_HOST_CHARACTERS = re.compile(r"[a-z0-9._:-]+")
_UNSAFE_URL_CHARACTERS = re.compile(r"[\s\\\x00-\x1f\x7f]")


class ForbiddenWebhookAddress(InvalidInput):
    """The URL reaches this host or a private network, and private URLs are not allowed."""

    def __init__(self) -> None:
        super().__init__(FORBIDDEN_ADDRESS_MESSAGE, field="url")


class UnresolvableWebhookHost(InvalidInput):
    def __init__(self) -> None:
        super().__init__(UNRESOLVABLE_HOST_MESSAGE, field="url")


@dataclass(frozen=True, slots=True)
class ResolvedTarget:
    """One checked place to connect to: the URL's host name and the address it resolved to."""

    host: str  # ASCII (IDNA) host from the URL: the Host header and TLS server name
    address: IPAddress
    port: int


def _embedded_ipv4(address: IPv6Address) -> IPv4Address | None:
    """The IPv4 address a packet to `address` really goes to, for the forms that embed one."""
    if address in _IPV4_MAPPED:
        return address.ipv4_mapped
    if address in _NAT64_WELL_KNOWN:
        return IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def is_forbidden_address(address: IPAddress) -> bool:
    """True for every address a webhook must not reach while private URLs are refused."""
    if isinstance(address, IPv4Address):
        return (
            any(address in network for network in _FORBIDDEN_IPV4)
            or not address.is_global
            or address.is_private
            or address.is_reserved
        )
    if address.scope_id:  # a zone id (fe80::1%eth0) only makes sense on a local link
        return True
    embedded = _embedded_ipv4(address)
    if embedded is not None:
        # The IPv6 prefix is only a translation; the IPv4 destination alone decides.
        return is_forbidden_address(embedded)
    tunnelled = [address.sixtofour, *(address.teredo or ())]
    if any(inner is not None and is_forbidden_address(inner) for inner in tunnelled):
        return True
    return (
        any(address in network for network in _FORBIDDEN_IPV6)
        or not address.is_global
        or address.is_private
        or address.is_reserved
        or address.is_site_local
    )


async def system_resolver(host: str, port: int) -> list[str]:
    """Every address getaddrinfo gives for a TCP connection to `host`, without repeats."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def parse_webhook_url(url: str) -> httpx.URL:
    """The URL as httpx will send it, or InvalidInput naming what is wrong with its form."""
    text = validate_url_scheme(url)
    if _UNSAFE_URL_CHARACTERS.search(text):
        raise InvalidInput(
            "URL must not contain whitespace, control characters or backslashes", field="url"
        )
    authority = text.split("://", 1)[1].split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]
    if "@" in authority:
        raise InvalidInput("URL must not contain credentials", field="url")
    try:
        parsed = httpx.URL(text)
    except httpx.InvalidURL as exc:
        raise InvalidInput("URL is not valid", field="url") from exc
    if parsed.userinfo:  # the authority check above should make this unreachable
        raise InvalidInput("URL must not contain credentials", field="url")
    host = parsed.raw_host.decode("ascii")
    if not host:
        raise InvalidInput("URL must include a host", field="url")
    if not _HOST_CHARACTERS.fullmatch(host):
        raise InvalidInput("URL host is not valid", field="url")
    if parsed.port is not None and not 1 <= parsed.port <= 65535:
        raise InvalidInput("URL port must be between 1 and 65535", field="url")
    return parsed


def _is_localhost_name(host: str) -> bool:
    name = host.rstrip(".")
    return name == "localhost" or name.endswith(".localhost")


def _default_port(url: httpx.URL) -> int:
    return 443 if url.scheme == "https" else 80


async def _resolve(host: str, port: int, resolver: Resolver) -> list[IPAddress]:
    try:
        literal = ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        return [literal]
    try:
        async with asyncio.timeout(RESOLVE_TIMEOUT_SECONDS):
            texts = await resolver(host, port)
    except (OSError, UnicodeError, TimeoutError) as exc:  # socket.gaierror is an OSError
        raise UnresolvableWebhookHost() from exc
    if not texts:
        raise UnresolvableWebhookHost()
    addresses: list[IPAddress] = []
    for text in texts:
        try:
            addresses.append(ipaddress.ip_address(text))
        except ValueError as exc:  # not an address we can judge: refuse rather than guess
            raise ForbiddenWebhookAddress() from exc
    return list(dict.fromkeys(addresses))


async def resolve_public_addresses(
    url: str, *, allow_private: bool, resolver: Resolver = system_resolver
) -> list[ResolvedTarget]:
    """The checked addresses to deliver `url` to, or InvalidInput.

    Raises ForbiddenWebhookAddress when any address the host resolves to is not public (one
    bad address is enough: the client may pick any of them), UnresolvableWebhookHost when it
    resolves to nothing, and InvalidInput for a malformed URL. With `allow_private` only the
    form is checked and the result is `[]` (nothing resolved, connect to the URL as is).
    """
    parsed = parse_webhook_url(url)
    if allow_private:
        return []
    host = parsed.raw_host.decode("ascii")
    if _is_localhost_name(host):
        raise ForbiddenWebhookAddress()
    port = parsed.port or _default_port(parsed)
    addresses = await _resolve(host, port, resolver)
    if any(is_forbidden_address(address) for address in addresses):
        raise ForbiddenWebhookAddress()
    return [ResolvedTarget(host=host, address=address, port=port) for address in addresses]


@lru_cache(maxsize=4096)
def check_url_form(url: str, allow_private: bool) -> None:
    """Everything about `url` that needs no lookup, before each delivery (cached per URL).

    Judges IP-literal hosts here: the HTTP client connects to a literal without asking any
    resolver. Names are judged by `GuardedResolver` when a connection is opened.
    """
    parsed = parse_webhook_url(url)
    host = parsed.raw_host.decode("ascii")
    if (yarl.URL(url).raw_host or "").lower() != host:
        raise InvalidInput("URL host is not valid", field="url")
    if allow_private:
        return
    if _is_localhost_name(host):
        raise ForbiddenWebhookAddress()
    try:
        literal = ipaddress.ip_address(host)
    except ValueError:
        return
    if is_forbidden_address(literal):
        raise ForbiddenWebhookAddress()


class GuardedResolver(AbstractResolver):
    """The delivery client's resolver: every address a new connection may use is checked in
    the same lookup that produced it. Refusals raise InvalidInput through the client."""

    def __init__(
        self,
        *,
        allow_private: bool,
        resolver: Resolver = system_resolver,
        is_forbidden: AddressJudge = is_forbidden_address,
    ) -> None:
        self._allow_private = allow_private
        self._resolver = resolver
        self._is_forbidden = is_forbidden

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        host = host.rstrip(".")  # the client asks for the absolute name ("example.com.")
        if not self._allow_private and _is_localhost_name(host):
            raise ForbiddenWebhookAddress()
        addresses = await _resolve(host, port, self._resolver)
        if not self._allow_private and any(self._is_forbidden(a) for a in addresses):
            raise ForbiddenWebhookAddress()
        return [
            ResolveResult(
                hostname=host,
                host=str(address),
                port=port,
                family=socket.AF_INET6 if address.version == 6 else socket.AF_INET,
                proto=0,
                flags=socket.AI_NUMERICHOST,
            )
            for address in addresses
        ]

    async def close(self) -> None:
        return None


def guarded_connector(
    *,
    allow_private: bool,
    limit: int,
    keepalive_seconds: float,
    ssl: Any,
    resolver: Resolver = system_resolver,
    is_forbidden: AddressJudge = is_forbidden_address,
) -> aiohttp.TCPConnector:
    """An aiohttp connector whose only resolver is the guard: every new connection's addresses
    are judged in the lookup that opens it (no DNS cache). Pair it with `trust_env=False` on
    the session: a proxy would resolve the host itself, undoing the guard."""
    return aiohttp.TCPConnector(
        resolver=GuardedResolver(
            allow_private=allow_private, resolver=resolver, is_forbidden=is_forbidden
        ),
        use_dns_cache=False,
        limit=limit,
        keepalive_timeout=keepalive_seconds,
        ssl=ssl,
    )
