"""Communication variables checked by name and value (`space.env_warnings`): a black-box review
set `NCCL_ALOG: Ring` and `NCCL_ALGO: Rnig` and `autotune check` said nothing (NCCL ignores an
unknown name, and a bad value fails only inside a multi-GPU run). Warnings, since a newer NCCL
may know what this list does not."""

from __future__ import annotations

from autotune import space as sp


def warnings_of(env: str) -> list[str]:
    return sp.env_warnings(sp.loads(f"name: e\nworkload: mlp\nenv: {{{env}}}\n"))


def test_a_name_close_to_a_known_variable_gets_a_did_you_mean() -> None:
    (line,) = warnings_of("NCCL_ALOG: Ring")
    assert line.startswith("env.NCCL_ALOG: not a known NCCL/RCCL variable")
    assert "did you mean NCCL_ALGO?" in line


def test_an_enumerated_value_outside_its_values_is_named_with_them() -> None:
    (line,) = warnings_of("NCCL_ALGO: Rnig")
    assert line.startswith("env.NCCL_ALGO: 'Rnig' is not one of its values Ring, Tree")
    assert "did you mean Ring?" in line
    (line,) = warnings_of("NCCL_PROTO: {choices: [LL, Simpel]}")
    assert "'Simpel'" in line and "did you mean Simple?" in line


def test_valid_names_and_values_and_unknown_far_names_pass() -> None:
    # NCCL's comma lists, case-insensitive, '^' excluding; a name far from any known one (a
    # newer NCCL's) and other prefixes are left alone.
    env = "NCCL_ALGO: 'ring,tree', NCCL_PROTO: ^LL128, NCCL_DEBUG: info, NCCL_NEWTHING: 1"
    assert warnings_of(env + ", NCCL_MIN_NCHANNELS: 4, HSA_ENABLE_SDMA: 0") == []
