"""vaulted_inventory: which inventory files are ansible-vault encrypted (issue 41.3), on files ansible-vault wrote."""

from __future__ import annotations

import os
import subprocess
import sys

from ansible_collections.sparkfleet.vllm.plugins.lookup.vaulted_inventory import vaulted_files


def _encrypt(path, tmp_path):
    pw = tmp_path / "pw"
    pw.write_text("pw\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-vault"), "encrypt", "--vault-password-file",
                    str(pw), str(path)], check=True, capture_output=True, env=env)


def test_a_file_a_directory_and_what_is_left_out(tmp_path):
    inv = tmp_path / "inv"
    (inv / "group_vars" / "spark").mkdir(parents=True)
    (inv / "hosts.yml").write_text("spark:\n  hosts:\n    a:\n")
    (inv / "group_vars" / "spark" / "vault.yml").write_text("x: 1\n")
    (inv / ".hidden").write_text("y: 1\n")
    _encrypt(inv / "group_vars" / "spark" / "vault.yml", tmp_path)
    _encrypt(inv / ".hidden", tmp_path)
    single = tmp_path / "single.yml"
    single.write_text("spark: {}\n")
    _encrypt(single, tmp_path)
    assert vaulted_files([str(inv)]) == [str(inv / "group_vars" / "spark" / "vault.yml")]
    assert vaulted_files([str(single), str(inv / "hosts.yml")]) == [str(single)]
    assert vaulted_files(["a,b,", str(tmp_path / "nonexistent"), "", None]) == []
