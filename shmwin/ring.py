"""Bucket-ring arithmetic: pure functions of integers and arrays, no shared memory.

A window of ``n_buckets`` buckets, each ``bucket_ns`` wide, lives in a ring of
slots. Time ``now_ns`` falls in bucket *epoch* ``now_ns // bucket_ns``, which is
stored in slot ``epoch % n_buckets`` together with its epoch number, so a reader
can tell a live bucket from one left over from an earlier lap::

    n_buckets = 5, bucket = 1 s, now = 12.4 s  ->  now_epoch = 12, slot 2

      slot:     0      1      2      3      4
      epoch:  [10]   [11]   [12]   [ 8]   [ 9]
                            ^ current (partial, filling now)
      live for total(last=5 s):  epochs 8..12  (every slot)
      live for total(last=2 s):  epochs 11..12 (slots 1, 2)
      at now = 13.0 s the writer finds epoch 8 in slot 3, sees it is stale
      (8 != 13), zeroes it and stamps 13: the window has slid by one bucket.

A slot whose epoch is not the one ``expected_epochs`` names for it is skipped
by readers (stale, never written, or written by a process whose clock already
moved into the next bucket). A gap longer than the span leaves every slot
stale, so the window reads as empty without anyone clearing it.

Granularity: ``total(last=k buckets)`` counts events from the start of bucket
``now_epoch - k + 1`` to now, i.e. a period between ``(k - 1) * bucket`` and
``k * bucket`` long. Events older than ``k`` buckets are never counted; events
up to one bucket width younger than that may already have dropped out.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

# a slot never written (or emptied): below every window; stamped at creation and by reset()
EMPTY_EPOCH = -(1 << 63)


def epoch_of(now_ns: int, bucket_ns: int) -> int:
    """The bucket number that ``now_ns`` falls in."""
    return now_ns // bucket_ns


def slot_of(epoch: int, n_buckets: int) -> int:
    """The ring slot that holds bucket ``epoch``."""
    return epoch % n_buckets


def buckets_for(last_ns: int, bucket_ns: int, n_buckets: int) -> int:
    """How many buckets (the current one included) cover the last ``last_ns``.

    Rounds up, so a request is never narrower than asked; more than the ring
    holds is a ``ValueError``.
    """
    if last_ns <= 0:
        raise ValueError("last must be positive")
    k = -(-last_ns // bucket_ns)
    if k > n_buckets:
        raise ValueError(
            f"last={last_ns / 1e9:g}s is longer than the window's span ({n_buckets * bucket_ns / 1e9:g}s)"
        )
    return k


NO_EPOCH = -1  # in expected_epochs(): this slot holds no bucket of the requested range


def expected_epochs(now_epoch: int, n_buckets: int, k: int) -> npt.NDArray[np.int64]:
    """Per slot, the one epoch it may hold to count among the last ``k`` buckets.

    Slot ``i`` can only hold epochs congruent to ``i`` mod ``n_buckets``, and just one
    of those lies in ``(now_epoch - n_buckets, now_epoch]``; slots outside the last ``k``
    get ``NO_EPOCH``. Readers then test liveness with a single ``==``.
    """
    slots = np.arange(n_buckets, dtype=np.int64)
    epochs = now_epoch - (now_epoch - slots) % n_buckets
    epochs[(epochs <= now_epoch - k) | (epochs < 0)] = NO_EPOCH
    return epochs


def slots_oldest_first(now_epoch: int, n_buckets: int, k: int) -> npt.NDArray[np.intp]:
    """Slot indices of the last ``k`` buckets, oldest first, the current one last."""
    first = now_epoch - k + 1
    return np.arange(first, now_epoch + 1, dtype=np.int64) % n_buckets
