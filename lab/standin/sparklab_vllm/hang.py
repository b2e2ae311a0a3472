"""`labctl break collective-hang HOST`: the next request step hangs as a two-Spark TP=2 engine hangs (vllm#42354).

The knob writes <uvm>/collective-hang on every host: `spin` on HOST, `wait` on the others. At the next step the rank
on HOST spins at 100 % CPU in spin_barrier() (a custom all-reduce's barrier that never sees its peer's flag) and
never enters the all-reduce; every other rank enters it and blocks there, in torch.distributed's all_reduce, for as
long as a real NCCL all-reduce would (a group with a long timeout, not the 120 s gloo default). The EngineCore then
waits for the step without its step timeout, so the API server stays up and /health keeps answering 200 while no
token comes back. The knob is one-shot: each rank renames its host's flag to collective-hang.fired as it enters the
hung step (the engine only reads it), so the engine a restart brings up serves again.
"""

from __future__ import annotations

import os

from .unified import uvm_dir

FLAG = "collective-hang"
HANG_TIMEOUT_S = 1800      # how long the waiting rank stays in its all-reduce (NCCL's watchdog in torch: 10-30 min)


def armed(d=None):
    """'spin', 'wait' or '' from <uvm>/collective-hang."""
    try:
        with open(os.path.join(d or uvm_dir(), FLAG)) as f:
            word = f.read().strip()
    except OSError:
        return ""
    return word if word in ("spin", "wait") else ""


def fire(d=None):
    """Consume this host's flag (one hang per `break`): its word when it was still there, else ''."""
    word = armed(d)
    path = os.path.join(d or uvm_dir(), FLAG)
    try:
        os.replace(path, path + ".fired")
    except OSError:
        return ""
    return word


def spin_barrier(peer_flags):
    """Spin on the peers' flags as a custom all-reduce's barrier does, at 100 % of one core, for ever: the peers never
    set them, since they already sit in the all-reduce this rank never joins."""
    spins = 0
    while not all(peer_flags):
        spins += 1
