# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What every module needs to run a command and report it (private to sparkfleet.vllm).

Modules parse what commands print, so commands run in the C locale (English messages, ``.`` decimals, plain
ASCII sorting) whatever the node's locale is; a failure shows the last lines of what the command printed.
"""

from __future__ import annotations

C_LOCALE = {"LANG": "C", "LC_ALL": "C", "LC_MESSAGES": "C", "LC_CTYPE": "C"}


def c_locale(**extra):
    """The C-locale environment for ``run_command(environ_update=...)``, plus ``extra`` variables."""
    env = dict(C_LOCALE)
    env.update(extra)
    return env


def tail(text, lines=20):
    """The last ``lines`` lines of a command's output, for a message a person reads."""
    return "\n".join((text or "").strip().splitlines()[-lines:])
