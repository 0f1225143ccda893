# SPDX-License-Identifier: GPL-3.0-or-later
# Loaded by every Python that a ptw command rank starts (ptw puts this folder first on
# PYTHONPATH): lets ptw take the program's stacks when a rank stalls or `ptw stacks` asks
# (docs/stacks.md). With PTW_STACKS_FILE and PTW_STACKS_SIGNAL set, faulthandler writes
# every thread's frames to <PTW_STACKS_FILE>.<pid> on that signal, from a C handler, so
# even a process stuck in a C call or holding the GIL answers. Nothing runs until the
# signal comes. It then runs the sitecustomize this one shadows (a distribution's own),
# and never lets a failure of its own stop the program.


def _ptw_register_stacks():
    import os

    prefix = os.environ.get("PTW_STACKS_FILE")
    number = os.environ.get("PTW_STACKS_SIGNAL")
    if not prefix or not number:
        return
    import faulthandler
    import signal

    signum = int(number)
    # chain=True re-raises the signal for the handler that was there before; with none, the
    # default action of a real-time signal would end the process.
    previous = signal.getsignal(signum)
    chain = previous not in (signal.SIG_DFL, signal.SIG_IGN)
    out = open("%s.%d" % (prefix, os.getpid()), "a")
    faulthandler.register(signum, file=out, all_threads=True, chain=chain)
    # faulthandler holds the file too; kept here as well, so it is never closed under it.
    globals()["_ptw_stacks_out"] = out


def _ptw_run_shadowed_sitecustomize():
    import importlib.machinery
    import importlib.util
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


try:
    _ptw_register_stacks()
except Exception:
    pass
try:
    _ptw_run_shadowed_sitecustomize()
except Exception:
    # What the shadowed one raises, Python would only have printed and gone on.
    import traceback

    traceback.print_exc()
