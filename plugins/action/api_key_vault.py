# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of sparkfleet.vllm.api_key_vault (documented in plugins/modules/api_key_vault.py)."""

from __future__ import annotations

import base64
import os
import re
import secrets
import tempfile

import yaml

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.parsing.vault import AnsibleVaultError, VaultLib, is_encrypted
from ansible.plugins.action import ActionBase

ARGUMENT_SPEC = dict(
    path=dict(type="path", required=True),
    name=dict(type="str", default="vault_vllm_serve_api_key"),
    length=dict(type="int", default=32),
)
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
NO_PASSWORD = ("this run has no vault password, and the API key is written only encrypted: add --ask-vault-pass (-J) "
               "or --vault-password-file FILE")


def new_key(length):
    """A random key: ``length`` bytes from the system's CSPRNG, URL-safe base64 without padding (no whitespace, no
    character a shell or YAML would read)."""
    return base64.urlsafe_b64encode(secrets.token_bytes(length)).decode("ascii").rstrip("=")


def argument_problem(params):
    """What is wrong with the task's arguments (a sentence), or None."""
    if not NAME.match(params["name"] or ""):
        return "name %r is not a variable name (letters, digits and _, not starting with a digit)" % params["name"]
    if params["length"] < 16:
        return "length must be at least 16 random bytes, got %d" % params["length"]
    if not params["path"].strip():
        return "path is empty: name the vault file (e.g. inventories/sparks/group_vars/spark/vault.yml)"
    return None


def plan(text, name, decrypt):
    """What to do with the file's current bytes (None: it does not exist): (action, data, problem).

    action: 'create', 'add' or 'keep'; data: the decrypted variables (a dict) when the file exists; problem: a sentence
    when the file cannot be used. ``decrypt(bytes) -> bytes`` raises AnsibleVaultError when no password of this run
    opens it."""
    if text is None:
        return "create", {}, None
    if not is_encrypted(text):
        return None, None, ("it is not an ansible-vault file (it would hold the key in clear): encrypt it "
                            "(ansible-vault encrypt FILE) or move it away, then run again")
    try:
        clear = decrypt(text)
    except AnsibleVaultError as e:
        return None, None, ("this run's vault password does not open it (%s): give the password it was made with "
                            "(--ask-vault-pass or --vault-password-file)" % str(e).splitlines()[0][:160])
    try:
        data = yaml.safe_load(clear) or {}
    except yaml.YAMLError:
        return None, None, "it opens but is not YAML: fix it with ansible-vault edit FILE"
    if not isinstance(data, dict):
        return None, None, "it opens but is not a YAML mapping of variables: fix it with ansible-vault edit FILE"
    value = data.get(name)
    if value is None:
        return "add", data, None
    if not isinstance(value, str) or not value.strip():
        return None, None, ("its %s is empty or not a string: set a key with ansible-vault edit FILE, or remove the "
                            "line to have one generated" % name)
    return "keep", data, None


def render(data):
    return yaml.safe_dump(data, default_flow_style=False, sort_keys=True)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        validation = ArgumentSpecValidator(ARGUMENT_SPEC).validate(self._task.args)
        if validation.error_messages:
            raise AnsibleActionFail("api_key_vault: %s" % "; ".join(validation.error_messages))
        params = validation.validated_parameters
        problem = argument_problem(params)
        if problem:
            raise AnsibleActionFail("api_key_vault: %s" % problem)
        path = os.path.abspath(os.path.expanduser(params["path"]))
        name = params["name"]
        result.update(path=path, name=name, created=False, added=False, changed=False)
        if not os.path.isdir(os.path.dirname(path)):
            return dict(result, failed=True, msg="the vault file %s: its directory does not exist; create it (mkdir -p %s) "
                        "or set prepare_api_key_vault_file to a file in an existing directory" % (
                            path, os.path.dirname(path)))
        vault = self._loader._vault   # pylint: disable=protected-access  # the run's secrets (-J/--vault-password-file)
        try:
            with open(path, "rb") as f:
                text = f.read()
        except FileNotFoundError:
            text = None
        except OSError as e:
            return dict(result, failed=True, msg="the vault file %s cannot be read: %s" % (path, e.strerror or e))
        if text is not None and is_encrypted(text) and not vault.secrets:
            return dict(result, failed=True, msg="the vault file %s is encrypted and %s" % (path, NO_PASSWORD))
        action, data, problem = plan(text, name, vault.decrypt)
        if problem:
            return dict(result, failed=True, msg="the vault file %s: %s" % (path, problem.replace("FILE", path)))
        if action == "keep":
            return result
        if not vault.secrets:
            return dict(result, failed=True, msg="the vault file %s %s: %s" % (
                path, "does not exist yet" if action == "create" else "has no %s" % name, NO_PASSWORD))
        result.update(changed=True, created=action == "create", added=action == "add")
        if self._task.check_mode:
            return result
        data = dict(data, **{name: new_key(params["length"])})
        blob = VaultLib(vault.secrets).encrypt(render(data))
        fd, tmp_path = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".%s." % os.path.basename(path))
        try:
            os.fchmod(fd, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(blob)
            os.replace(tmp_path, path)
        except OSError as e:
            if os.path.exists(tmp_path):
                os.unlink(tmp_path)
            return dict(result, failed=True, msg="the vault file %s cannot be written: %s" % (path, e.strerror or e))
        return result
