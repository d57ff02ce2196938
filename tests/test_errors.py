"""User-facing errors are one line, whatever message they wrap."""

from fedretain.errors import ConfigError, DataError


def test_a_wrapped_multi_line_message_is_folded_to_one_line():
    err = DataError("x is corrupt (A load persistent id instruction was encountered,\nbut no)")
    assert str(err) == "x is corrupt (A load persistent id instruction was encountered, but no)"
    assert "\n" not in str(ConfigError("a\n\n  b"))
