"""A script's text: one decoded form, or an InputError that names the fix."""

import pytest

from broker.errors import InputError
from orchestrator.source import decode_source

SCRIPT = "async def orchestrate(ctx, args):\n    return 1\n"


@pytest.mark.parametrize("script, message", [
    ("# caf\ud800\n" + SCRIPT, "not valid UTF-8 text: it has a lone surrogate '\\ud800' at "
                               "character 5"),
    (b"# caf\xe9\n" + SCRIPT.encode(), "script is not valid UTF-8 (byte 5)"),
    (SCRIPT + "\x00", "NUL byte"),
    ("# -*- coding: latin-1 -*-\n" + SCRIPT, "declares coding 'latin-1'"),
    (SCRIPT.replace("\n", "\r", 1), "carriage return"),
], ids=["lone surrogate", "not utf-8", "nul", "coding", "bare cr"])
def test_text_that_is_no_script_is_refused_with_the_fix(script, message) -> None:
    with pytest.raises(InputError) as refused:
        decode_source(script)
    assert message in refused.value.message


def test_the_same_script_as_text_or_bytes_is_one_source() -> None:
    bom = b"\xef\xbb\xbf" + SCRIPT.encode()
    assert decode_source(SCRIPT).text == decode_source(bom).text == SCRIPT
