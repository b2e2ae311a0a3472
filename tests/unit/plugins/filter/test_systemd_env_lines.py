"""systemd_env_lines: KEY=value lines that systemd and docker read back unchanged."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.sparkfleet.vllm.plugins.filter.systemd_env_lines import FilterModule, systemd_env_lines


def parse_systemd_env(text):
    """Reference reader following systemd's EnvironmentFile rules (env-file.c) for the forms we emit."""
    out = {}
    for line in text.splitlines():
        key, _sep, raw = line.partition("=")
        if raw.startswith('"'):
            assert raw.endswith('"')
            body, value, i = raw[1:-1], [], 0
            while i < len(body):
                if body[i] == "\\" and i + 1 < len(body) and body[i + 1] in '"\\`$':
                    value.append(body[i + 1])
                    i += 2
                else:
                    assert body[i] not in '"', "unescaped quote inside value"
                    value.append(body[i])
                    i += 1
            out[key] = "".join(value)
        else:
            assert not any(c in raw for c in " \t'\"\\#;"), raw
            out[key] = raw
    return out


def test_registered_under_its_name():
    assert FilterModule().filters()["systemd_env_lines"] is systemd_env_lines


def test_fabric_env_renders_bare_and_sorted():
    env = {"VLLM_HOST_IP": "192.168.200.12", "NCCL_IB_HCA": "rocep1s0f1,roceP2p1s0f1",
           "UCX_NET_DEVICES": "rocep1s0f1:1,roceP2p1s0f1:1", "NCCL_IB_GID_INDEX": 3}
    assert systemd_env_lines(env) == (
        "NCCL_IB_GID_INDEX=3\n"
        "NCCL_IB_HCA=rocep1s0f1,roceP2p1s0f1\n"
        "UCX_NET_DEVICES=rocep1s0f1:1,roceP2p1s0f1:1\n"
        "VLLM_HOST_IP=192.168.200.12\n")


@pytest.mark.parametrize("value", [
    "two words", 'say "hi"', "back\\slash", "$HOME stays literal", "`cmd`", "it's", "#not-a-comment",
    " leading and trailing ", "", "a=b;c", "sk-abc/DEF+ghi==",
])
def test_systemd_round_trip(value):
    text = systemd_env_lines({"V": value})
    assert text.count("\n") == 1
    assert parse_systemd_env(text) == {"V": value}


def test_docker_style_is_raw():
    assert systemd_env_lines({"A": "two words", "B": 'q"'}, style="docker") == 'A=two words\nB=q"\n'


def test_empty_dict_is_empty_text():
    assert systemd_env_lines({}) == ""


@pytest.mark.parametrize("env,args,words", [
    ({"A": "x\ny"}, {}, ["A", "newline"]),
    ({"A": "x\ry"}, {}, ["A", "carriage return"]),
    ({"A": True}, {}, ["A", "boolean"]),
    ({"A": None}, {}, ["A", "string or number"]),
    ({"A": ["x"]}, {}, ["A", "string or number"]),
    ({"1A": "x"}, {}, ["'1A'", "not a valid variable name"]),
    ({"A-B": "x"}, {}, ["'A-B'", "not a valid variable name"]),
    ({"A": "x"}, {"style": "ini"}, ["style", "systemd, docker"]),
    (["A=x"], {}, ["must be a dict"]),
])
def test_rejects(env, args, words):
    with pytest.raises(AnsibleFilterError) as exc:
        systemd_env_lines(env, **args)
    for w in words:
        assert w in str(exc.value)
