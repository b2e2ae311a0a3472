# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Does a running container's bind mount still show the host's directory? (private to sparkfleet.vllm)

docker binds a directory's inode when the container starts. A directory deleted and created again on the host
(a re-download, a re-sync after ``rm -r``) is a new inode: the running container keeps the old one, empty or
removed, and a process inside it finds nothing. The container must be restarted to see the new directory.

``bind_state()`` decides from what the node says: the directory's inode on the host (``stat -c %i``), whether
the container runs (``docker inspect -f {{.State.Running}}``) and what ``stat -c %i:%h`` prints for the same path
inside the container (its inode and link count); ``read_bind()`` runs those commands through a module's Runner
(container_mount and node_facts).
"""

from __future__ import annotations

import os

# Seconds each docker call may take (a hung daemon fails the task instead of hanging the run).
TIMEOUT = 30

# The states, and whether the container must be restarted to see the host's directory.
STALE = {
    "absent": False,        # no such directory on the host: nothing to compare
    "not_running": False,   # the container does not run: it binds the current directory when it starts
    "same": False,          # the container sees the host's directory
    "not_visible": True,    # the path is not there inside the running container
    "removed": True,        # the container holds a directory deleted on the host since it started
    "other_inode": True,    # the container's path is another directory than the host's
}


def parse_stat(text):
    """``stat -c %i:%h`` output -> (inode, links), or None when it is not that."""
    inode, sep, links = (text or "").strip().partition(":")
    if not sep or not inode.isdigit() or not links.isdigit():
        return None
    return int(inode), int(links)


def bind_state(path, container, host_inode, running, seen):
    """(state, message) for ``path`` bound into ``container``.

    host_inode: the inode of ``path`` on the host, None when it does not exist there. running: whether the
    container runs. seen: ``(inode, links)`` of ``path`` inside the container, None when it cannot be read there.
    message is empty unless the state is stale.
    """
    if host_inode is None:
        return "absent", ""
    if not running:
        return "not_running", ""
    if seen is None:
        return "not_visible", "%s is not visible in the running container %s" % (path, container)
    inode, links = seen
    # A removed directory keeps its inode number, which the host may already have given to the new one: the
    # link count decides first.
    if links == 0:
        return "removed", ("%s was removed after %s started (the container still holds the old directory)"
                           % (path, container))
    if inode == host_inode:
        return "same", ""
    return "other_inode", "%s is inode %d in the container %s, %d on the host" % (path, inode, container, host_inode)


def read_bind(runner, path, container, timeout=TIMEOUT):
    """What container_mount reports for ``path`` in ``container`` on this node (fails the module on a hung docker)."""
    try:
        host_inode = os.stat(path).st_ino
    except OSError:
        host_inode = None
    running, seen = False, None
    docker = runner.bin("docker", required=False)
    if host_inode is not None and docker:
        res = runner.run([docker, "inspect", "-f", "{{.State.Running}}", container], timeout=timeout, kill_after=5)
        if res.timed_out:
            runner.fail(res, "docker did not answer within %d s" % timeout, hint="check the docker daemon on this node")
        running = res.ok and res.stdout.strip() == "true"
        if running:
            res = runner.run([docker, "exec", container, "stat", "-c", "%i:%h", "--", path], timeout=timeout,
                             kill_after=5)
            if res.timed_out:
                runner.fail(res, "docker exec in %s did not answer within %d s" % (container, timeout),
                            hint="check the docker daemon and the container on this node")
            seen = parse_stat(res.stdout) if res.ok else None
    state, message = bind_state(path, container, host_inode, running, seen)
    if not message:
        message = {
            "absent": "%s does not exist on this node" % path,
            "not_running": "%s does not run: it binds the current %s when it starts" % (container, path),
            "same": "%s sees this node's %s" % (container, path),
        }[state]
    return dict(state=state, stale=STALE[state], msg=message, host_inode=host_inode,
                container_inode=seen[0] if seen else None, container_links=seen[1] if seen else None)
