"""model_sync's run helpers on this machine: the per-directory transfer lock and stopping an orphaned transfer."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._model_sync_run import TransferLock, stop_tree

HOLDER = r'''
import subprocess, sys, time
sys.path.insert(0, sys.argv[2])
from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync._model_sync_run import TransferLock
TransferLock(sys.argv[1]).acquire()
child = subprocess.Popen(["sleep", "300"])  # what a transfer starts: rsync, ssh, the sender
print(child.pid, flush=True)
time.sleep(300)
'''
COLLECTIONS = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "collections"))


def test_a_second_taker_stops_the_holder_and_what_it_started(tmp_path):
    path = str(tmp_path / "cache" / "sync-x.lock")
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, path, COLLECTIONS], stdout=subprocess.PIPE, text=True)
    child = int(holder.stdout.readline())
    lock = TransferLock(path)
    note = lock.acquire(wait_s=20)
    assert note and "pid %d" % holder.pid in note and "was stopped" in note
    assert holder.wait(timeout=10) != 0
    deadline = time.time() + 10
    while time.time() < deadline and os.path.exists("/proc/%d" % child):
        if open("/proc/%d/stat" % child).read().split(") ")[1].startswith("Z"):
            break
        time.sleep(0.1)
    assert not os.path.exists("/proc/%d" % child) or "Z" in open("/proc/%d/stat" % child).read().split(") ")[1][:1]
    assert open(path).read().strip() == str(os.getpid())
    lock.release()
    again = TransferLock(path)
    assert again.acquire() is None  # free: nobody to stop
    again.release()


def test_stop_tree_is_harmless_on_a_process_already_gone():
    p = subprocess.Popen(["true"])
    p.wait()
    stop_tree(p.pid, grace=0.2)


@pytest.mark.parametrize("content", ["", "not a pid\n"])
def test_a_lock_file_without_a_holder_is_taken(tmp_path, content):
    path = tmp_path / "sync.lock"
    path.write_text(content)
    lock = TransferLock(str(path))
    assert lock.acquire() is None
    lock.release()
