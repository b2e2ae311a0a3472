"""config_files on a real directory tree: written once, unchanged on a re-run, attributes fixed, secrets never
readable by others, check mode changes nothing, bad entries refused before anything is touched."""

from __future__ import annotations

import grp
import os
import pwd
import stat

import pytest

from ansible_collections.sparkfleet.vllm.plugins.module_utils import _config_files
from ansible_collections.sparkfleet.vllm.plugins.modules import config_files
from ansible_collections.sparkfleet.vllm.tests.unit.support.playbook import local_inventory, run_playbook

ME = pwd.getpwuid(os.getuid()).pw_name
MY_GROUP = grp.getgrgid(os.getgid()).gr_name


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def entries(tmp_path, env="KEY=1\n"):
    return [
        {"path": str(tmp_path / "etc"), "state": "directory", "owner": ME, "group": MY_GROUP, "mode": "0750"},
        {"path": str(tmp_path / "etc" / "ray.env"), "content": env, "owner": ME, "group": MY_GROUP, "mode": "0600",
         "diff": False},
        {"path": str(tmp_path / "etc" / "unit.service"), "content": "[Unit]\nDescription=x\n", "mode": "0644"},
    ]


def test_writes_every_path_then_a_rerun_changes_nothing(run_module, tmp_path):
    r = run_module(config_files, {"files": entries(tmp_path)})
    assert r["changed"] is True
    assert r["changed_paths"] == [e["path"] for e in entries(tmp_path)]
    assert (tmp_path / "etc" / "ray.env").read_text() == "KEY=1\n"
    assert (mode(tmp_path / "etc"), mode(tmp_path / "etc" / "ray.env"), mode(tmp_path / "etc" / "unit.service")) == (
        0o750, 0o600, 0o644)
    again = run_module(config_files, {"files": entries(tmp_path)})
    assert again["changed"] is False and again["changed_paths"] == []
    assert [x["changed"] for x in again["files"]] == [False, False, False]


def test_only_the_file_that_differs_is_rewritten_and_no_temporary_file_is_left(run_module, tmp_path):
    run_module(config_files, {"files": entries(tmp_path)})
    unit = tmp_path / "etc" / "unit.service"
    before = os.stat(unit).st_ino
    r = run_module(config_files, {"files": entries(tmp_path, env="KEY=2\n")})
    assert r["changed_paths"] == [str(tmp_path / "etc" / "ray.env")]
    assert (tmp_path / "etc" / "ray.env").read_text() == "KEY=2\n"
    assert os.stat(unit).st_ino == before  # untouched, not rewritten with the same text
    assert sorted(p.name for p in (tmp_path / "etc").iterdir()) == ["ray.env", "unit.service"]


def test_a_mode_changed_by_hand_is_put_back_and_reported(run_module, tmp_path):
    run_module(config_files, {"files": entries(tmp_path)})
    os.chmod(tmp_path / "etc" / "ray.env", 0o644)  # a secret made world-readable
    r = run_module(config_files, {"files": entries(tmp_path)})
    assert r["changed_paths"] == [str(tmp_path / "etc" / "ray.env")]
    assert mode(tmp_path / "etc" / "ray.env") == 0o600


def test_a_new_secret_is_never_readable_by_others(run_module, tmp_path, monkeypatch):
    """The rename happens with the final mode already set (a reader racing the write never sees 0644)."""
    seen = []
    real_rename = os.rename

    def spy(src, dst):
        seen.append((os.path.basename(dst), mode(src)))
        return real_rename(src, dst)

    monkeypatch.setattr(_config_files.os, "rename", spy)
    old_umask = os.umask(0o022)
    try:
        run_module(config_files, {"files": entries(tmp_path)})
    finally:
        os.umask(old_umask)
    assert ("ray.env", 0o600) in seen and ("unit.service", 0o644) in seen


def test_check_mode_reports_and_changes_nothing(run_module, tmp_path):
    r = run_module(config_files, {"files": entries(tmp_path)}, check_mode=True)
    assert r["changed"] is True and len(r["changed_paths"]) == 3
    assert not (tmp_path / "etc").exists()
    run_module(config_files, {"files": entries(tmp_path)})
    r = run_module(config_files, {"files": entries(tmp_path, env="KEY=3\n")}, check_mode=True)
    assert r["changed_paths"] == [str(tmp_path / "etc" / "ray.env")]
    assert (tmp_path / "etc" / "ray.env").read_text() == "KEY=1\n"


def test_diff_shows_plain_files_and_hides_secrets(run_module, tmp_path):
    run_module(config_files, {"files": entries(tmp_path)})
    files = entries(tmp_path, env="KEY=secret\n")
    files[2]["content"] = "[Unit]\nDescription=y\n"
    r = run_module(config_files, {"files": files, "_ansible_diff": True})
    diffs = {d["after_header"]: d for d in r["diff"]}
    assert diffs[files[2]["path"]]["before"] == "[Unit]\nDescription=x\n"
    assert diffs[files[2]["path"]]["after"] == "[Unit]\nDescription=y\n"
    assert "secret" not in repr(r)
    assert "KEY=1" not in repr(r)


@pytest.mark.parametrize("entry, words", [
    ({"path": "relative/x", "content": "", "mode": "0644"}, "path must be absolute"),
    ({"path": "/tmp/x", "mode": "0644"}, "content is required for a file"),
    ({"path": "/tmp/d", "state": "directory", "content": "x", "mode": "0755"}, "content is not allowed"),
    ({"path": "/tmp/x", "content": "", "mode": "rw-r--r--"}, "is not an octal mode"),
])
def test_bad_entries_are_refused_before_anything_is_written(run_module, tmp_path, entry, words):
    good = {"path": str(tmp_path / "first"), "content": "x", "mode": "0644"}
    r = run_module(config_files, {"files": [good, entry]})
    assert r["failed"] is True and words in r["msg"], r
    assert not (tmp_path / "first").exists()


def test_a_missing_directory_or_a_directory_in_the_way_is_named(run_module, tmp_path):
    r = run_module(config_files, {"files": [{"path": str(tmp_path / "no" / "f"), "content": "", "mode": "0644"}]})
    assert r["failed"] is True and "its directory %s does not exist" % (tmp_path / "no") in r["msg"]
    (tmp_path / "d").mkdir()
    r = run_module(config_files, {"files": [{"path": str(tmp_path / "d"), "content": "", "mode": "0644"}]})
    assert r["failed"] is True and "exists and is not a regular file" in r["msg"]
    r = run_module(config_files, {"files": [{"path": str(tmp_path / "d"), "state": "directory", "mode": "0700"}]})
    assert r["changed"] is True and mode(tmp_path / "d") == 0o700


# An authorized_keys line as model_sync's role writes it, among the user's own keys (lineinfile's behaviour).
KEY_LINE = ('restrict,agent-forwarding,from="10.99.1.0/24",command="/usr/bin/python3 /usr/local/lib/sparkfleet/'
            'sync_shell.py /models/tiny /etc/sparkfleet/sync-commands.json" ssh-ed25519 AAAAC3Nz sparkfleet model sync')


def line_entry(path, line=KEY_LINE):
    return {"path": str(path), "state": "line", "line": line, "regexp": "sparkfleet model sync$", "owner": ME,
            "group": MY_GROUP, "mode": "0600"}


def test_line_creates_the_file_and_its_directory_then_a_rerun_changes_nothing(run_module, tmp_path):
    keys = tmp_path / "home" / ".ssh" / "authorized_keys"
    r = run_module(config_files, {"files": [line_entry(keys)]})
    assert r["changed"] is True and r["changed_paths"] == [str(keys)]
    assert keys.read_text() == KEY_LINE + "\n"
    assert (mode(keys.parent), mode(keys)) == (0o700, 0o600)
    assert run_module(config_files, {"files": [line_entry(keys)]})["changed"] is False


def test_line_replaces_the_last_match_and_keeps_the_other_keys(run_module, tmp_path):
    keys = tmp_path / "authorized_keys"
    keys.write_text("ssh-ed25519 AAAAuser laptop\ncommand=\"old\" ssh-ed25519 AAAAold sparkfleet model sync\n"
                    "ssh-rsa AAAAother admin")  # no final newline
    keys.chmod(0o600)
    r = run_module(config_files, {"files": [line_entry(keys)]})
    assert r["changed"] is True
    assert keys.read_text() == "ssh-ed25519 AAAAuser laptop\n%s\nssh-rsa AAAAother admin\n" % KEY_LINE
    assert run_module(config_files, {"files": [line_entry(keys)]})["changed"] is False


def test_line_is_appended_when_nothing_matches(run_module, tmp_path):
    keys = tmp_path / "authorized_keys"
    keys.write_text("ssh-ed25519 AAAAuser laptop\n")
    keys.chmod(0o600)
    run_module(config_files, {"files": [line_entry(keys)]})
    assert keys.read_text() == "ssh-ed25519 AAAAuser laptop\n%s\n" % KEY_LINE


def test_line_in_check_mode_changes_nothing(run_module, tmp_path):
    keys = tmp_path / "home" / ".ssh" / "authorized_keys"
    r = run_module(config_files, {"files": [line_entry(keys)]}, check_mode=True)
    assert r["changed"] is True and not (tmp_path / "home").exists()


@pytest.mark.parametrize("entry, words", [
    ({"state": "line", "mode": "0600"}, "needs line"),
    ({"state": "line", "line": "a\nb", "mode": "0600"}, "one line"),
    ({"state": "line", "line": "a", "regexp": "(", "mode": "0600"}, "does not compile"),
    ({"state": "file", "content": "x", "line": "a", "mode": "0600"}, "state line only"),
])
def test_bad_line_entries_are_refused_before_anything_is_touched(run_module, tmp_path, entry, words):
    r = run_module(config_files, {"files": [dict(entry, path=str(tmp_path / "k"))]})
    assert r["failed"] and words in r["msg"]
    assert not (tmp_path / "k").exists()


def test_check_diff_through_ansible_shows_plain_files_and_hides_secrets(tmp_path):
    """Issue 41.6: `content` is no_log, so through Ansible every diff read VALUE_SPECIFIED_IN_NO_LOG_PARAMETER (the
    run_module harness above skips Ansible's masking). A real ansible-playbook --check --diff, as the roles call it."""
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "unit.service").write_text("[Unit]\nDescription=old\n")
    (etc / "vllm.env").write_text("VLLM_API_KEY=old-key-1234\n")
    (tmp_path / "play.yml").write_text("""
- name: Files
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Write
      sparkfleet.vllm.config_files:
        files:
          - {path: "%(etc)s/unit.service", content: "[Unit]\\nDescription=new\\n", mode: "0644"}
          - {path: "%(etc)s/vllm.env", content: "VLLM_API_KEY=sk-new-secret-41\\n", mode: "0600", diff: false}
          - {path: "%(etc)s/other.conf", content: "key sk-new-secret-41 leaked?\\n", mode: "0644"}
""" % {"etc": etc})
    p = run_playbook("play.yml", "--check", "--diff", "-v", inventory=local_inventory(tmp_path / "hosts.yml"),
                     cwd=tmp_path, env={"ANSIBLE_CALLBACKS_ENABLED": "sparkfleet.vllm.progress",
                                        "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.default"})
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-3000:]
    assert "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER" not in out.split("TASK [Write]")[1].split("unit.service", 1)[1][:400]
    assert "-Description=old" in out and "+Description=new" in out, out[-3000:]
    assert "sk-new-secret-41" not in out and "old-key-1234" not in out, out[-3000:]
    assert "(content hidden, changed)" in out
    assert (etc / "unit.service").read_text() == "[Unit]\nDescription=old\n"   # check mode


def test_the_nodes_record_of_the_invocation_holds_no_files_text(run_module, monkeypatch, tmp_path):
    # ansible-core 2.19 logs a suboption marked no_log in clear in the node's syslog ("Invoked with files=[{...
    # 'content': 'VLLM_API_KEY=...'"): seen in the lab's journal after diffs were allowed. Nothing of a file's text
    # may reach that record; the output still names every path and diffs every file that is not secret.
    from ansible.module_utils import basic
    logged = []
    monkeypatch.setattr(basic.AnsibleModule, "log", lambda self, msg, log_args=None: logged.append(msg))
    res = run_module(config_files, {"files": [
        {"path": str(tmp_path / "vllm.env"), "content": "VLLM_API_KEY=sk-lab-0123456789abcdef\n", "mode": "0600",
         "diff": False},
        {"path": str(tmp_path / "unit.service"), "content": "[Service]\nExecStart=/bin/true\n", "mode": "0644"}]},
        check_mode=True)
    assert logged and all("sk-lab-0123456789abcdef" not in m and "ExecStart" not in m for m in logged), logged
    assert res["changed_paths"] == [str(tmp_path / "vllm.env"), str(tmp_path / "unit.service")]
