"""Optional integrations: ``shmwin.integrations.limits`` (the ``shm://`` storage for limits)."""
