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
from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._sync_shell import MARKER_NAME
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


# ---------------------------------------------------------------- every path the roles write

# Trees nothing of ours is ever written into: the kernel's, the boot loader's, the system's programs and libraries,
# docker's and containerd's own state, root's home.
NEVER_TREES = ("/proc", "/sys", "/dev", "/boot", "/efi", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
               "/usr/bin", "/usr/sbin", "/usr/include", "/usr/lib64", "/usr/libexec", "/snap", "/lost+found",
               "/var/lib/docker", "/var/lib/containerd", "/root")
# World-writable trees: any local user can plant a link or a file there before the roles write.
WORLD_WRITABLE_TREES = ("/tmp", "/var/tmp", "/dev/shm", "/run/shm", "/run/lock", "/var/lock")
# The operating system's trees: written only inside a directory of the collection's own (a component named
# sparkfleet..., e.g. /etc/sparkfleet, /var/lib/sparkfleet/ray, /usr/local/lib/sparkfleet).
OWN_DIR_TREES = ("/etc", "/usr", "/var", "/run")
OWN_PREFIX = "sparkfleet"
# Characters a written path may hold: it goes into systemd units, env files, `docker -v`, ssh forced commands and
# rsync arguments, and each of those splits or rewrites some other character.
_SAFE_PATH_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._+@/-")
PATH_KINDS = ("directory", "file", "model directory")


def _under(path, tree):
    return path == tree or path.startswith(tree.rstrip("/") + "/")


def normal_path(path):
    """The absolute path as the kernel reads it lexically: `..` and `.` folded, duplicate slashes dropped."""
    norm = posixpath.normpath(path)
    return "/" + norm.lstrip("/") if norm.startswith("//") else norm


def path_chars_problem(path):
    """Why the characters of a written path are unsafe, or None."""
    for ch in path:
        if ch not in _SAFE_PATH_CHARS:
            shown = {"\n": "a newline", "\0": "a NUL byte", "\t": "a tab", " ": "a space"}.get(ch, repr(ch))
            return ("holds %s; a path the roles write may hold only ASCII letters, digits and . _ + @ - / (it goes"
                    " into systemd units, env files, docker -v, ssh forced commands and rsync arguments)" % shown)
    return None


def _home_problem(norm, homes):
    """Why norm is a home directory, or lies in a home's dot-directory (~/.ssh, ~/.docker ...), or None."""
    candidates = set(h for h in homes if isinstance(h, str) and h.startswith("/") and normal_path(h) != "/")
    parts = norm.strip("/").split("/")
    if len(parts) >= 2 and parts[0] == "home":
        candidates.add("/home/" + parts[1])
    for home in sorted(candidates, key=len, reverse=True):
        home = normal_path(home)
        if norm == home:
            return "is the home directory %s itself" % home
        if _under(norm, home):
            first = norm[len(home) + 1:].split("/")[0]
            if first.startswith("."):
                return ("lies in the dot-directory %s/%s of a home (ssh keys, docker and tool credentials live in"
                        " such directories)" % (home, first))
    return None


def written_path_problem(path, kind="directory", homes=()):
    """Why the roles must not write (create, chown, chmod, overwrite) ``path``, or None.

    kind is "directory", "file" or "model directory"; homes are the home directories of the node's users (the
    node module passes them; /home/<user> is always one). The check is on the path as written, normalised: the
    node module runs it again on the path each symbolic link leads to. Refused: a relative or unsafe path, the
    kernel's and the system's trees (/proc, /sys, /dev, /boot, /usr/bin, /var/lib/docker, /root ...),
    world-writable trees (/tmp, /var/tmp, /dev/shm), anything under /etc, /usr, /var, /run that is not inside a
    directory of the collection's own (named sparkfleet...), a home itself and a home's dot-directories.
    """
    if not isinstance(path, str) or not path.strip():
        return "is empty; set an absolute path"
    if not path.startswith("/"):
        return "is not an absolute path"
    problem = path_chars_problem(path)
    if problem:
        return problem
    norm = normal_path(path)
    if kind == "file" and (path.endswith("/") or norm == "/"):
        return "ends with '/'; it must name a file"
    if norm == "/":
        return "is the root directory /"
    if norm in SYSTEM_DIRS and not posixpath.basename(norm).startswith(OWN_PREFIX):
        return "is the system directory %s" % norm
    for tree in NEVER_TREES:
        if _under(norm, tree):
            return "lies under %s, which belongs to the system" % tree
    for tree in WORLD_WRITABLE_TREES:
        if _under(norm, tree):
            return ("lies under %s, which every local user can write (a link planted there would redirect what"
                    " the roles write)" % tree)
    problem = _home_problem(norm, homes)
    if problem:
        return problem
    for tree in OWN_DIR_TREES:
        if _under(norm, tree):
            rest = norm[len(tree) + 1:].split("/")
            if not any(part.startswith(OWN_PREFIX) for part in rest):
                return ("lies under the system directory %s, where the roles write only inside a directory of their"
                        " own named %s..." % (tree, OWN_PREFIX))
    return None
