"""Shared memory a test left behind: the /dev/shm entries that appeared while it ran and that
no process outside its own process tree holds. The tests run in several pytest workers at
once (`make test`), so an entry another worker's test is using appears too; that one is
mapped or open in one of that worker's processes, never in this one's tree. An entry this
test's own processes leaked is held by nothing once they ended, or still by this process."""
from __future__ import annotations

import os
from pathlib import Path

from processes import descendants

SHM = Path("/dev/shm")


def shm_entries() -> set[str]:
    return set(os.listdir(SHM))


def leaked_since(before: set[str]) -> set[str]:
    """The entries new since ``before`` (``shm_entries()`` as the test started) that no live
    process outside this process and its descendants maps or holds open."""
    inodes = {}
    for name in shm_entries() - before:
        try:
            inodes[(SHM / name).stat().st_ino] = name
        except FileNotFoundError:  # removed meanwhile
            continue
    return set(inodes.values()) - {inodes[inode] for inode in held_by_others(set(inodes))} - others_joblib_folders(
        set(inodes.values()))


def others_joblib_folders(names: set[str]) -> set[str]:
    """Those of ``names`` that are joblib's memmapping folders of a process outside this
    process's tree (joblib names each ``joblib_memmapping_folder_<pid>_...`` after the process
    that made it; a folder is held open by nothing, so held_by_others cannot tell whose it is:
    another worker's joblib sweep removes it as its workers end)."""
    ours = descendants(os.getpid()) | {os.getpid()}
    prefix = "joblib_memmapping_folder_"
    return {name for name in names if name.startswith(prefix)
            and name[len(prefix):].split("_", 1)[0].isdigit() and int(name[len(prefix):].split("_", 1)[0]) not in ours}


def held_by_others(inodes: set[int]) -> set[int]:
    """Those of the /dev/shm ``inodes`` that a live process outside this process's tree maps
    or holds open. By inode, not by name: a POSIX semaphore is mapped under the temporary
    name it was made with, then linked to its own."""
    ours = descendants(os.getpid()) | {os.getpid()}
    held = set()
    for pid in {int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit()} - ours:
        held |= open_or_mapped(pid, inodes)
    return held


def open_or_mapped(pid: int, inodes: set[int]) -> set[int]:
    """Those of the /dev/shm ``inodes`` that process ``pid`` maps or has open (none where it
    has ended)."""
    device = SHM.stat().st_dev
    found = set()
    try:
        for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and fields[5].startswith(f"{SHM}/") and int(fields[4]) in inodes:
                found.add(int(fields[4]))
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.stat(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.st_dev == device and target.st_ino in inodes:
                found.add(target.st_ino)
    except OSError:  # ended, or not ours to read
        pass
    return found
