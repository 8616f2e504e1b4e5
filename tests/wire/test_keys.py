"""CurveZMQ keys: owner-only secret files, strict loading, and admission that never falls open."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest
import zmq

from tests.support.party_processes import free_port
from tests.support.paths import REPO
from vfl.wire.admission import Admission, guard, pin
from vfl.wire.curve_keys import KeyFileError, create_key_pair, load_follower_keys, load_leader_keys, load_secret_key


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_key_tool_writes_secret_0600_in_a_0700_directory(tmp_path):
    # Execute
    r = subprocess.run(
        [sys.executable, "-m", "vfl.keys", "new", "follower0", "--dir", str(tmp_path / "k")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    # Assert
    assert r.returncode == 0, r.stderr
    assert _mode(tmp_path / "k") == 0o700 and _mode(tmp_path / "k/follower0.key_secret") == 0o600
    public, secret = zmq.auth.load_certificate(str(tmp_path / "k/follower0.key_secret"))  # zmq.auth's own format
    assert (
        zmq.auth.load_certificate(str(tmp_path / "k/follower0.key"))[1] is None and zmq.curve_public(secret) == public
    )


def test_key_tool_refuses_to_overwrite_or_to_use_an_open_directory(tmp_path):
    # Prepare
    create_key_pair("leader", str(tmp_path / "k"))
    os.makedirs(tmp_path / "open")
    os.chmod(tmp_path / "open", 0o755)
    # Execute / Assert
    with pytest.raises(KeyFileError, match="already exists; keep it, or pass --force"):
        create_key_pair("leader", str(tmp_path / "k"))
    with pytest.raises(KeyFileError, match="has mode 0755.*chmod 700"):
        create_key_pair("leader", str(tmp_path / "open"))


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604])
def test_secret_key_readable_by_others_is_refused_naming_path_and_mode(tmp_path, mode):
    # Prepare
    _, secret = create_key_pair("leader", str(tmp_path / "k"))
    os.chmod(secret, mode)
    # Execute / Assert
    with pytest.raises(KeyFileError, match=f"secret key file {secret} has mode {mode:04o}"):
        load_secret_key(secret)


@pytest.mark.parametrize(
    "content, needle",
    [
        (b"\x00\xff\xfe binary garbage", "holds no public-key line"),
        (b'curve\n    public-key = "short"\n', "not a 40-character Z85 CURVE key"),
    ],
)
def test_garbage_key_files_are_refused_in_one_sentence(tmp_path, content, needle):
    # Prepare
    path = tmp_path / "x.key"
    path.write_bytes(content)
    # Execute / Assert
    with pytest.raises(KeyFileError, match=needle):
        load_follower_keys(create_key_pair("f0", str(tmp_path / "k"))[1], str(path))


def test_public_key_file_given_as_secret_and_shared_keys_are_refused(tmp_path):
    # Prepare
    d = str(tmp_path / "k")
    leader_pub, leader_sec = create_key_pair("leader", d)
    f0_pub, _ = create_key_pair("f0", d)
    os.chmod(f0_pub, 0o600)
    # Execute / Assert
    with pytest.raises(KeyFileError, match="holds only a public key"):
        load_secret_key(f0_pub)
    with pytest.raises(KeyFileError, match="f0 and f1 have the same public key"):
        load_leader_keys(leader_sec, {"f0": f0_pub, "f1": f0_pub})
    with pytest.raises(KeyFileError, match="holds the leader's own public key"):
        load_leader_keys(leader_sec, {"f0": leader_pub})


def _handshake_ok(server_ctx: zmq.Context, server_keys, client_keys) -> bool:
    """Whether a CURVE client gets a message through a guarded ROUTER within 2 s."""
    port = free_port()
    srv = server_ctx.socket(zmq.ROUTER)
    srv.setsockopt(zmq.LINGER, 0)
    guard(srv, *server_keys)
    srv.bind(f"tcp://127.0.0.1:{port}")
    cctx = zmq.Context()
    cli = cctx.socket(zmq.DEALER)
    cli.setsockopt(zmq.LINGER, 0)
    pin(cli, *client_keys, server_keys[0])
    cli.connect(f"tcp://127.0.0.1:{port}")
    try:
        cli.send(b"ping")
        return bool(srv.poll(2000))
    finally:
        cli.close()
        cctx.term()
        srv.close()


def test_guarded_socket_refuses_everyone_when_its_context_has_no_zap_handler():
    # Prepare: the pitfall of issue 19: an authenticator on another context (Context.instance())
    server, client = zmq.curve_keypair(), zmq.curve_keypair()
    elsewhere = Admission(zmq.Context.instance(), {client[0]: "follower0"})
    elsewhere.start()
    ctx = zmq.Context()
    try:
        # Execute
        admitted = _handshake_ok(ctx, server, client)
    finally:
        elsewhere.stop()
        ctx.term()
    # Assert: ZAP_ENFORCE_DOMAIN makes the missing handler refuse, never admit
    assert not admitted


def test_admission_on_the_sockets_own_context_admits_only_configured_keys():
    # Prepare
    server, member, stranger = zmq.curve_keypair(), zmq.curve_keypair(), zmq.curve_keypair()
    ctx = zmq.Context()
    auth = Admission(ctx, {member[0]: "follower0"})
    auth.start()
    try:
        # Execute
        results = (_handshake_ok(ctx, server, member), _handshake_ok(ctx, server, stranger))
    finally:
        auth.stop()
        ctx.term()
    # Assert
    assert results == (True, False)
