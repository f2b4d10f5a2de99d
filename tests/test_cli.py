"""The `switchboard` console script, run for real in subprocesses (docs/operations.md).

Each workspace is a temp working dir with its own database and no SWITCHBOARD_SECRET_KEY, so
the CLI generates ./var/secret.key. The end-to-end test starts `switchboard serve` on a free
port and proves the keys the CLI printed work (and stop working) against the live server.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import sqlite3
import stat
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.engine import make_url

import app.organizations.repository as org_repository
from app.cli import build_parser, cmd_keys_create
from app.config import Settings
from app.core.tls import client_tls_context
from app.db.migrate import upgrade
from app.graphql.schema import schema_sdl
from tests.conftest import TEST_SECRET, fresh_database

SWITCHBOARD = Path(sys.executable).parent / "switchboard"
TEST_KEY = re.compile(r"^service_sk_test_[0-9A-Za-z]{32,}$")
LIVE_KEY = re.compile(r"^service_sk_live_[0-9A-Za-z]{32,}$")
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
PASSWORD = "correct horse battery staple"
COMMAND_TIMEOUT = 60
CONTACTS = "/api/v1/contacts"


def argv(command: str, **options: str) -> tuple[str, ...]:
    """`argv("keys create --live", org=ID)` → ("keys", "create", "--live", "--org", ID)."""
    args = command.split()
    for name, value in options.items():
        args += [f"--{name.replace('_', '-')}", value]
    return tuple(args)


def expect_one_object(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    command = " ".join(result.args[1:])
    assert result.returncode == 0, f"`{command}` exited {result.returncode}: {result.stderr}"
    lines = result.stdout.splitlines()
    assert len(lines) == 1, f"`{command}` must print one JSON line, got {result.stdout!r}"
    payload = json.loads(lines[0])
    assert isinstance(payload, dict), payload
    return payload


def expect_failure(result: subprocess.CompletedProcess[str]) -> str:
    command = " ".join(result.args[1:])
    assert result.returncode != 0, f"`{command}` should fail, printed {result.stdout!r}"
    assert result.stdout == "", f"`{command}` failed but printed to stdout: {result.stdout!r}"
    assert result.stderr.strip(), f"`{command}` failed without a message on stderr"
    assert "Traceback" not in result.stderr, f"`{command}` crashed: {result.stderr}"
    return result.stderr


@dataclass
class Cli:
    workdir: Path
    env: dict[str, str]

    def run(
        self, args: tuple[str, ...], stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(SWITCHBOARD), *args],
            cwd=self.workdir,
            env=self.env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT,
            check=False,
        )

    def ok(self, args: tuple[str, ...], stdin: str | None = None) -> dict[str, Any]:
        """A command that must succeed and print exactly one JSON object on stdout."""
        return expect_one_object(self.run(args, stdin))

    @property
    def secret_key_file(self) -> Path:
        return self.workdir / "var" / "secret.key"


def _environment(database_url: str) -> dict[str, str]:
    """The caller's environment minus everything that would change what the CLI does."""
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in {"DATABASE_URL", "REDIS_URL"} and not name.startswith("SWITCHBOARD_")
    }
    env["DATABASE_URL"] = database_url
    return env


@dataclass
class Workspace:
    """A migrated database and one organization, both made by the CLI, and their outputs."""

    backend: str
    cli: Cli
    migrate_outputs: list[dict[str, Any]]
    org: dict[str, Any]
    secret_key: str
    secret_stat: os.stat_result

    @property
    def org_id(self) -> str:
        return str(self.org["organization_id"])


def _bootstrap(backend: str, workdir: Path, database_url: str) -> Workspace:
    cli = Cli(workdir, _environment(database_url))
    assert not cli.secret_key_file.exists()
    migrate_outputs = [cli.ok(argv("migrate")), cli.ok(argv("migrate"))]  # 2nd: a no-op
    org = cli.ok(argv("orgs create", name=f"CLI Org ({backend})"))
    secret = cli.secret_key_file
    assert secret.is_file(), "orgs create must generate ./var/secret.key"
    return Workspace(backend, cli, migrate_outputs, org, secret.read_text(), secret.stat())


@pytest.fixture(scope="module")
def sqlite_workspace(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    workdir = tmp_path_factory.mktemp("cli-sqlite")
    return _bootstrap("sqlite", workdir, f"sqlite+aiosqlite:///{workdir / 'switchboard.db'}")


@pytest.fixture(scope="module")
def postgresql_workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workspace]:
    workdir = tmp_path_factory.mktemp("cli-postgresql")
    # `switchboard migrate` is under test here, so the database starts empty.
    with fresh_database("postgresql", workdir, "sb_cli", migrate=False) as url:
        yield _bootstrap("postgresql", workdir, url)


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def workspace(request: pytest.FixtureRequest) -> Workspace:
    """The main flow runs on both backends; the option-by-option tests on SQLite only."""
    result: Workspace = request.getfixturevalue(f"{request.param}_workspace")
    return result


# --------------------------------------------------------------------------- operator commands


def test_migrate_is_idempotent(workspace: Workspace) -> None:
    assert workspace.migrate_outputs == [{"migrated": True}, {"migrated": True}]


def test_orgs_create_prints_organization_and_full_access_key(workspace: Workspace) -> None:
    assert set(workspace.org) == {"organization_id", "api_key", "key_id"}
    assert UUID.match(workspace.org_id)
    assert UUID.match(workspace.org["key_id"])
    assert TEST_KEY.match(workspace.org["api_key"]), workspace.org["api_key"]


def not_migrated(shown_url: str) -> str:
    return (
        f"error: the database {shown_url} is not migrated; run `switchboard migrate` first "
        "(or `switchboard serve`, which migrates at start)\n"
    )


@pytest.mark.parametrize(
    "command",
    [
        argv("orgs create", name="Acme"),
        argv("keys create", org=str(uuid.uuid4()), name="k", scopes="agents:read"),
        ("keys", "revoke", str(uuid.uuid4())),
        argv("users create", org=str(uuid.uuid4()), email="a@b.test"),
    ],
)
def test_commands_on_a_fresh_directory_say_what_to_run(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    """Before `migrate` (the README's `make run &` racing `orgs create`): one line naming the
    command to run, no traceback, and no stray database or key left behind."""
    env = _environment("sqlite+aiosqlite:///./var/switchboard.db")
    result = Cli(tmp_path, env).run(command, stdin="pw-1234567890\n")
    assert result.returncode == 2
    assert result.stdout == ""
    # The relative path resolved: run from another directory, it names another file.
    assert result.stderr == not_migrated(f"sqlite+aiosqlite:///{tmp_path}/var/switchboard.db")
    assert list(tmp_path.iterdir()) == []


def test_commands_on_an_unmigrated_database_say_what_to_run(tmp_path: Path) -> None:
    database = tmp_path / "empty.db"
    sqlite3.connect(database).close()  # exists, no tables
    env = _environment(f"sqlite+aiosqlite:///{database}")
    result = Cli(tmp_path, env).run(argv("orgs create", name="Acme"))
    assert (result.returncode, result.stderr) == (
        2,
        not_migrated(f"sqlite+aiosqlite:///{database}"),
    )
    with sqlite3.connect(database) as connection:
        tables = connection.execute("SELECT name FROM sqlite_master").fetchall()
    assert tables == []


def test_commands_on_an_unmigrated_postgresql_database_say_what_to_run(tmp_path: Path) -> None:
    with fresh_database("postgresql", tmp_path, "sb_cli_empty", migrate=False) as url:
        with_password = make_url(url).set(password="s3cret-pw").render_as_string(False)
        result = Cli(tmp_path, _environment(with_password)).run(argv("orgs create", name="Acme"))
    # Named, but never with its credentials.
    shown = make_url(url)._replace(username=None).render_as_string(hide_password=False)
    assert (result.returncode, result.stderr) == (2, not_migrated(shown))
    assert "s3cret-pw" not in result.stderr
    assert "postgres@" not in result.stderr


def test_an_unreachable_database_is_one_line(tmp_path: Path) -> None:
    url = "postgresql+asyncpg://postgres@127.0.0.1:1/none"
    result = Cli(tmp_path, _environment(url)).run(argv("orgs create", name="Acme"))
    assert result.returncode == 1
    assert result.stderr.startswith("error: cannot use the database at DATABASE_URL:")
    assert len(result.stderr.splitlines()) == 1, result.stderr


def test_secret_key_is_generated_once_with_mode_0600_and_reused(
    sqlite_workspace: Workspace,
) -> None:
    path = sqlite_workspace.cli.secret_key_file
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(sqlite_workspace.secret_key.strip()) >= 32

    second = sqlite_workspace.cli.ok(argv("orgs create", name="Second Org"))
    assert second["organization_id"] != sqlite_workspace.org_id
    assert second["api_key"] != sqlite_workspace.org["api_key"]

    now = path.stat()
    assert path.read_text() == sqlite_workspace.secret_key
    first = sqlite_workspace.secret_stat
    assert (now.st_ino, now.st_mtime_ns) == (first.st_ino, first.st_mtime_ns), (
        "the second command must reuse var/secret.key, not rewrite it"
    )
    assert stat.S_IMODE(now.st_mode) == 0o600
    # That the processes really share the secret is proven end to end below: keys printed by
    # one process authenticate against a server started by another.


def test_keys_create_with_scopes(sqlite_workspace: Workspace) -> None:
    created = sqlite_workspace.cli.ok(
        argv(
            "keys create",
            org=sqlite_workspace.org_id,
            name="reporting",
            scopes="agents:read,calls:read",
        )
    )
    assert set(created) >= {"id", "key_id", "api_key", "scopes", "livemode", "expires_at"}
    assert UUID.match(created["id"])
    assert created["key_id"] == created["id"]  # the name `orgs create` prints it under
    assert TEST_KEY.match(created["api_key"])
    assert created["scopes"] == ["agents:read", "calls:read"]
    assert created["livemode"] is False
    assert created["expires_at"] is None


def test_keys_create_live_with_expiry(sqlite_workspace: Workspace) -> None:
    created = sqlite_workspace.cli.ok(
        argv(
            "keys create --live",
            org=sqlite_workspace.org_id,
            name="live",
            scopes="full_access",
            expires_at="2099-01-01T00:00:00Z",
        )
    )
    assert LIVE_KEY.match(created["api_key"]), created
    assert created["livemode"] is True
    assert created["scopes"] == ["full_access"]
    assert created["expires_at"] in {"2099-01-01T00:00:00Z", "2099-01-01T00:00:00.000000Z"}


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        ({"scopes": "agents:read,bogus"}, "bogus"),
        ({"org": "00000000-0000-4000-8000-000000000000"}, "not found"),
        ({"expires_at": "2001-01-01T00:00:00Z"}, "future"),
        ({"expires_at": "next tuesday"}, "iso 8601"),
    ],
    ids=["bad-scope", "unknown-org", "past-expiry", "garbage-expiry"],
)
def test_keys_create_refuses_bad_input(
    sqlite_workspace: Workspace, options: dict[str, str], needle: str
) -> None:
    values = {"org": sqlite_workspace.org_id, "name": "n", "scopes": "agents:read", **options}
    stderr = expect_failure(sqlite_workspace.cli.run(argv("keys create", **values)))
    assert needle in stderr.lower(), stderr


def test_keys_revoke(sqlite_workspace: Workspace) -> None:
    cli = sqlite_workspace.cli
    created = cli.ok(
        argv("keys create", org=sqlite_workspace.org_id, name="doomed", scopes="calls:read")
    )
    revoked = cli.ok(("keys", "revoke", created["id"]))
    assert set(revoked) == {"id", "revoked_at"}
    assert revoked["id"] == created["id"]
    assert revoked["revoked_at"], revoked
    assert "not found" in expect_failure(cli.run(("keys", "revoke", str(uuid.uuid4())))).lower()


def test_users_create_reads_the_password_from_stdin(sqlite_workspace: Workspace) -> None:
    created = sqlite_workspace.cli.ok(
        argv("users create", org=sqlite_workspace.org_id, email="e@x.io"), PASSWORD + "\n"
    )
    assert set(created) == {"user_id"}
    assert UUID.match(created["user_id"])


@pytest.mark.parametrize(
    ("email", "password", "needle"),
    [("short@x.io", "short\n", "password"), ("TAKEN@x.io", PASSWORD + "\n", "exists")],
    ids=["short-password", "duplicate-email"],
)
def test_users_create_refuses_bad_input(
    sqlite_workspace: Workspace, email: str, password: str, needle: str
) -> None:
    org_id = sqlite_workspace.org_id
    if needle == "exists":
        sqlite_workspace.cli.ok(argv("users create", org=org_id, email="taken@x.io"), PASSWORD)
    result = sqlite_workspace.cli.run(argv("users create", org=org_id, email=email), password)
    assert needle in expect_failure(result).lower()


def test_export_schema_writes_the_sdl(sqlite_workspace: Workspace) -> None:
    target = sqlite_workspace.cli.workdir / "exported" / "schema.graphql"
    target.parent.mkdir()
    assert sqlite_workspace.cli.ok(argv("export-schema", output=str(target)))
    assert target.read_text() == schema_sdl()


# --------------------------------------------------------------------------- regressions


def test_cli_write_survives_a_concurrent_sqlite_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    database = tmp_path / "race.db"
    url = f"sqlite+aiosqlite:///{database}"
    upgrade(url)
    settings = Settings(database_url=url, secret_key=TEST_SECRET, _env_file=None)  # type: ignore[call-arg]
    org_id = str(uuid.uuid4())
    with sqlite3.connect(database) as connection:
        connection.execute(
            "INSERT INTO organizations (id, name, created_at, updated_at) "
            "VALUES (?, 'Race', '2026-01-01 00:00:00', '2026-01-01 00:00:00')",
            (org_id,),
        )

    def other_process_writes() -> None:  # e.g. the server recording a key's last use
        with sqlite3.connect(database, timeout=5) as other:
            other.execute("UPDATE organizations SET name = 'Renamed' WHERE id = ?", (org_id,))

    writer = threading.Thread(target=other_process_writes)
    real_get_organization = org_repository.get_organization

    async def get_organization_then_race(session: Any, organization_id: str) -> Any:
        found = await real_get_organization(session, organization_id)  # the command's read
        writer.start()
        writer.join(timeout=1)  # finishes at once unless the command holds the write lock
        return found

    monkeypatch.setattr(org_repository, "get_organization", get_organization_then_race)
    args = build_parser().parse_args(argv("keys create", org=org_id, name="n", scopes="calls:read"))
    try:
        assert cmd_keys_create(settings, args) == 0
    finally:
        writer.join(timeout=10)
    assert TEST_KEY.match(json.loads(capsys.readouterr().out)["api_key"])


def test_secret_key_file_is_never_readable_by_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[int] = []
    real_chmod = Path.chmod

    def spying_chmod(self: Path, mode: int, *, follow_symlinks: bool = True) -> None:
        seen.append(stat.S_IMODE(self.stat().st_mode))  # the mode just before the chmod
        real_chmod(self, mode, follow_symlinks=follow_symlinks)

    monkeypatch.setattr(Path, "chmod", spying_chmod)
    previous = os.umask(0o022)
    try:
        settings = Settings(secret_key=None, var_dir=tmp_path / "var", _env_file=None)  # type: ignore[call-arg]
        key = settings.resolved_secret_key()
    finally:
        os.umask(previous)
    path = tmp_path / "var" / "secret.key"
    assert path.read_text() == key
    modes = [*seen, stat.S_IMODE(path.stat().st_mode)]
    assert all(mode & 0o077 == 0 for mode in modes), [oct(mode) for mode in modes]


def test_blank_secret_key_file_is_never_used(tmp_path: Path) -> None:
    path = tmp_path / "var" / "secret.key"
    path.parent.mkdir()
    path.write_text("")
    path.chmod(0o600)
    settings = Settings(secret_key=None, var_dir=tmp_path / "var", _env_file=None)  # type: ignore[call-arg]
    try:
        key = settings.resolved_secret_key()
    except Exception:
        return  # refusing to start is fine
    assert len(key) >= 32, f"resolved secret key {key!r} is blank"


# --------------------------------------------------------------------------- end to end


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Server:
    base_url: str
    process: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


@pytest.fixture
def server(workspace: Workspace) -> Iterator[Server]:
    """`switchboard serve --no-worker` on a free port, in the workspace; always terminated."""
    cli = workspace.cli
    port = _free_port()
    log = cli.workdir / f"serve-{port}.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [str(SWITCHBOARD), *argv("serve --no-worker", host="127.0.0.1", port=str(port))],
            cwd=cli.workdir,
            env=cli.env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    running = Server(f"http://127.0.0.1:{port}", process, log)
    try:
        deadline = time.monotonic() + 90
        while True:
            if process.poll() is not None:
                pytest.fail(f"serve exited with {process.returncode}:\n{running.output()}")
            try:
                health = httpx.get(
                    f"{running.base_url}/healthz", timeout=1, verify=client_tls_context()
                )
                if health.status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"serve did not answer /healthz within 90 s:\n{running.output()}")
            time.sleep(0.1)
        yield running
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _assert_auth_error(response: httpx.Response, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error", "detail"}, body
    assert set(body["error"]) == {"code", "message", "type"}, body
    assert body["error"]["code"] == code
    assert body["error"]["type"] == "authentication_error"
    assert isinstance(body["error"]["message"], str)
    assert body["error"]["message"]
    assert isinstance(body["detail"], str)
    assert body["detail"]


def _principal_id(http: httpx.Client, api_key: str) -> str:
    """The id of a key, as GraphQL `viewer` tells."""
    query = "{ viewer { principalId principalType } }"
    response = http.post("/graphql", json={"query": query}, headers=_auth(api_key))
    assert response.status_code == 200, response.text
    viewer = response.json()["data"]["viewer"]
    assert viewer["principalType"] == "api_key", viewer
    principal_id: str = viewer["principalId"]
    return principal_id


def test_cli_keys_work_end_to_end(workspace: Workspace, server: Server) -> None:
    cli = workspace.cli
    org_key = workspace.org["api_key"]
    # One after the other: concurrent writers on SQLite hit the bug shown by
    # test_cli_write_survives_a_concurrent_sqlite_writer.
    scoped = cli.ok(
        argv("keys create", org=workspace.org_id, name="agents-only", scopes="agents:read")
    )
    email = f"{workspace.backend}@x.io"
    user = cli.ok(argv("users create", org=workspace.org_id, email=email), PASSWORD + "\n")

    with httpx.Client(base_url=server.base_url, timeout=10) as http:
        created = http.post(
            CONTACTS, json={"phone_number": "+14155550100", "name": "Ada"}, headers=_auth(org_key)
        )
        assert created.status_code == 200, created.text
        contact = created.json()
        assert contact["organization_id"] == workspace.org_id
        listed = http.get(CONTACTS, headers=_auth(org_key))
        assert listed.status_code == 200, listed.text
        assert [item["id"] for item in listed.json()["data"]] == [contact["id"]]
        assert http.get(f"{CONTACTS}/{contact['id']}", headers=_auth(org_key)).json() == contact

        # agents:read does not cover contacts (full_access only).
        _assert_auth_error(
            http.get(CONTACTS, headers=_auth(scoped["api_key"])), 403, "insufficient_scope"
        )

        # The user the CLI created logs in through GraphQL; the JWT works on REST.
        login = http.post(
            "/graphql",
            json={
                "query": "mutation($e: String!, $p: String!) "
                "{ login(email: $e, password: $p) { token user { id } errors { message } } }",
                "variables": {"e": email, "p": PASSWORD},
            },
        )
        assert login.status_code == 200, login.text
        payload = login.json()["data"]["login"]
        assert payload["errors"] == [], payload
        assert payload["user"]["id"] == user["user_id"], payload
        as_user = http.get(CONTACTS, headers=_auth(payload["token"]))
        assert as_user.status_code == 200, as_user.text
        assert as_user.json()["total_count"] == 1

        # Revoked by another process while the server runs: refused on the very next request.
        # `orgs create` printed the id the key is revoked by.
        assert _principal_id(http, org_key) == workspace.org["key_id"]
        revoked = cli.ok(("keys", "revoke", workspace.org["key_id"]))
        assert revoked["revoked_at"]
        _assert_auth_error(http.get(CONTACTS, headers=_auth(org_key)), 401, "invalid_api_key")
        _assert_auth_error(
            http.post(
                CONTACTS,
                json={"phone_number": "+14155550101", "name": "Bob"},
                headers=_auth(org_key),
            ),
            401,
            "invalid_api_key",
        )
        # Only that key: the others are unaffected.
        assert http.get(CONTACTS, headers=_auth(payload["token"])).status_code == 200
        _assert_auth_error(
            http.get(CONTACTS, headers=_auth(scoped["api_key"])), 403, "insufficient_scope"
        )


def _masked_text_frame_head(length: int) -> bytes:
    """RFC 6455 header of a final text frame of `length` bytes, as a client sends it: masked,
    with an all-zero key, so the payload goes as it is."""
    return bytes([0x81, 0x80 | 127]) + length.to_bytes(8, "big") + bytes(4)


def test_served_app_bounds_bodies_and_websocket_messages(server: Server) -> None:
    """Under uvicorn, as deployed: a chunked 4 MiB body to the anonymous WhatsApp callback is
    answered 413 long before it ends, and a 2 MiB websocket frame closes the socket with 1009
    (uvicorn's ws_max_size, set by `switchboard serve`)."""
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    host, port = server.base_url.removeprefix("http://").split(":")
    chunk = b"%x\r\n" % 65536 + b"\0" * 65536 + b"\r\n"
    sent = 0
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(
            b"POST /webhooks/whatsapp HTTP/1.1\r\nHost: sb\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        try:
            while sent < 4 * 1024 * 1024:
                sock.sendall(chunk)
                sent += 65536
        except OSError:
            pass  # the server answered and hung up: the rest is never read
        status_line = sock.makefile("rb").readline()
    assert status_line.split()[1] == b"413", status_line

    url = server.base_url.replace("http://", "ws://") + "/graphql"
    with connect(url, subprotocols=["graphql-transport-ws"], max_size=None) as ws:  # type: ignore[list-item]
        # A text frame announcing 2 MiB, and its first bytes: the server judges the frame by
        # its header. (Sending all of it raced the server's close: the unread rest of the
        # frame made the kernel reset the connection, losing the close frame.)
        ws.socket.sendall(_masked_text_frame_head(2 * 1024 * 1024) + b'{"type":')
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == 1009
