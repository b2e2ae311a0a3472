# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Import sparkfleet.vllm's AWX objects after setting the two values only you know.

  export SPARKFLEET_SCM_URL=https://git.example.com/you/sparkfleet.vllm.git   # the project AWX clones
  export SPARKFLEET_EE_IMAGE=registry.example.com/sparkfleet-vllm-ee:0.3.0    # the execution environment you pushed
  python3 extensions/awx/sparkfleet_awx.py --check .     # dry run: nothing is sent to AWX
  python3 extensions/awx/sparkfleet_awx.py --import      # = the export with both values set | awx import

Without --check or --import it prints the export with both values set (for `awx import` or awx.awx.import).
--check PROJECT_DIR checks, without AWX: both values are set; the export holds only what awxkit imports, each object
with its natural key and every reference resolved (awxkit's own lists when awxkit is installed); every job template
runs a playbook AWX would list for a project checked out at PROJECT_DIR, with become enabled; the inventory source's
file exists there. Exit codes: 0 done, 1 a check failed (each problem printed), 2 bad command line or a value
missing, 3 `awx import` failed.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ASSETS = os.path.join(HERE, "sparkfleet-vllm.json")
SETTINGS = (("scm_url", "SPARKFLEET_SCM_URL", "--scm-url", "the git URL of your clone of sparkfleet.vllm (AWX clones it"
             " as the project)"),
            ("ee_image", "SPARKFLEET_EE_IMAGE", "--ee-image", "the execution environment image you built and pushed"
             " (docs/awx.md, step 1)"))
PLACEHOLDER = re.compile(r"^SET-")

# What `awx import` (awxkit) reads, and each type's natural key, when awxkit is not installed (awxkit's own lists
# are used when it is).
EXPORTABLE = ("users", "organizations", "teams", "credential_types", "credentials", "notification_templates", "projects",
              "inventory", "inventory_sources", "job_templates", "workflow_job_templates", "execution_environments",
              "applications", "schedules")
NATURAL_KEYS = {"organization": ("name",), "credential_type": ("name", "kind"), "project": ("organization", "name"),
                "job_template": ("organization", "name"), "execution_environment": ("name",),
                "inventory": ("organization", "name"), "inventory_source": ("organization", "name", "inventory")}
# Natural-key fields AWX leaves out of an object's key when the object has no such field of its own.
DERIVED = {("job_template", "organization"), ("inventory_source", "organization")}

# How AWX lists a project's playbooks (awx/main/utils/ansible.py): .yml/.yaml files outside roles/, tasks/,
# group_vars/, host_vars/ and hidden directories, with a line naming hosts, include or import_playbook (or vaulted).
PLAYBOOK_LINE = re.compile(r"^\s*-?\s*(?:hosts|include|import_playbook):")
SKIPPED_DIRS = ("roles", "tasks", "group_vars", "host_vars")


def awxkit_rules():
    """(exportable resources, {type: natural key}) from awxkit when it is installed, else this file's copy."""
    try:
        from awxkit.api import pages  # pylint: disable=import-outside-toplevel
        from awxkit.api.pages.api import EXPORTABLE_RESOURCES  # pylint: disable=import-outside-toplevel
    except ImportError:
        return EXPORTABLE, NATURAL_KEYS, False
    classes = {"organization": "Organization", "credential_type": "CredentialType", "project": "Project",
               "job_template": "JobTemplate", "execution_environment": "ExecutionEnvironment", "inventory": "Inventory",
               "inventory_source": "InventorySource"}
    return tuple(EXPORTABLE_RESOURCES), {t: tuple(getattr(pages, c).NATURAL_KEY) for t, c in classes.items()}, True


def project_playbooks(project_dir):
    """The playbooks AWX offers for a project checked out at project_dir (paths relative to it)."""
    found = []
    for dirpath, dirnames, filenames in os.walk(project_dir):
        rel = os.path.relpath(dirpath, project_dir)
        parts = [] if rel == "." else rel.split(os.sep)
        if any(p in SKIPPED_DIRS or p.startswith(".") for p in parts):
            dirnames[:] = []
            continue
        for name in sorted(filenames):
            if os.path.splitext(name)[1] not in (".yml", ".yaml"):
                continue
            path = os.path.join(dirpath, name)
            try:
                with open(path, encoding="utf-8", errors="ignore") as f:
                    for n, line in enumerate(f):
                        if PLAYBOOK_LINE.match(line) or (n == 0 and line.startswith("$ANSIBLE_VAULT;")):
                            found.append(os.path.relpath(path, project_dir))
                            break
            except OSError:
                continue
    return sorted(found)


def render(assets, scm_url, ee_image):
    """The export with the project's URL and the execution environment's image set."""
    out = copy.deepcopy(assets)
    for project in out.get("projects", []):
        project["scm_url"] = scm_url
    for ee in out.get("execution_environments", []):
        ee["image"] = ee_image
    return out


def problems(assets, project_dir):
    """Every reason `awx import` of this export would fail or give job templates that cannot run."""
    exportable, natural_keys, _from_awxkit = awxkit_rules()
    found = []
    for resource in sorted(set(assets) - set(exportable)):
        found.append("%s: awx import does not read this key (it reads %s)" % (resource, ", ".join(exportable)))
    known = {json.dumps({"name": "Default", "type": "organization"}, sort_keys=True)}
    for items in assets.values():
        for item in items:
            known.add(json.dumps(item.get("natural_key"), sort_keys=True))
    for resource, items in assets.items():
        for item in items:
            key = item.get("natural_key") or {}
            fields = natural_keys.get(key.get("type"))
            name = item.get("name", "?")
            if fields is None:
                found.append("%s %r: unknown natural key type %r" % (resource, name, key.get("type")))
                continue
            need = {f for f in fields if (key["type"], f) not in DERIVED} | {"type"}
            if not need <= set(key) <= set(fields) | {"type"}:
                found.append("%s %r: natural key %s, awxkit's is %s" % (resource, name, sorted(key), sorted(need)))
            for field, value in item.items():
                if field != "natural_key" and isinstance(value, dict) and "type" in value \
                        and json.dumps(value, sort_keys=True) not in known:
                    found.append("%s %r: %s refers to %s, which neither this export nor AWX defines" % (
                        resource, name, field, json.dumps(value, sort_keys=True)))
    for project in assets.get("projects", []):
        if PLACEHOLDER.match(project.get("scm_url") or ""):
            found.append("project %r: scm_url is not set (SPARKFLEET_SCM_URL or --scm-url)" % project["name"])
    for ee in assets.get("execution_environments", []):
        if PLACEHOLDER.match(ee.get("image") or ""):
            found.append("execution environment %r: image is not set (SPARKFLEET_EE_IMAGE or --ee-image)" % ee["name"])
    if project_dir is not None:
        playbooks = project_playbooks(project_dir)
        for jt in assets.get("job_templates", []):
            if jt.get("playbook") not in playbooks:
                found.append("job template %r: playbook %r is not one AWX lists for the project (%s): AWX would refuse"
                             " it ('Playbook not found for project')" % (jt["name"], jt.get("playbook"),
                                                                         ", ".join(playbooks) or "none"))
        for source in assets.get("inventory_sources", []):
            if source.get("source") == "scm" and not os.path.isfile(os.path.join(project_dir, source["source_path"])):
                found.append("inventory source %r: %s is not in the project" % (source["name"], source["source_path"]))
    for jt in assets.get("job_templates", []):
        if jt.get("become_enabled") is not True:
            found.append("job template %r: become_enabled is not true, so AWX would not pass --become (the plays need"
                         " root on the nodes)" % jt["name"])
    return found


def parser():
    p = argparse.ArgumentParser(prog="sparkfleet_awx.py", description=__doc__.splitlines()[0],
                                epilog="\n".join(__doc__.splitlines()[2:]),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    for key, env, option, what in SETTINGS:
        p.add_argument(option, dest=key, default=os.environ.get(env), help="%s (default: $%s)" % (what, env))
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--check", metavar="PROJECT_DIR", help="dry run against a checkout of the project")
    mode.add_argument("--import", dest="do_import", action="store_true", help="run `awx import` with the export")
    p.add_argument("--assets", default=ASSETS, help="the export to read (default: sparkfleet-vllm.json beside this)")
    return p


def main(argv=None):
    args = parser().parse_args(argv)
    missing = [(option, env, what) for key, env, option, what in SETTINGS if not getattr(args, key)]
    if missing:
        for option, env, what in missing:
            sys.stderr.write("sparkfleet_awx: set %s (or %s): %s\n" % (env, option, what))
        return 2
    try:
        with open(args.assets, encoding="utf-8") as f:
            assets = json.load(f)
    except (OSError, ValueError) as e:
        sys.stderr.write("sparkfleet_awx: cannot read %s: %s\n" % (args.assets, e))
        return 2
    rendered = render(assets, args.scm_url, args.ee_image)
    if args.check is not None:
        if not os.path.isdir(args.check):
            sys.stderr.write("sparkfleet_awx: --check %s: not a directory\n" % args.check)
            return 2
        found = problems(rendered, args.check)
        for problem in found:
            sys.stderr.write("sparkfleet_awx: %s\n" % problem)
        if found:
            return 1
        rules = "awxkit's rules" if awxkit_rules()[2] else "awxkit's rules as copied here (awxkit is not installed)"
        print("dry run ok (%s): awx import would create or update" % rules)
        for resource, items in rendered.items():
            for item in items:
                print("  %s: %s" % (item["natural_key"]["type"], item["name"]))
        print("  project %s (%s), execution environment image %s" % (
            rendered["projects"][0]["name"], args.scm_url, args.ee_image))
        return 0
    text = json.dumps(rendered, indent=2) + "\n"
    if not args.do_import:
        sys.stdout.write(text)
        return 0
    awx = shutil.which("awx")
    if awx is None:
        sys.stderr.write("sparkfleet_awx: the awx command is not installed (pip install awxkit)\n")
        return 3
    proc = subprocess.run([awx, "import"], input=text, text=True, check=False)
    return 0 if proc.returncode == 0 else 3


if __name__ == "__main__":
    sys.exit(main())
