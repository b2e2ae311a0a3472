# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which paths a model directory may be: the guard that keeps a sync (or a chown, or a cache drop) off `/`.

Pure functions, shared by the model_sync module, its remote destination check and preflight's validation.
"""

from __future__ import annotations

import posixpath

# A file model_sync writes into every model directory it fills marks the directory as ours (defined beside the
# sync key's forced command, which runs standalone on workers).
from ansible_collections.sparkfleet.vllm.plugins.module_utils._sync_shell import MARKER_NAME
# Names that make a directory a model directory even without our marker.
MODEL_FILES = ("config.json", "model.safetensors.index.json", "pytorch_model.bin.index.json", MARKER_NAME)

# Directories of the operating system: never a model directory, and nothing directly under the first group.
SYSTEM_DIRS = frozenset((
    "/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32", "/media", "/mnt",
    "/opt", "/proc", "/root", "/run", "/sbin", "/snap", "/srv", "/sys", "/tmp", "/usr", "/var",
    "/usr/bin", "/usr/include", "/usr/lib", "/usr/lib64", "/usr/libexec", "/usr/local", "/usr/local/bin",
    "/usr/local/lib", "/usr/sbin", "/usr/share", "/usr/src", "/var/cache", "/var/lib", "/var/log",
    "/var/tmp", "/var/spool", "/var/mail", "/var/backups", "/var/lib/docker", "/etc/sparkfleet",
))
# Trees whose every subdirectory belongs to the system (a model never lives inside them).
SYSTEM_TREES = ("/bin/", "/boot/", "/dev/", "/etc/", "/lib/", "/lib32/", "/lib64/", "/proc/", "/run/",
                "/sbin/", "/sys/", "/usr/bin/", "/usr/lib/", "/usr/sbin/", "/usr/include/",
                "/var/lib/docker/", "/var/log/")


def model_path_problem(path, what="model directory"):
    """Return why ``path`` cannot be a model directory, or None when it may be one.

    Refused: empty or blank, relative, `/`, an operating-system directory or a path inside one (`/etc/x`,
    `/usr/lib/x`), a home directory itself (`/home/spark`, `/root`), and paths with `..` that climb out.
    The check is on the path as written and as normalised, so `/models/../` is `/`.
    """
    if path is None or not str(path).strip():
        return "the %s is empty" % what
    raw = str(path)
    if raw != raw.strip():
        return "the %s %r has leading or trailing whitespace" % (what, raw)
    if "\0" in raw or "\n" in raw:
        return "the %s %r holds a NUL or newline character" % (what, raw)
    if not raw.startswith("/"):
        return "the %s %r is not an absolute path" % (what, raw)
    norm = posixpath.normpath(raw)
    if norm.startswith("//"):
        norm = "/" + norm.lstrip("/")
    if norm in SYSTEM_DIRS:
        return "the %s %r is the system directory %s" % (what, raw, norm)
    for tree in SYSTEM_TREES:
        if (norm + "/").startswith(tree):
            return "the %s %r lies inside the system directory %s" % (what, raw, tree.rstrip("/"))
    parts = norm.strip("/").split("/")
    if len(parts) == 2 and parts[0] == "home":
        return "the %s %r is a home directory itself" % (what, raw)
    return None


def looks_like_model_dir(names):
    """True when a directory listing (names of its entries) is a model directory or ours."""
    return any(n in names for n in MODEL_FILES)
