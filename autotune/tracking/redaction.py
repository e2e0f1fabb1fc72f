"""Passwords in store URLs (an Optuna storage, an MLflow tracking URI): masked in what is
printed or recorded, scrubbed from a driver's error text, refused when unencoded characters in
them make the URL mean something else than the user wrote, and a recorded (masked) URL matched
back to the one the user gave."""

from __future__ import annotations

import re
from urllib.parse import quote, unquote

# A secret given as a query parameter (`?password=...`, libpq's `sslpassword`, a token).
_QUERY_SECRET = re.compile(
    r"([?&](?:password|passwd|pwd|sslpassword|token|access_token|secret|api_key)=)[^&#]*", re.I
)
_SCHEME = re.compile(r"^[^:/?#]+://")
MASK = "***"


def _userinfo(uri: str) -> tuple[int, int, int] | None:
    """Where `uri`'s credentials are: (start of the user, the ':' before the password, the last
    '@' before the query); None without a password. SQLAlchemy ends the password at the first
    '@', but a password that holds '@' (or '/') was meant to run to the last one: masked to
    there, no part of it is shown, whichever way it is read."""
    scheme = _SCHEME.match(uri)
    if scheme is None:
        return None
    start = scheme.end()
    first_at = uri.find("@", start)
    if first_at < 0:
        return None
    colon = uri.find(":", start, first_at)
    if colon < 0 or "/" in uri[start:colon]:
        return None
    ends = [i for i in (uri.find(c, first_at) for c in "?#") if i >= 0]
    last_at = uri.rfind("@", first_at, min(ends) if ends else len(uri))
    return start, colon, last_at


def redact(uri: str) -> str:
    """The URI (an MLflow store, a database URL) with its password, if any, as `***`; for
    messages and records. A password that holds an unencoded '@' is masked up to the last '@'
    of the address (`unencoded` refuses such a URL before it is used). A secret in the query
    (`?password=`, `sslpassword`, a token) is hidden too."""
    where = _userinfo(uri)
    if where is not None:
        _, colon, last_at = where
        uri = uri[: colon + 1] + MASK + uri[last_at:]
    return _QUERY_SECRET.sub(rf"\1{MASK}", uri)


def without_password(uri: str) -> str:
    """`uri` with no password (`user@host`): the same store, whether its password is written in
    the URL, masked, or given to libpq (PGPASSWORD, ~/.pgpass)."""
    where = _userinfo(uri)
    if where is None:
        return uri
    _, colon, last_at = where
    return uri[:colon] + uri[last_at:]


def unencoded(uri: str) -> str | None:
    """Why `uri` cannot be used as written: its password holds an unencoded '@' (SQLAlchemy and
    libpq would take the text after the first '@' for the host, and connect elsewhere with part
    of the password in the host's name, which the driver's errors print), or a '/', '?' or '#'
    (the address would end there for the reachability check). None when the URL has no such
    password."""
    where = _userinfo(uri)
    if where is None:
        return None
    _, colon, last_at = where
    found = [c for c in "@/?#" if c in uri[colon + 1 : last_at]]
    if not found:
        return None
    return (
        f"{redact(uri)}: its password holds an unencoded {' '.join(repr(c) for c in found)}, "
        "which would end the password or the address there; URL-encode the password ('@' as "
        "%40, '/' as %2F, '?' as %3F, '#' as %23), or leave it out of the URL and set "
        "PGPASSWORD or ~/.pgpass"
    )


def passwords(uri: str) -> list[str]:
    """The password of `uri` as written, as SQLAlchemy parses it (up to the first '@'; the
    rest it takes for the host), decoded and encoded, and any secret given in its query
    (`?password=`, `sslpassword`, a token): every form a driver's error text might quote.
    Longest first, so that a longer form is masked before a part of it."""
    forms: set[str] = set()
    for found in _QUERY_SECRET.finditer(uri):
        value = found.group(0)[len(found.group(1)) :]
        forms.update({value, unquote(value)})
    where = _userinfo(uri)
    if where is not None:
        _, colon, last_at = where
        whole = uri[colon + 1 : last_at]
        pieces = whole.split("@")
        forms.update({whole, unquote(whole), quote(unquote(pieces[0]), safe="")})
        forms.update(pieces + [unquote(p) for p in pieces])
    return sorted((f for f in forms if f), key=len, reverse=True)


def scrub(text: str, *uris: str | None) -> str:
    """`text` (a driver's error message) with every password of `uris` (`passwords`) masked:
    libpq quotes the host it tried, and an unencoded '@' puts part of a password there."""
    for uri in uris:
        for secret in passwords(uri or ""):
            text = text.replace(secret, MASK)
    return text


def unredacted(recorded: str | None, *given: str | None) -> str | None:
    """The URI to connect to a store recorded redacted (`redact`, as a study records its
    tracking URI): `recorded` itself when nothing in it is masked, else the first of `given`
    (the URIs the user gave: an option, the study's study.json, $MLFLOW_TRACKING_URI) whose
    redacted form it is; None when none is (the password is not known here)."""
    if not recorded:
        return None
    if MASK not in recorded:
        return recorded
    return next((uri for uri in given if uri and redact(uri) == recorded), None)
