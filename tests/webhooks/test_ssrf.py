"""SSRF guard: hostile webhook URLs are refused, public ones pass, deliveries stay guarded."""

from __future__ import annotations

import asyncio
import datetime
import socket
import ssl
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from ipaddress import IPv4Address, IPv6Address, ip_address
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from app.kit.errors import InvalidInput
from app.webhooks import ssrf
from app.webhooks.sender import WebhookSender
from app.webhooks.ssrf import (
    FORBIDDEN_ADDRESS_MESSAGE,
    UNRESOLVABLE_HOST_MESSAGE,
    ForbiddenWebhookAddress,
    ResolvedTarget,
    UnresolvableWebhookHost,
    is_forbidden_address,
    resolve_public_addresses,
    system_resolver,
)

PUBLIC_V4 = "93.184.216.34"
PUBLIC_V6 = "2606:2800:220:1:248:1893:25c8:1946"

# Fake DNS for names; anything else (numeric forms like 2130706433) goes to the real getaddrinfo,
# which needs no DNS server for them.
FAKE_DNS: dict[str, list[str]] = {
    "evil.example": ["10.0.0.5"],
    "mapped.example": ["::ffff:127.0.0.1"],
    "metadata.example": ["169.254.169.254"],
    "cgnat.example": ["100.100.100.200"],
    "loopback6.example": ["::1"],
    "nat64.example": ["64:ff9b::a9fe:a9fe"],
    "sixtofour.example": ["2002:7f00:1::"],
    "ula.example": ["fd00::1"],
    "sitelocal.example": ["fec0::1"],
    "multicast.example": ["224.0.0.251"],
    "mixed.example": [PUBLIC_V4, "10.0.0.5"],
    "mixed6.example": [PUBLIC_V6, "fe80::1"],
    "public.example": [PUBLIC_V4, PUBLIC_V6],
    "v6only.example": [PUBLIC_V6],
    "xn--bcher-kva.example": [PUBLIC_V4],
    "nothing.example": [],
    "garbage.example": ["not-an-address"],
}


async def fake_resolver(host: str, port: int) -> Sequence[str]:
    if host in FAKE_DNS:
        return FAKE_DNS[host]
    if host.endswith(".example"):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    return await system_resolver(host, port)


async def no_lookups(host: str, port: int) -> Sequence[str]:
    raise AssertionError(f"unexpected lookup of {host}:{port}")


async def check(url: str, *, allow_private: bool = False) -> list[ResolvedTarget]:
    return await resolve_public_addresses(url, allow_private=allow_private, resolver=fake_resolver)


# (url, the detail it is refused with)
FORBIDDEN = FORBIDDEN_ADDRESS_MESSAGE
NOT_VALID = "URL is not valid"
HOSTILE_URLS: list[tuple[str, str]] = [
    ("http://127.0.0.1/", FORBIDDEN),
    ("http://127.0.0.1:8000/hook", FORBIDDEN),
    ("http://localhost/", FORBIDDEN),
    ("http://LOCALHOST./", FORBIDDEN),
    ("http://api.localhost:8080/", FORBIDDEN),
    ("http://2130706433/", FORBIDDEN),  # decimal 127.0.0.1
    ("http://0x7f.1/", FORBIDDEN),  # hex, short form
    ("http://0x7f000001/", FORBIDDEN),
    ("http://017700000001/", FORBIDDEN),  # octal, one number
    ("http://127.1/", FORBIDDEN),
    ("http://0/", FORBIDDEN),  # 0.0.0.0: this host
    ("http://0.0.0.0:8000/", FORBIDDEN),
    ("http://0177.0.0.1/", NOT_VALID),  # octal dotted: httpx itself refuses it
    ("http://127。0。0。1/", FORBIDDEN),  # ideographic full stops, normalised to dots
    ("http://①②⑦.⓪.⓪.①/", NOT_VALID),
    ("http://[::1]/", FORBIDDEN),
    ("http://[::]/", FORBIDDEN),
    ("http://[::ffff:7f00:1]/", FORBIDDEN),
    ("http://[::ffff:127.0.0.1]/", FORBIDDEN),
    ("http://[0:0:0:0:0:ffff:127.0.0.1]/", FORBIDDEN),
    ("http://[::127.0.0.1]/", FORBIDDEN),  # IPv4-compatible
    ("http://[::ffff:a9fe:a9fe]/", FORBIDDEN),
    ("http://169.254.169.254/latest/meta-data/", FORBIDDEN),
    ("http://100.100.100.200/", FORBIDDEN),  # shared 100.64/10 (Alibaba metadata)
    ("http://10.0.0.5:8443/hook", FORBIDDEN),
    ("http://172.16.0.1/", FORBIDDEN),
    ("http://192.168.1.1/", FORBIDDEN),
    ("http://224.0.0.1/", FORBIDDEN),
    ("http://255.255.255.255/", FORBIDDEN),
    ("http://240.0.0.1/", FORBIDDEN),
    ("http://198.18.0.1/", FORBIDDEN),
    ("http://[fe80::1]/", FORBIDDEN),
    ("http://[fe80::1%25eth0]/", "URL host is not valid"),
    ("http://[fc00::1]/", FORBIDDEN),
    ("http://[fd12:3456::1]/", FORBIDDEN),
    ("http://[fec0::1]/", FORBIDDEN),
    ("http://[ff02::1]/", FORBIDDEN),
    ("http://[64:ff9b::a9fe:a9fe]/", FORBIDDEN),  # NAT64 of 169.254.169.254
    ("http://[64:ff9b::7f00:1]/", FORBIDDEN),
    ("http://[2002:a9fe:a9fe::]/", FORBIDDEN),  # 6to4 of 169.254.169.254
    ("http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/", FORBIDDEN),  # Teredo
    ("http://evil.example/", FORBIDDEN),
    ("https://mapped.example/", FORBIDDEN),
    ("http://metadata.example/latest/meta-data/", FORBIDDEN),
    ("http://cgnat.example/", FORBIDDEN),
    ("http://loopback6.example/", FORBIDDEN),
    ("http://nat64.example/", FORBIDDEN),
    ("http://sixtofour.example/", FORBIDDEN),
    ("http://ula.example/", FORBIDDEN),
    ("http://sitelocal.example/", FORBIDDEN),
    ("http://multicast.example/", FORBIDDEN),
    ("http://mixed.example/", FORBIDDEN),  # one public and one private address
    ("https://mixed6.example/", FORBIDDEN),
    ("http://garbage.example/", FORBIDDEN),  # an answer we cannot judge
    ("http://127.0.0.1#@public.example/", FORBIDDEN),  # fragment trick
    ("http://public.example@127.0.0.1/", "URL must not contain credentials"),
    (
        "http://127.0.0.1:80\\@public.example/",
        ("URL must not contain whitespace, control characters or backslashes"),
    ),
]


def test_enough_hostile_urls() -> None:
    assert len(HOSTILE_URLS) >= 25


@pytest.mark.parametrize(("url", "detail"), HOSTILE_URLS)
async def test_hostile_url_is_refused(url: str, detail: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        await check(url)
    assert refused.value.message == detail
    assert refused.value.status == 400


async def test_forbidden_address_error_is_invalid_input() -> None:
    with pytest.raises(ForbiddenWebhookAddress) as refused:
        await check("http://evil.example/")
    assert isinstance(refused.value, InvalidInput)
    assert refused.value.field == "url"


@pytest.mark.parametrize(
    ("url", "detail"),
    [
        ("ftp://public.example/", "URL must start with http:// or https://"),
        ("file:///etc/passwd", "URL must start with http:// or https://"),
        ("gopher://127.0.0.1:6379/_", "URL must start with http:// or https://"),
        ("javascript:alert(1)", "URL must start with http:// or https://"),
        ("public.example/hook", "URL must start with http:// or https://"),
        ("   ", "URL must start with http:// or https://"),
        ("http://", "URL must include a host"),
        ("http:///path", "URL must include a host"),
        ("http://:80/", "URL must include a host"),
        (
            "http://public .example/",
            ("URL must not contain whitespace, control characters or backslashes"),
        ),
        (
            "http://public.example/\x00",
            ("URL must not contain whitespace, control characters or backslashes"),
        ),
        ("http://user:secret@public.example/", "URL must not contain credentials"),
        ("http://@public.example/", "URL must not contain credentials"),
        ("http://public.example:0/", "URL port must be between 1 and 65535"),
        ("http://public.example:99999/", "URL port must be between 1 and 65535"),
        ("http://public.example/" + "a" * 2048, "URL must be at most 2048 characters"),
    ],
)
async def test_malformed_url_is_refused(url: str, detail: str) -> None:
    for allow_private in (False, True):  # the form is checked even when private URLs are allowed
        with pytest.raises(InvalidInput) as refused:
            await check(url, allow_private=allow_private)
        assert refused.value.message == detail


@pytest.mark.parametrize("url", ["http://nowhere.example/", "https://nothing.example/hook"])
async def test_unresolvable_host_is_refused(url: str) -> None:
    with pytest.raises(UnresolvableWebhookHost) as refused:
        await check(url)
    assert refused.value.message == UNRESOLVABLE_HOST_MESSAGE


async def test_slow_resolver_counts_as_unresolvable(monkeypatch: pytest.MonkeyPatch) -> None:
    async def hanging(host: str, port: int) -> Sequence[str]:
        await asyncio.sleep(10)
        return [PUBLIC_V4]

    monkeypatch.setattr(ssrf, "RESOLVE_TIMEOUT_SECONDS", 0.01)
    with pytest.raises(UnresolvableWebhookHost):
        await resolve_public_addresses(
            "https://public.example/", allow_private=False, resolver=hanging
        )


async def test_public_name_returns_every_checked_address() -> None:
    targets = await check("https://public.example/hooks/in?x=1")
    assert targets == [
        ResolvedTarget(host="public.example", address=IPv4Address(PUBLIC_V4), port=443),
        ResolvedTarget(host="public.example", address=IPv6Address(PUBLIC_V6), port=443),
    ]


@pytest.mark.parametrize(
    ("url", "host", "address", "port"),
    [
        ("http://public.example/hook", "public.example", PUBLIC_V4, 80),
        ("HTTPS://Public.Example:8443/hook", "public.example", PUBLIC_V4, 8443),
        ("  https://v6only.example/hook  ", "v6only.example", PUBLIC_V6, 443),
        ("https://bücher.example/", "xn--bcher-kva.example", PUBLIC_V4, 443),
        (f"http://{PUBLIC_V4}:8080/", PUBLIC_V4, PUBLIC_V4, 8080),
        (f"https://[{PUBLIC_V6}]/", PUBLIC_V6, PUBLIC_V6, 443),
        ("https://[64:ff9b::5db8:d822]/", "64:ff9b::5db8:d822", "64:ff9b::5db8:d822", 443),
    ],
)
async def test_public_url_is_accepted(url: str, host: str, address: str, port: int) -> None:
    targets = await check(url)
    assert targets[0] == ResolvedTarget(host=host, address=ip_address(address), port=port)


async def test_ip_literal_needs_no_lookup() -> None:
    targets = await resolve_public_addresses(
        f"http://{PUBLIC_V4}/", allow_private=False, resolver=no_lookups
    )
    assert [target.address for target in targets] == [IPv4Address(PUBLIC_V4)]


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8000/hook",
        "http://localhost/",
        "http://[::1]:9000/",
        "http://169.254.169.254/",
        "http://nowhere.example/",
    ],
)
async def test_allow_private_accepts_without_resolving(url: str) -> None:
    assert await resolve_public_addresses(url, allow_private=True, resolver=no_lookups) == []


@pytest.mark.parametrize(
    "address",
    ["8.8.8.8", PUBLIC_V4, PUBLIC_V6, "2606:4700::1111", "2002:808:808::", "::ffff:8.8.8.8"],
)
def test_public_address_is_allowed(address: str) -> None:
    assert not is_forbidden_address(ip_address(address))


@pytest.mark.parametrize(
    "address",
    ["127.0.0.1", "::1", "fe80::1%eth0", "64:ff9b:1::a00:1", "2001:db8::1", "100::1", "0.1.2.3"],
)
def test_special_address_is_forbidden(address: str) -> None:
    assert is_forbidden_address(ip_address(address))


# Delivery: the sender connects only to addresses its own resolver judged, keeps the URL's
# host for Host and TLS, reuses connections per host only, and never follows redirects.

HOOK_HOST = "hooks.example.test"


async def loopback_dns(host: str, port: int) -> Sequence[str]:
    """Every name resolves to 127.0.0.1: only the sender's resolver can get a request there."""
    return ["127.0.0.1"]


def sender_for_tests(
    *, allow_loopback: bool = True, ssl_context: ssl.SSLContext | None = None
) -> WebhookSender:
    """A guarded sender whose judge lets 127.0.0.1 through (the test receiver lives there)
    unless `allow_loopback` is False, when the real judge decides."""

    def judge(address: ssrf.IPAddress) -> bool:
        if allow_loopback and address == IPv4Address("127.0.0.1"):
            return False
        return is_forbidden_address(address)

    return WebhookSender(
        allow_private=False,
        timeout_seconds=5,
        resolver=loopback_dns,
        ssl_context=ssl_context,
        is_forbidden=judge,
    )


@dataclass
class RecordingServer:
    port: int
    connections: int = 0
    requests: list[bytes] = field(default_factory=list)
    server_names: list[str | None] = field(default_factory=list)


async def _answer(
    server: RecordingServer,
    status_line: bytes,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
) -> None:
    """Answers every request on the connection (keep-alive) until the client hangs up."""
    server.connections += 1
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            server.requests.append(head + await reader.readexactly(length))
            writer.write(status_line + b"\r\nContent-Length: 0\r\n\r\n")
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
        pass  # the client hung up, or refused the certificate
    finally:
        writer.close()


@asynccontextmanager
async def recording_server(
    status_line: bytes = b"HTTP/1.1 204 No Content", tls: ssl.SSLContext | None = None
) -> AsyncIterator[RecordingServer]:
    recorder = RecordingServer(port=0)
    if tls is not None:
        tls.sni_callback = lambda _sock, name, _ctx: recorder.server_names.append(name)
    server = await asyncio.start_server(
        lambda r, w: _answer(recorder, status_line, r, w), "127.0.0.1", 0, ssl=tls
    )
    recorder.port = server.sockets[0].getsockname()[1]
    async with server:
        yield recorder


async def test_request_goes_to_the_checked_address_with_the_original_host() -> None:
    sender = sender_for_tests()
    try:
        async with recording_server() as server:
            # hooks.example.test resolves nowhere real: only the sender's resolver answers.
            url = f"http://{HOOK_HOST}:{server.port}/hook"
            outcome = await sender.post(url, b'{"a":1}', {"X-Test": "1"})
    finally:
        await sender.aclose()
    assert outcome.status_code == 204, outcome
    (raw,) = server.requests
    assert raw.startswith(b"POST /hook HTTP/1.1\r\n")
    assert f"\r\nHost: {HOOK_HOST}:{server.port}\r\n".encode() in raw
    assert b"\r\nX-Test: 1\r\n" in raw
    assert raw.endswith(b'\r\n\r\n{"a":1}')


async def test_a_name_that_resolves_to_loopback_is_refused_at_connect() -> None:
    # DNS rebinding: the name passed at create time; now it points at this host.
    sender = sender_for_tests(allow_loopback=False)
    try:
        async with recording_server() as server:
            outcome = await sender.post(f"http://{HOOK_HOST}:{server.port}/hook", b"{}", {})
    finally:
        await sender.aclose()
    assert outcome.status_code is None
    assert outcome.error == f"refused: {FORBIDDEN_ADDRESS_MESSAGE}"
    assert server.connections == 0


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:{port}/", "http://[::1]:{port}/", "http://localhost:{port}/"],
)
async def test_forbidden_literals_and_names_are_refused_before_any_lookup(url: str) -> None:
    sender = WebhookSender(allow_private=False, timeout_seconds=5, resolver=no_lookups)
    try:
        async with recording_server() as server:
            outcome = await sender.post(url.format(port=server.port), b"{}", {})
    finally:
        await sender.aclose()
    assert outcome.error == f"refused: {FORBIDDEN_ADDRESS_MESSAGE}"
    assert server.connections == 0


async def test_connections_are_kept_alive_per_host_and_never_shared_between_hosts() -> None:
    # Both names resolve to the same address; a pool keyed on the address would hand one
    # host's connection (and TLS session) to the other.
    sender = sender_for_tests()
    try:
        async with recording_server() as server:
            for host in ("a.example.test", "b.example.test", "a.example.test", "b.example.test"):
                outcome = await sender.post(f"http://{host}:{server.port}/hook", b"{}", {})
                assert outcome.status_code == 204
    finally:
        await sender.aclose()
    assert len(server.requests) == 4
    assert server.connections == 2


async def test_guard_off_connects_to_the_url_as_is() -> None:
    sender = WebhookSender(allow_private=True, timeout_seconds=5)
    try:
        async with recording_server() as server:
            outcome = await sender.post(f"http://127.0.0.1:{server.port}/hook", b"{}", {})
    finally:
        await sender.aclose()
    assert outcome.status_code == 204


async def test_redirects_are_not_followed() -> None:
    status = b"HTTP/1.1 302 Found\r\nLocation: http://169.254.169.254/latest/meta-data/"
    sender = sender_for_tests()
    try:
        async with recording_server(status) as server:
            outcome = await sender.post(f"http://{HOOK_HOST}:{server.port}/hook", b"{}", {})
    finally:
        await sender.aclose()
    assert outcome.status_code == 302
    assert outcome.error == "HTTP 302"
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    "url", ["http://a.example.test:80\\@127.0.0.1/", "http://user@a.example.test/"]
)
async def test_urls_parsers_disagree_about_are_refused(url: str) -> None:
    sender = sender_for_tests()
    try:
        outcome = await sender.post(url, b"{}", {})
    finally:
        await sender.aclose()
    assert outcome.error is not None
    assert outcome.error.startswith("refused: ")


def _tls_contexts(name: str, directory: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A server context with a certificate for `name`, and a client context trusting its CA."""
    now = datetime.datetime.now(datetime.UTC)
    valid = (now - datetime.timedelta(hours=1), now + datetime.timedelta(hours=1))
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "switchboard test ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(valid[0])
        .not_valid_after(valid[1])
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )
    leaf_key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca_name)
        .public_key(leaf_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(valid[0])
        .not_valid_after(valid[1])
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    certificate_file = directory / "leaf.pem"
    key_file = directory / "leaf.key"
    certificate_file.write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        leaf_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(certificate_file, key_file)
    client = ssl.create_default_context(
        cadata=ca.public_bytes(serialization.Encoding.PEM).decode("ascii")
    )
    return server, client


async def _send_https(certificate_host: str, tmp_path: Path) -> tuple[Any, Any]:
    """POST to https://hooks.example.test (resolved to 127.0.0.1 by the sender's resolver),
    served with a certificate for `certificate_host`; returns the server and the outcome."""
    server_tls, client_tls = _tls_contexts(certificate_host, tmp_path)
    sender = sender_for_tests(ssl_context=client_tls)
    try:
        async with recording_server(tls=server_tls) as server:
            outcome = await sender.post(f"https://{HOOK_HOST}:{server.port}/hook", b"{}", {})
    finally:
        await sender.aclose()
    return server, outcome


async def test_https_verifies_the_url_host_and_sends_it_as_sni(tmp_path: Path) -> None:
    server, outcome = await _send_https(HOOK_HOST, tmp_path)
    assert outcome.status_code == 204, outcome
    assert server.server_names == [HOOK_HOST]
    assert f"\r\nHost: {HOOK_HOST}:{server.port}\r\n".encode() in server.requests[0]


async def test_https_refuses_a_certificate_for_another_host(tmp_path: Path) -> None:
    server, outcome = await _send_https("someone-else.example.test", tmp_path)
    assert outcome.status_code is None
    assert "certificate" in outcome.error.lower()
    assert server.requests == []
