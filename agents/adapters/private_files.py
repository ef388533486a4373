"""Files only we may write, written whole: the I/O under the state directory (state_dir.py) and the sidecars' stores.

- A directory is ours when it is a real directory (not a link), owned by this user and not writable by others;
  a default one is created 0700. Anything else is refused with what to do, never used.
- A write goes to a temp file of a unique name opened O_EXCL|O_NOFOLLOW (a planted link or a second writer
  cannot redirect it), fsynced, renamed over the target, then the directory fsynced: a reader or a crash sees
  the old file or the new one, never half of one.
- A read opens with O_NOFOLLOW and reads only a regular file owned by us, at most `max_bytes`.
- `locked` holds an fcntl lock on the directory's `.lock` for a read-modify-write (threads and processes alike).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path

MAX_FILE_BYTES = 256 << 20


class NotOurs(OSError):
    """A path we refuse to use: a link, not a regular file or directory, someone else's, writable by others."""


def check_private_dir(directory: Path) -> Path:
    """`directory` when it is ours (see the module); raises NotOurs saying what to fix."""
    info = os.lstat(directory)
    if not stat.S_ISDIR(info.st_mode):
        raise NotOurs(errno.ENOTDIR, f"{directory} is not a directory (a link or a file): remove it or choose "
                                     "another state directory")
    if info.st_uid != os.getuid():
        raise NotOurs(errno.EPERM, f"{directory} is owned by uid {info.st_uid}, not by us (uid {os.getuid()}): "
                                   "choose a directory of ours")
    if info.st_mode & stat.S_IWOTH:
        raise NotOurs(errno.EPERM, f"{directory} is writable by others (mode {stat.filemode(info.st_mode)}): "
                                   f"chmod o-w {directory}, or choose a directory of ours")
    return Path(directory)


def private_dir(directory: Path) -> Path:
    """`directory`, created 0700 when missing (its parents as mkdir -p does), then checked to be ours."""
    with contextlib.suppress(FileExistsError):
        Path(directory).mkdir(mode=0o700, parents=True)
    return check_private_dir(Path(directory))


def write_atomic(path: Path, data: bytes) -> None:
    """Replaces `path` whole (see the module). The directory must exist."""
    directory = path.parent
    temporary = directory / f".{path.name}.{os.getpid()}.{secrets.token_hex(6)}.tmp"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    fsync_dir(directory)


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_ours(path: Path, max_bytes: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of a regular file of ours; FileNotFoundError when absent, NotOurs when not ours."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
            raise NotOurs(errno.EPERM, f"{path} is not a regular file of ours: not read")
        if info.st_size > max_bytes:
            raise NotOurs(errno.EFBIG, f"{path} holds {info.st_size} bytes, more than {max_bytes}: not read")
        chunks, left = [], info.st_size + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


@contextlib.contextmanager
def locked(directory: Path) -> Iterator[None]:
    """An exclusive lock on `directory`/.lock while the block runs (not re-entrant: never nest)."""
    fd = os.open(Path(directory) / ".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock
