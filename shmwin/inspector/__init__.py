"""The read side: what ``shmwin ls/show/watch/export`` and the Prometheus collector show.

:mod:`.snapshots` (read-only snapshots of windows and limiters, lock-free), :mod:`.roles`
(what a window is for: a breaker's, a shedder's, an adaptive limiter's, limits' fixed-window
start records), :mod:`.attached` (which live processes map a segment). Nothing here writes.
"""
