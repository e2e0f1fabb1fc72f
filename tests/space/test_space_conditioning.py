"""Conditioning: the knobs a space keeps only where they act (precision, collectives, architecture,
schedule)."""

from __future__ import annotations

import pytest

from autotune import space as sp

# --------------------------------------------------------------------------------------------
# Conditioning
# --------------------------------------------------------------------------------------------

COND = """\
name: cond
workload: mlp
probe: {{precision: {precision}}}
knobs:
  clip_norm: {{low: 0.1, high: 10.0, log: true}}
  init_scale: {{low: 1024, high: 65536, log: true}}
  growth_factor: {{low: 1.5, high: 4.0}}
  backoff_factor: {{low: 0.25, high: 0.75}}
  growth_interval: {{choices: [100, 2000]}}
  schedule: {schedule}
  min_lr_ratio: {{low: 0.0, high: 0.2}}
  bucket_cap_mb: {{low: 5, high: 100}}
env:
  NCCL_ALGO: {{choices: [Ring, Tree]}}
  NCCL_MIN_NCHANNELS: {{low: 1, high: 16}}
  TORCH_NCCL_HIGH_PRIORITY: {{choices: [0, 1]}}
  RCCL_MSCCL_ENABLE: {{choices: [0, 1]}}
  NCCL_PROTO: {{choices: [{protos}], default: {proto_default}}}
  ROCBLAS_INTERNAL_FP16_ALT_IMPL: {{choices: [0, 1]}}
  MIOPEN_DEBUG_CONVOLUTION_ATTRIB_FP16_ALT_IMPL: {{choices: [0, 1]}}
  HSA_ENABLE_SDMA: {{choices: [0, 1]}}
"""

SCALER = set(sp.SCALER_KNOBS)
COMM = {"NCCL_ALGO", "NCCL_MIN_NCHANNELS", "TORCH_NCCL_HIGH_PRIORITY", "RCCL_MSCCL_ENABLE"}
ALT_IMPL = set(sp.ENV_FP16_ALT_IMPL)


def cond_space(
    precision: str = "fp16",
    schedule: str = "cosine",
    protos: str = "LL, LL128, Simple",
    proto_default: str = "LL128",
) -> sp.Space:
    return sp.loads(
        COND.format(
            precision=precision, schedule=schedule, protos=protos, proto_default=proto_default
        )
    )


def test_condition_keeps_everything_where_it_acts() -> None:
    s = cond_space()
    c = sp.condition(s, platform="rocm", arch="gfx90a", world_size=8)
    assert c.dropped == {}
    assert c.searched == s.searched()


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_scaler_knobs_dropped_outside_fp16(precision: str) -> None:
    c = sp.condition(cond_space(precision), platform="rocm", arch="gfx90a", world_size=8)
    assert set(c.dropped) >= SCALER
    assert not SCALER & set(c.searched)
    for name in SCALER:
        assert "GradScaler" in c.dropped[name] and precision in c.dropped[name]
    assert "clip_norm" in c.searched


def test_scaler_knobs_kept_under_fp16() -> None:
    c = sp.condition(cond_space("fp16"), platform="cuda", arch="sm_90", world_size=1)
    assert set(c.searched) >= SCALER
    assert c.searched["init_scale"] == sp.Domain(low=1024.0, high=65536.0, log=True)


@pytest.mark.parametrize(
    ("platform", "world_size", "why"),
    [("cpu", 4, "gloo on CPU"), ("rocm", 1, "one process"), ("cuda", 1, "one process")],
)
def test_comm_env_knobs_dropped_without_gpu_collectives(
    platform: str, world_size: int, why: str
) -> None:
    c = sp.condition(cond_space(), platform=platform, arch="gfx90a", world_size=world_size)
    for name in [*COMM, "NCCL_PROTO"]:
        assert name not in c.searched
        assert why in c.dropped[name], name
    assert "HSA_ENABLE_SDMA" in c.searched  # not a collective setting


def test_ddp_knobs_dropped_on_one_process() -> None:
    c = sp.condition(cond_space(), platform="cuda", world_size=1)
    assert "bucket_cap_mb" in c.dropped
    assert "bucket_cap_mb" in sp.condition(cond_space(), platform="cuda", world_size=2).searched


@pytest.mark.parametrize("arch", ["gfx90a", "gfx942", "gfx950"])
def test_ll128_kept_on_archs_that_enable_it(arch: str) -> None:
    c = sp.condition(cond_space(), platform="rocm", arch=arch, world_size=8)
    assert c.searched["NCCL_PROTO"] == sp.Domain(choices=("LL", "LL128", "Simple"), default="LL128")
    assert "NCCL_PROTO=LL128" not in c.dropped


@pytest.mark.parametrize(
    ("platform", "arch"), [("rocm", "gfx908"), ("rocm", None), ("cuda", "sm_90")]
)
def test_ll128_removed_elsewhere(platform: str, arch: str | None) -> None:
    c = sp.condition(cond_space(), platform=platform, arch=arch, world_size=8)
    # The default LL128 is gone with the choice; the other protocols stay searched.
    assert c.searched["NCCL_PROTO"] == sp.Domain(choices=("LL", "Simple"))
    assert "gfx90a" in c.dropped["NCCL_PROTO=LL128"]
    assert "NCCL_PROTO" not in c.dropped


@pytest.mark.parametrize("spelling", ["ll128", "Simple,LL128", "LL, LL128"])
def test_ll128_removed_however_spelled(spelling: str) -> None:
    s = cond_space(protos=f"Simple, '{spelling}'", proto_default="Simple")
    c = sp.condition(s, platform="rocm", arch="gfx908", world_size=8)
    assert c.searched["NCCL_PROTO"] == sp.Domain(choices=("Simple",), default="Simple")


def test_ll128_exclusion_is_kept() -> None:
    s = cond_space(protos="Simple, '^LL128'", proto_default="Simple")
    c = sp.condition(s, platform="rocm", arch="gfx908", world_size=8)
    assert c.searched["NCCL_PROTO"].choices == ("Simple", "^LL128")


def test_proto_with_only_ll128_is_dropped() -> None:
    s = cond_space(protos="LL128", proto_default="LL128")
    c = sp.condition(s, platform="rocm", arch="gfx908", world_size=8)
    assert "NCCL_PROTO" not in c.searched
    assert "no protocol left" in c.dropped["NCCL_PROTO"]


def test_fp16_alt_impl_only_on_rocm_gfx90a_fp16() -> None:
    kept = sp.condition(cond_space("fp16"), platform="rocm", arch="gfx90a", world_size=8)
    assert set(kept.searched) >= ALT_IMPL
    for precision, platform, arch in [
        ("bf16", "rocm", "gfx90a"),
        ("fp16", "rocm", "gfx942"),
        ("fp16", "cuda", "gfx90a"),
        ("fp16", "rocm", None),
    ]:
        c = sp.condition(cond_space(precision), platform=platform, arch=arch, world_size=8)
        assert not ALT_IMPL & set(c.searched), (precision, platform, arch)
        for name in ALT_IMPL:
            assert "gfx90a" in c.dropped[name]


def test_min_lr_ratio_dropped_with_a_constant_schedule() -> None:
    c = sp.condition(cond_space(schedule="constant"), platform="cpu", world_size=1)
    assert "constant" in c.dropped["min_lr_ratio"]
    assert "min_lr_ratio" not in c.searched
    # No schedule in the file: PyTorch's (constant) applies.
    s = sp.loads("name: x\nworkload: mlp\nknobs:\n  min_lr_ratio: {low: 0.0, high: 0.2}\n")
    assert "min_lr_ratio" in sp.condition(s, platform="cpu").dropped


@pytest.mark.parametrize("schedule", ["cosine", "linear", "{choices: [constant, cosine]}"])
def test_min_lr_ratio_kept_with_a_decaying_or_searched_schedule(schedule: str) -> None:
    s = cond_space(schedule=schedule)
    c = sp.condition(s, platform="cpu", world_size=1)
    assert c.searched["min_lr_ratio"] == sp.Domain(low=0.0, high=0.2)


@pytest.mark.parametrize(
    ("clip", "dropped"),
    [
        ("clip_norm: 0", True),
        ("", True),
        ("clip_norm: 1.0", False),
        ("clip_norm: {low: 0.1, high: 2}", False),
    ],
)
def test_clip_mode_is_dropped_where_nothing_clips(clip: str, dropped: bool) -> None:
    """clip_mode (global or per layer) was searched with clip_norm fixed at 0: trials spent on
    a knob that cannot act (a black-box review)."""
    knobs = "\n".join(
        x for x in ("  clip_mode: {choices: [global, per_layer]}", f"  {clip}") if x.strip()
    )
    s = sp.loads(f"name: x\nworkload: mlp\nknobs:\n{knobs}\n")
    c = sp.condition(s, platform="cpu", world_size=1)
    assert ("clip_mode" in c.dropped) is dropped, c.dropped
    assert ("clip_mode" in c.searched) is not dropped


# --------------------------------------------------------------------------------------------
# The midpoint's environment, as a study here sets it
# --------------------------------------------------------------------------------------------


def test_the_midpoint_leaves_a_dropped_variable_unset() -> None:
    """`autotune probe --config midpoint` and `repro` set every searched variable at its
    domain's default (`fixed_env`), though a study on this machine drops the NCCL/RCCL ones
    (one process, or gloo on the CPU) and leaves them unset in every trial."""
    s = cond_space()
    c = sp.condition(s, platform="cpu", world_size=1)
    env = sp.midpoint_env(s, c)
    assert not [k for k in env if k.startswith(("NCCL_", "RCCL_", "TORCH_NCCL_"))], env
    assert not set(sp.ENV_FP16_ALT_IMPL) & set(env)  # off gfx90a: dropped too
    assert env == {"HSA_ENABLE_SDMA": "0"}  # not a collective setting: at its default
    dropped = sp.env_dropped(s, c)
    assert set(dropped) == {*COMM, "NCCL_PROTO", *ALT_IMPL}
    assert sp.env_dropped_text("NCCL_ALGO", dropped["NCCL_ALGO"]) == (
        "dropped knob NCCL_ALGO: NCCL/RCCL variables act only on GPU collectives (one process "
        "here); left unset, as a study here leaves it"
    )
    # Where the study searches them all, the midpoint is the space's own.
    everything = sp.condition(s, platform="rocm", arch="gfx90a", world_size=8)
    assert sp.midpoint_env(s, everything) == s.fixed_env()
    assert sp.env_dropped(s, everything) == {}


def test_the_midpoint_runs_a_choice_the_study_kept() -> None:
    # Off the archs that enable LL128 the study never forces it: nor does the midpoint.
    s = cond_space()
    c = sp.condition(s, platform="cuda", arch="sm_90", world_size=8)
    assert s.fixed_env()["NCCL_PROTO"] == "LL128"
    assert sp.midpoint_env(s, c)["NCCL_PROTO"] == "LL"
    assert sp.env_dropped_text("NCCL_PROTO=LL128", "why") == "dropped knob NCCL_PROTO=LL128: why"
