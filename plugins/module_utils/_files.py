# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Reading the small files the kernel publishes (/proc, /sys) (private to sparkfleet.vllm)."""

from __future__ import annotations


def read_file(path, binary=False, strip=False):
    """The content of ``path``, or None when it is absent or unreadable.

    A process may exit between listing and reading /proc, and a real kernel answers EINVAL for unused sysfs
    slots (RDMA GID entries): both count as absent, as does text that is not UTF-8.
    """
    try:
        with open(path, "rb" if binary else "r") as handle:
            data = handle.read()
    except (IOError, OSError, UnicodeDecodeError):
        return None
    return data.strip() if strip else data
