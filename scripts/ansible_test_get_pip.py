"""Stand-in for ansible-test's downloaded get-pip bootstrap script.

ansible-test fetches get-pip from a host this machine cannot reach; this does the same job offline:
install the interpreter's bundled pip with ensurepip, then run pip with the arguments ansible-test gave.
scripts/sanity.sh copies it into ansible-test's cache under the name ansible-test looks for.
"""

import ensurepip
import os
import runpy
import sys

_env = dict(os.environ)
ensurepip.bootstrap(upgrade=False, default_pip=True)
# ensurepip points PIP_CONFIG_FILE at /dev/null for its own run; give pip its configuration back.
os.environ.clear()
os.environ.update(_env)
# get-pip takes install arguments without the "install" command, plus options of its own.
sys.argv[1:] = ["install"] + [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
runpy.run_module("pip", run_name="__main__", alter_sys=True)
