"""The SHA-256 of a script recipe's training script (`workload.script_sha256`).

`autotune export` records it from the picked trial's probe (the file as that trial read it);
`Recipe.load` checks it (64 hex digits; a recipe written before it has none); and wherever a
recipe's probes run its script (`autotune verify`, `autotune repro`, `autotune migrate`),
`script_changed` compares it with the file as it is now: an edited script is still run (the
probes measure it as it is), with one warning line that says so."""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from typing import Any

from autotune import space as sp
from autotune.space import yaml_reader

#: The key of a recipe's `workload` section that holds the script's SHA-256.
KEY = "script_sha256"
_HEX64 = re.compile(r"[0-9a-fA-F]{64}")
#: Hex digits of a hash shown in the warning.
SHORT = 12


def workload_section(raw: Any, at: sp.ErrorAt) -> dict[str, Any]:
    """A recipe's `workload` section as the recipe keeps it: checked by the space's rules, and
    a script's `script_sha256` (absent or null: not recorded) a SHA-256 in hex, kept lowercase.
    `at(path, message)` is the recipe file's one-line error."""
    rest = {k: v for k, v in raw.items() if k != KEY} if isinstance(raw, dict) else raw
    workload: dict[str, Any] = sp.validate_section(
        sp.WorkloadRef, rest, ["workload"], at
    ).model_dump()
    value = raw.get(KEY) if isinstance(raw, dict) else None
    if value is None:
        return workload
    if not workload.get("script"):
        raise at(["workload", KEY], "is the SHA-256 of a `script`; a named workload has none")
    if not isinstance(value, str) or not _HEX64.fullmatch(value):
        got = yaml_reader.one_line(repr(value), 80)
        raise at(["workload", KEY], f"must be the script's SHA-256, 64 hex digits, got {got}")
    return {**workload, KEY: value.lower()}


def script_changed(workload: Mapping[str, Any]) -> str | None:
    """The warning when a recipe's script is not the file its recipe recorded: the script's
    path and both hashes, shortened. None when they match, when the recipe recorded no hash
    (a built-in workload, or a recipe written before the record), or when the file cannot be
    read (a missing script is each command's own error)."""
    from autotune.probe.script import file_sha256

    script, recorded = workload.get("script"), workload.get(KEY)
    if not script or not recorded:
        return None
    now = file_sha256(str(script))
    if now is None or now == str(recorded).lower():
        return None
    was = str(recorded)[:SHORT].lower()
    return yaml_reader.one_line(  # one line, whatever characters the path holds
        f"{script} changed since the recipe was made (sha256 {was} -> {now[:SHORT]}); the "
        "probes measure the script as it is now",
        None,
    )


def warn_if_script_changed(workload: Mapping[str, Any]) -> None:
    """Print `script_changed`'s warning, if any, as one line on stderr."""
    warning = script_changed(workload)
    if warning:
        print(f"autotune: warning: {warning}", file=sys.stderr)
