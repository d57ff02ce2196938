"""User-facing errors are one line, whatever message they wrap."""

import errno

import pytest

from fedretain.errors import ConfigError, DataError, os_error_message


def test_a_wrapped_multi_line_message_is_folded_to_one_line():
    err = DataError("x is corrupt (A load persistent id instruction was encountered,\nbut no)")
    assert str(err) == "x is corrupt (A load persistent id instruction was encountered, but no)"
    assert "\n" not in str(ConfigError("a\n\n  b"))


@pytest.mark.parametrize(
    "error, fix",
    [
        (OSError(errno.ENOSPC, "No space left on device"), "free some space"),
        (PermissionError(errno.EACCES, "Permission denied"), "fix its permissions"),
        (PermissionError(errno.EPERM, "Operation not permitted"), "chattr -i"),
        (OSError(errno.EROFS, "Read-only file system"), "writable file system"),
        (NotADirectoryError(errno.ENOTDIR, "Not a directory"), "a file stands where a folder"),
        (FileExistsError(errno.EEXIST, "File exists"), "a file stands where a folder"),
        (IsADirectoryError(errno.EISDIR, "Is a directory"), "a folder stands where a file"),
    ],
)
def test_a_file_system_error_is_one_line_naming_the_path_and_the_fix(error, fix):
    text = os_error_message(error, "/results/run/summary.json")
    assert text.startswith("cannot write /results/run/summary.json: ")
    assert error.strerror in text and fix in text and "\n" not in text


def test_a_file_system_error_names_its_own_file_when_given_none():
    error = PermissionError(errno.EACCES, "Permission denied", "/results/run")
    assert os_error_message(error, action="cannot use").startswith("cannot use /results/run: ")
