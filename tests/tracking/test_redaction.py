"""Passwords in store URLs (`autotune.tracking.redaction`): masked whole, however the URL is
read; a password with an unencoded '@' refused before any connection (review: the message masked
it as `optuna:***@127.0.0.1` and then printed libpq's `failed to resolve host 'k5@127.0.0.1'`);
a recorded, masked URL matched back to the one the user gave."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.errors import StudyError, TrackingError
from autotune.study import storage
from autotune.tracking import connect, redaction

AT = "postgresql://optuna:Le@k5@127.0.0.1:55439/optuna"


def _no_fragment(text: str) -> None:
    assert "Le" not in text and "k5" not in text, text


def test_a_password_with_an_at_is_masked_whole_and_refused_with_how_to_encode_it() -> None:
    assert redaction.redact(AT) == "postgresql://optuna:***@127.0.0.1:55439/optuna"
    why = redaction.unencoded(AT)
    assert why is not None and "%40" in why and "PGPASSWORD" in why
    _no_fragment(why)
    assert redaction.unencoded("postgresql://optuna:Le%40k5@127.0.0.1:55439/optuna") is None
    assert redaction.unencoded("postgresql://optuna@127.0.0.1/optuna") is None


def test_a_drivers_error_text_loses_every_part_of_the_password() -> None:
    said = "failed to resolve host 'k5@127.0.0.1' for Le"
    _no_fragment(redaction.scrub(said, AT))
    plain = "postgresql://u:Hunter2SecretPW@h/db"
    assert redaction.scrub("auth failed: Hunter2SecretPW", plain) == "auth failed: ***"
    # libpq takes the password from the query too, and its errors may quote the whole URL.
    query = "postgresql://u@h/db?sslmode=disable&password=Qu%40ery7PW"
    said = f"could not connect with password=Qu@ery7PW ({query})"
    assert "Qu" not in redaction.scrub(said, query) and "ery7PW" not in redaction.scrub(said, query)


def test_the_storage_and_the_tracking_store_refuse_it_before_connecting(tmp_path: Path) -> None:
    for check in (lambda: storage.check_storage(AT, tmp_path), lambda: storage.open_storage(AT)):
        with pytest.raises(StudyError) as caught:
            check()
        assert "%40" in str(caught.value) and "127.0.0.1:55439" in str(caught.value)
        _no_fragment(str(caught.value))
    with pytest.raises(TrackingError) as caught:
        connect(AT.replace("/optuna", "/mlflow"))
    assert "%40" in str(caught.value)
    _no_fragment(str(caught.value))


def test_a_recorded_masked_uri_is_matched_to_the_one_given() -> None:
    given = "postgresql://optuna:Hunter2SecretPW@db:5432/mlflow"
    recorded = redaction.redact(given)
    assert redaction.unredacted(recorded, None, "sqlite:///x.db", given) == given
    assert redaction.unredacted(recorded, "postgresql://optuna:pw@other/mlflow") is None
    assert redaction.unredacted("sqlite:///x.db") == "sqlite:///x.db"  # nothing masked
    assert redaction.unredacted(None, given) is None


def test_the_same_store_with_its_password_in_the_url_masked_or_left_to_libpq() -> None:
    bare = "postgresql://optuna@db:5432/optuna"
    for uri in ("postgresql://optuna:Le%40k5@db:5432/optuna", redaction.redact(AT), bare):
        assert redaction.without_password(uri.replace("127.0.0.1:55439", "db:5432")) == bare
