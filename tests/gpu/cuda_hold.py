"""Hold GPU memory until killed: the stand-in for a stale vLLM/SGLang process.

usage: cuda_hold.py MIB READY_FILE [--ignore-term] [--child MIB] [--comm NAME]
Without CUDA (SPARKFLEET_FAKE_GPU=<path>) it holds that file open instead, so the
orchestration can be dry-run on a machine with no GPU.
"""
import argparse
import ctypes
import os
import signal
import subprocess
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument('mib', type=int)
parser.add_argument('ready')
parser.add_argument('--ignore-term', action='store_true')
parser.add_argument('--child', type=int, default=0, help='also start a child holding MIB')
parser.add_argument('--comm', default=None, help='process name (comm) to take')
args = parser.parse_args()

if args.comm:
    libc = ctypes.CDLL(None)
    libc.prctl(15, ctypes.c_char_p(args.comm.encode()[:15]), 0, 0, 0)  # PR_SET_NAME
if args.ignore_term:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)

fake = os.environ.get('SPARKFLEET_FAKE_GPU')
if fake:
    hold = open(fake)
else:
    import torch
    hold = torch.empty(args.mib * 1024 * 1024, dtype=torch.uint8, device='cuda')
    hold.fill_(1)
    torch.cuda.synchronize()

child = None
if args.child:
    # A fresh interpreter, not a fork: a forked CUDA context is unusable.
    child = subprocess.Popen([sys.executable, __file__, str(args.child), args.ready + '.child'])
    while not os.path.exists(args.ready + '.child'):
        time.sleep(0.1)
with open(args.ready, 'w') as handle:
    handle.write('%d\n' % os.getpid())
while True:
    time.sleep(3600)
