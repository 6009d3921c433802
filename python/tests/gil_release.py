"""Checking that a call releases the GIL, shared by test_threads.py and test_promises.py."""

import sys
import threading


def releases_the_gil(call, attempts=20_000):
    """Whether another thread runs while `call` runs, called up to `attempts` times. With
    forced GIL switches off, a waiting thread can only run while the main thread releases
    the GIL of its own accord, inside the call: without a release it never runs (the
    answer is False, nothing hangs); with one, it runs within a few calls."""
    ran, go = [], threading.Event()
    waiter = threading.Thread(target=lambda: (go.wait(), ran.append(True)))
    waiter.start()
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1000.0)
    try:
        go.set()  # the waiter now wants the GIL; only a release in the call lets it in
        for _ in range(attempts):
            call()
            if ran:
                break
        # Read before the join: the waiter always runs once the main thread waits for it.
        released = bool(ran)
    finally:
        sys.setswitchinterval(interval)
        waiter.join()
    return released
