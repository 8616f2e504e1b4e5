"""Ranks of one party beyond this machine's loopback are refused unless the user states the rank network is trusted."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from vfl.distributed.launch import TRUSTED_ENV, LaunchError, rank_env

ONE_HOST = {
    "RANK": "0",
    "WORLD_SIZE": "2",
    "LOCAL_RANK": "0",
    "LOCAL_WORLD_SIZE": "2",
    "MASTER_ADDR": "127.0.0.1",
    "MASTER_PORT": "29500",
}


@pytest.mark.parametrize(
    "change, needle",
    [
        ({"MASTER_ADDR": "10.0.0.5"}, "MASTER_ADDR='10.0.0.5' is not a loopback address"),
        ({"MASTER_ADDR": "leader-host"}, "MASTER_ADDR='leader-host' is not a loopback address"),
        ({"WORLD_SIZE": "4", "RANK": "3"}, "WORLD_SIZE=4 with LOCAL_WORLD_SIZE=2: ranks on several machines"),
        ({"GLOO_SOCKET_IFNAME": "eth0"}, "GLOO_SOCKET_IFNAME='eth0' is not a loopback interface"),
        ({TRUSTED_ENV: "0", "MASTER_ADDR": "10.0.0.5"}, "is not a loopback address"),
    ],
)
def test_ranks_beyond_the_loopback_are_refused_without_the_statement(change, needle):
    # Prepare
    env = {**ONE_HOST, **change}
    # Execute
    with pytest.raises(LaunchError) as refused:
        rank_env(env)
    # Assert: one line naming the value, what is unprotected, and how to state trust
    text = str(refused.value)
    assert needle in text and "\n" not in text
    assert "neither authenticated nor encrypted" in text
    assert "--trusted-rank-network" in text and f"{TRUSTED_ENV}=1" in text


@pytest.mark.parametrize(
    "change",
    [
        {"MASTER_ADDR": "10.0.0.5"},
        {"WORLD_SIZE": "4", "RANK": "3", "MASTER_ADDR": "leader-host"},
        {"GLOO_SOCKET_IFNAME": "eth0"},
    ],
)
def test_ranks_beyond_the_loopback_are_accepted_with_the_statement(change):
    # Execute
    env = rank_env({**ONE_HOST, **change, TRUSTED_ENV: "1"})
    # Assert
    assert env.ranks == int(change.get("WORLD_SIZE", "2")) and env.trusted_network


@pytest.mark.parametrize(
    "change",
    [
        {},
        {"MASTER_ADDR": "localhost"},
        {"MASTER_ADDR": "127.0.1.1"},
        {"MASTER_ADDR": "::1"},
        {"GLOO_SOCKET_IFNAME": "lo"},
    ],
)
def test_one_machine_on_the_loopback_needs_no_statement(change):
    # Execute
    env = rank_env({**ONE_HOST, **change})
    # Assert
    assert (env.rank, env.ranks) == (0, 2) and not env.trusted_network


def test_one_rank_needs_no_statement_wherever_it_runs():
    # Execute / Assert: WORLD_SIZE=1 starts no process group, so there is no rank traffic to protect
    assert rank_env({**ONE_HOST, "WORLD_SIZE": "1", "MASTER_ADDR": "10.0.0.5"}).ranks == 1


def test_a_statement_other_than_1_or_0_is_named():
    # Execute / Assert
    with pytest.raises(LaunchError, match=f"{TRUSTED_ENV}='yes': allowed: 1"):
        rank_env({**ONE_HOST, TRUSTED_ENV: "yes"})


def test_the_launch_scripts_check_refuses_before_torchrun_starts():
    # Prepare: what scripts/lib.sh runs for --nnodes 2 --master-addr 10.0.0.5
    env = {k: v for k, v in os.environ.items() if k != TRUSTED_ENV and k != "GLOO_SOCKET_IFNAME"}
    env.update(ONE_HOST, WORLD_SIZE="4", MASTER_ADDR="10.0.0.5")
    # Execute
    refused = subprocess.run([sys.executable, "-m", "vfl.distributed.launch"], env=env, capture_output=True, text=True)
    trusted = subprocess.run(
        [sys.executable, "-m", "vfl.distributed.launch"], env={**env, TRUSTED_ENV: "1"}, capture_output=True, text=True
    )
    # Assert
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert refused.stderr.startswith("error: MASTER_ADDR='10.0.0.5' is not a loopback address")
    assert trusted.returncode == 0 and trusted.stderr == ""
