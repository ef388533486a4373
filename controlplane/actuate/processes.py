"""Child processes of the control plane's own (`moectl up`'s services, the local scaler's instances): their death
with this process, and stopping them (their ports are bound here and handed over: agents/protocol/http.py).
(agents/processes.py is the agents' own: the control plane imports only the agents' protocol.)"""

from __future__ import annotations

import ctypes
import logging
import signal
import subprocess
import time

log = logging.getLogger("moectl.processes")
STOP_SECONDS = 20.0


def die_with_parent() -> None:
    """Runs in the child before exec: Linux sends it SIGTERM if this process dies without cleaning up."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def stop_processes(name_to_process: dict[str, subprocess.Popen], signum: int = signal.SIGTERM,
                   timeout: float = STOP_SECONDS) -> None:
    """`signum` to all at once, in the order given (SIGTERM: a launcher has its ranks agree on a step to stop at),
    then SIGKILL to those still running `timeout` seconds later."""
    for process in name_to_process.values():
        if process.poll() is None:
            process.send_signal(signum)
    deadline = time.monotonic() + timeout
    for name, process in name_to_process.items():
        try:
            process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            log.warning("%s did not stop in %.0fs; killing it", name, timeout)
            process.kill()
            process.wait()
