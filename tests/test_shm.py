"""tests/shm.py: the check that a test left no shared memory tells this test's entries from
those another pytest worker's test holds."""
import os
import subprocess
import sys

import pytest
from shm import SHM, leaked_since, shm_entries

HOLDER = """
import subprocess, sys
# the holder's own child, left to run on: once this process exits it belongs to no test's tree
holder = subprocess.Popen([sys.executable, "-c", '''
import sys
with open(sys.argv[1], "w"):
    print("holding", flush=True)
    sys.stdin.read()  # until the test closes it
''', sys.argv[1]], stdin=sys.stdin, stdout=sys.stdout)
"""


@pytest.mark.timeout(60)
def test_new_entries_this_process_holds_or_nobody_holds_are_leaks_those_held_elsewhere_are_not():
    before = shm_entries()
    names = [f"rlcollect-test-{os.getpid()}-{what}" for what in ("unheld", "ours", "elsewhere")]
    unheld, ours, elsewhere = (SHM / name for name in names)
    outside = None
    try:
        unheld.write_bytes(b"x")  # written and closed: nobody holds it
        held = open(ours, "w")  # still open in this process
        outside = subprocess.Popen([sys.executable, "-c", HOLDER, str(elsewhere)], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, text=True)
        assert outside.stdout.readline() == "holding\n"  # the holder has it open, outside this process's tree
        assert outside.wait(timeout=30) == 0  # its parent exited: the holder is no descendant of this process
        assert leaked_since(before) == {names[0], names[1]}
        held.close()
        assert leaked_since(before) == {names[0], names[1]}  # closed but not removed: still a leak
    finally:
        if outside is not None:
            outside.stdin.close()  # the holder reads its end and exits
            outside.stdout.close()
        for path in (unheld, ours, elsewhere):
            path.unlink(missing_ok=True)
    assert not leaked_since(before)
