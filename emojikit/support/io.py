"""Small file helpers: atomic writes (temp file then rename) and checked JSONL reading.

Writes turn an operating-system failure a user can fix (full disk, read-only location, a file
where a directory should be) into one OutputError naming the path; reads name file:line for
a line that is not UTF-8, not JSON, or absurdly long. Every text written passes through
`emojikit.api.secrets.scrub`, so a key pasted into any value never reaches a file.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional

from emojikit.api.errors import InputFileError, OutputError

# Longest line an input file (datasets, prompt files, targets) may have: a longer one is a
# mistake (a whole file on one line, a binary file) and is reported before any model loads.
INPUT_LINE_MAX_BYTES = 1 << 20

# Operating-system failures a user can fix, as the words of the one-line error.
OS_PROBLEMS = {
    errno.ENOSPC: "no space left on device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EACCES: "permission denied (a read-only location?)",
    errno.EPERM: "operation not permitted (a read-only location?)",
    errno.EROFS: "read-only file system",
    errno.EISDIR: "is a directory, expected a file",
    errno.ENOTDIR: "a file is in the way where a directory is expected",
    errno.EEXIST: "a file is in the way where a directory is expected",
    errno.ENAMETOOLONG: "file name too long",
}


def os_problem(exc: OSError) -> Optional[str]:
    """The words for a user-fixable OSError, or None for one that is a bug."""
    return OS_PROBLEMS.get(exc.errno)


@contextlib.contextmanager
def writing(path: Path | str, doing: str = "", *, name_path: bool = False):
    """Turn a user-fixable OSError raised inside into an OutputError naming the file that
    failed (or `path` itself, with name_path)."""
    try:
        yield
    except OSError as exc:
        problem = os_problem(exc)
        if problem is None:
            raise
        where = path if name_path else exc.filename or path
        raise OutputError(f"{where}: {problem}" + (f" while {doing}" if doing else "")) from None


def _scrub(text: str) -> str:
    from emojikit.api.secrets import scrub

    return scrub(text)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_path(path: Path | str, *, suffix: str = ".tmp") -> Iterator[Path]:
    """The one temp-file-then-rename writer: yields a temporary file beside `path` for the
    block to write (by name or by opening it); when the block ends without an error the file
    is flushed to disk and renamed onto `path`, so a reader never sees a partial file, even
    after kill -9. On an error it is removed and the file as it was stays intact.

    `suffix` ends the temporary name, for writers that read a format from it (".png" for
    savefig, ".npy" for np.save). The file gets normal permissions (mkstemp's are 0600)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=suffix)
    os.close(fd)
    tmp = Path(name)
    try:
        os.chmod(tmp, 0o666 & ~_umask())
        yield tmp
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # the file as it was stays intact
        raise


@contextlib.contextmanager
def atomic_directory(path: Path | str, *, replace: bool = True, tmp_name: Optional[str] = None) -> Iterator[Path]:
    """atomic_path for a folder (a checkpoint, a model cache): yields a temporary directory
    beside `path` to fill; when the block ends without an error it is renamed to `path`.

    An older `path` is replaced: moved aside first, removed only once the new one is in place.
    With replace=False an existing, non-empty `path` is kept instead: the rename fails with an
    OSError and the new copy is removed (two processes filling the same cache; the first
    wins). On an error the temporary directory is removed.

    `tmp_name` fixes the temporary directory's name (one writer at a time: a run's checkpoint
    folder, whose name says which step it holds); one left by a killed writer is removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if tmp_name is None:
        tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"))
    else:
        tmp = path.parent / tmp_name
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
    try:
        os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes it private
        yield tmp
        if path.is_dir() and not any(path.iterdir()):
            path.rmdir()  # an empty placeholder (e.g. made by a cache lookup)
        if path.exists() and replace:
            old = path.with_name(f".{path.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.rename(path, old)
            os.rename(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def atomic_write_text(path: Path | str, text: str) -> None:
    """Write text so a reader never sees a partial file, even after kill -9."""
    path = Path(path)
    text = _scrub(text)
    with writing(path, f"writing {path.name}"), atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)


def save_png(fig: Any, path: Path | str) -> None:
    """Save a matplotlib figure as a PNG through atomic_path (100 dpi, the reports' size)."""
    path = Path(path)
    with writing(path, f"writing {path.name}"), atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp, format="png", dpi=100)


def atomic_write_jsonl(path: Path | str, rows: Iterable[dict]) -> int:
    lines = [json.dumps(row, ensure_ascii=False) for row in rows]
    atomic_write_text(path, "".join(line + "\n" for line in lines))
    return len(lines)


def append_jsonl(path: Path | str, row: dict) -> None:
    """Append one complete line with a single write and fsync; readers skip a torn last line."""
    path = Path(path)
    data = (_scrub(json.dumps(row, ensure_ascii=False)) + "\n").encode("utf-8")
    with writing(path, f"writing {path.name}"):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            written = os.write(fd, data)
            if written != len(data):  # a short write: the disk filled up part-way
                os.ftruncate(fd, os.fstat(fd).st_size - written)
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
            os.fsync(fd)
        finally:
            os.close(fd)


def read_lines(path: Path | str, *, what: str = "file", max_line_bytes: Optional[int] = INPUT_LINE_MAX_BYTES) -> list[tuple[int, str, bool]]:
    """(line number, text, ends with a newline) of every line; a directory, a line that is
    not UTF-8 or a line over max_line_bytes raises InputFileError naming file:line."""
    path = Path(path)
    if not path.exists():
        raise InputFileError(f"{path}: file not found")
    if path.is_dir():
        raise InputFileError(f"{path}: is a directory, expected a {what}")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputFileError(f"{path}: cannot read ({os_problem(exc) or exc.strerror})") from None
    if data.startswith(b"\xef\xbb\xbf"):  # a byte-order mark, as Windows editors and spreadsheets write UTF-8
        data = data[3:]
    lines = []
    raw_lines = data.split(b"\n")
    for number, raw in enumerate(raw_lines, start=1):
        terminated = number < len(raw_lines)
        if not terminated and not raw:
            break
        if max_line_bytes is not None and len(raw) > max_line_bytes:
            raise InputFileError(f"{path}:{number}: line of {len(raw) / 1e6:.1f} MB, over the {max_line_bytes / 1e6:.1f} MB limit of one line")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputFileError(f"{path}:{number}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at column {exc.start + 1})") from None
        lines.append((number, text, terminated))
    return lines


def read_jsonl_numbered(
    path: Path | str, *, tolerate_torn_tail: bool = False, max_line_bytes: Optional[int] = INPUT_LINE_MAX_BYTES
) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, JSON object) of every non-blank line; a bad line raises InputFileError
    naming file:line. With tolerate_torn_tail, an unterminated last line that is not valid
    JSON (a write cut by kill -9) is skipped."""
    path = Path(path)
    lines = read_lines(path, what="JSONL file", max_line_bytes=max_line_bytes)
    for index, (number, line, terminated) in enumerate(lines):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            if tolerate_torn_tail and index == len(lines) - 1 and not terminated:
                return
            raise InputFileError(f"{path}:{number}: not valid JSON ({exc.msg})") from None
        if not isinstance(row, dict):
            raise InputFileError(f"{path}:{number}: expected a JSON object, got {type(row).__name__}")
        yield number, row


def read_jsonl(path: Path | str, *, tolerate_torn_tail: bool = False, max_line_bytes: Optional[int] = None) -> Iterator[dict[str, Any]]:
    """Yield JSON objects; a bad line raises InputFileError naming file:line.

    With tolerate_torn_tail, an unterminated last line (a write cut by kill -9) is skipped.
    Input files pass max_line_bytes=INPUT_LINE_MAX_BYTES (read_jsonl_numbered's default).
    """
    for _, row in read_jsonl_numbered(path, tolerate_torn_tail=tolerate_torn_tail, max_line_bytes=max_line_bytes):
        yield row


def check_writable(directory: Path | str, what: str) -> None:
    """Make sure files can be created in `directory` (creating it), before hours of work that
    end by writing there: one OutputError naming it otherwise."""
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise OutputError(f"{directory}: is a file, expected a directory for {what}")
    with writing(directory, f"checking {what}", name_path=True):
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".emojikit-write-check.")
        os.close(fd)
        os.unlink(tmp)
