"""Stands for a long training job: starts a helper process that ignores SIGTERM and SIGINT,
writes both pids to $CKPT_TEST_OUT, then waits to be stopped. With `stubborn` it ignores
SIGTERM and SIGINT itself too."""
import json
import os
import signal
import subprocess
import sys
import time

IGNORE = ("import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
          "signal.signal(signal.SIGINT, signal.SIG_IGN); print('ready', flush=True); "
          "time.sleep(600)")

helper = subprocess.Popen([sys.executable, "-c", IGNORE], stdout=subprocess.PIPE)
helper.stdout.readline()
if "stubborn" in sys.argv[1:]:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
out = os.environ["CKPT_TEST_OUT"]
with open(out + ".tmp", "w") as handle:
    json.dump({"pid": os.getpid(), "helper": helper.pid}, handle)
os.replace(out + ".tmp", out)
while True:
    time.sleep(0.1)
