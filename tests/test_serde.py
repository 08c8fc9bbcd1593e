"""Pulsar's IdentitySerDe: statekeep's gives pulsar-client's answer for every input, without its failed parses."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from statekeep.functions.messaging.messages import load_serde
from statekeep.pulsar_compat.functions.serde import IdentitySerDe


def pulsar_client_identity(data: bytes) -> Any:
    """pulsar-client's IdentitySerDe.deserialize, as it is written there: each type tried in turn."""
    for kind in (int, float, complex, str):
        try:
            return kind(data.decode("utf-8"))
        except:  # noqa: E722 - as pulsar-client's
            pass
    return data


def same(got: Any, want: Any) -> bool:
    """Equal and of one type (nan is itself: ``float('nan') != float('nan')``)."""
    return type(got) is type(want) and (got == want or repr(got) == repr(want))


TABLE = [
    b"", b"0", b"007", b"-12", b"+3", b"1_000", b"_1", b"1__0", b" 42 ", b"\t7\n", b"\x1c5\x1f", b"\x0b8\x0c",
    b"3.25", b".5", b"5.", b"1e5", b"-1E-3", b"1e400", b"inf", b"-Infinity", b"nan", b"NaN", b"+nan", b"infinity",
    b"infx", b"1j", b"J", b"-2.5+3j", b"(1+2j)", b"( 1-2j )", b"(1)", b"1+j", b"nanj", b"infj", b"1 + 2j",
    "\u0663\u0664".encode(), "\u00a012\u00a0".encode(), "\u2003-1.5".encode(), "\uff11\uff12".encode(),
    b"1" * 5000, b'{"k": "v", "n": 1}', b"[1, 2]", b'"quoted"', b"true", b"null", b"hello", b"Ingo", b"nano",
    b"jam", b"(hello)", b"\xff\xfe\x00", b"\xc3\x28", b"caf\xc3\xa9", b"0x10", b"1,5", b"--1", b"1e", b". 5",
]


def test_identity_serde_gives_pulsar_clients_answer_for_every_kind_of_input():
    serde = IdentitySerDe()
    for data in TABLE:
        got, want = serde.deserialize(data), pulsar_client_identity(data)
        assert same(got, want), (data, got, want)
    # the default serde and its long name are statekeep's, whichever pulsar package is installed
    assert type(load_serde("serde.IdentitySerDe")) is IdentitySerDe
    assert type(load_serde("pulsar.functions.serde.IdentitySerDe")) is IdentitySerDe


@settings(max_examples=3000, deadline=None)
@given(st.one_of(st.binary(max_size=24), st.text(max_size=24).map(str.encode),
                 st.from_regex(r"\s*[-+(]?[0-9.eEjJinfaINFA_ ]{0,8}\)?\s*", fullmatch=True).map(str.encode)))
def test_identity_serde_agrees_with_pulsar_client_on_generated_inputs(data):
    got, want = IdentitySerDe().deserialize(data), pulsar_client_identity(data)
    assert same(got, want), (data, got, want)
