"""Run a live view (``shmwin watch ...``) as a user does, and press Ctrl-C once it has drawn.

    python ctrl_c_after_frame.py MARK COMMAND...

Starts COMMAND, copies its output through, sends it SIGINT (what Ctrl-C sends) once a line
holding MARK has been printed -- a drawn frame, so its handlers are in place, however slowly it
started -- and exits with COMMAND's own status, 0 for a view that quits cleanly on Ctrl-C.
"""

from __future__ import annotations

import signal
import subprocess
import sys


def main(mark: str, argv: list[str]) -> int:
    with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            if mark in line:
                proc.send_signal(signal.SIGINT)
                break
        sys.stdout.write(proc.stdout.read())
        return proc.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
