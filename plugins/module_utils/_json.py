# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""JSON from a node's output and files, read so that no input crashes the reader (private to sparkfleet.vllm).

json.loads raises RecursionError on deeply nested input (a few thousand '[') and the callers catch ValueError only:
a traceback instead of a message. Reads of files are bounded in bytes and refuse anything that is not a regular file
(a FIFO would block the step for ever, /dev/zero would fill the memory).
"""

from __future__ import annotations

import json
import os
import stat

# A node's config.json, manifest or command output is far below this; more is not what we read.
MAX_JSON_BYTES = 64 * 1024 * 1024


def loads(text, what="the output", limit=MAX_JSON_BYTES):
    """json.loads, with every failure a ValueError naming what was read (never RecursionError, never MemoryError)."""
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", "replace")
    if text is None:
        text = ""
    if len(text) > limit:
        raise ValueError("%s is %d bytes, more than the %d read" % (what, len(text), limit))
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("%s nests JSON deeper than a parser follows" % what)
    except MemoryError:
        raise ValueError("%s is JSON too large to hold" % what)
    except ValueError as exc:
        raise ValueError("%s is not JSON: %s" % (what, str(exc)[:200]))


def read_regular(path, limit=MAX_JSON_BYTES):
    """The bytes of path when it is a regular file of at most limit bytes; ValueError (or OSError) otherwise.

    Opened without blocking (a FIFO's open would wait for a writer) and checked by fstat on the open file, so a swap
    of the path between a check and the open cannot slip a special file in.
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("%s is not a regular file (%s)" % (path, _kind(st.st_mode)))
        if st.st_size > limit:
            raise ValueError("%s is %d bytes, more than the %d read" % (path, st.st_size, limit))
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise ValueError("%s grew past %d bytes while it was read" % (path, limit))
        return b"".join(chunks)
    finally:
        os.close(fd)


def _kind(mode):
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory")):
        if test(mode):
            return name
    return "not a file"


def load_file(path, what=None, limit=MAX_JSON_BYTES):
    """The JSON document in path (a regular file, bounded); ValueError or OSError otherwise."""
    return loads(read_regular(path, limit), what or path, limit)
