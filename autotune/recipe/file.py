"""The recipe file: a study's chosen configuration as a versioned YAML file (`Recipe`).

A recipe file is YAML with a format number (`autotune_recipe: 1`), every knob resolved to a
value, the environment knobs, the precision and batch layout, the workload it was tuned on, the
objectives it achieved (verified over seeds when it was verified), the hardware fingerprint and
where it came from (study, trial, MLflow runs). `autotune export` writes it; `Recipe.load` reads it
back, refusing a malformed file, a newer format or a knob this version does not know.

In a user's own loop::

    recipe = Recipe.load("recipe.yaml")
    recipe.apply_env()                      # before torch initialises a GPU or a process group
    opt = recipe.optimizer(model.parameters())
    scaler = recipe.scaler("cuda")          # a no-op unless the recipe is fp16
    sched = recipe.scheduler(opt, total_steps)
    for step, batches in enumerate(loader):         # recipe.accum_steps micro-batches a step
        for batch in batches:
            with recipe.autocast("cuda"):
                loss = model(batch) / recipe.accum_steps
            scaler.scale(loss).backward()
        recipe.clip_and_step(opt, scaler)   # unscale, clip, step, update, zero_grad
        sched.step()

The training methods come from `RecipeRuntime` (recipe/runtime.py).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from autotune import __version__, outfile
from autotune.audit_form import audit_problem
from autotune.errors import RecipeError, did_you_mean
from autotune.knobs import clip_text
from autotune.probe.config import REFERENCE_CHUNKS, ProbeConfig, steps_at_batch
from autotune.recipe import digest
from autotune.recipe.provenance import check_fingerprint
from autotune.recipe.recorded import (
    achieved_problem,
    curve_problem,
    verified_problem,
)
from autotune.recipe.runtime import RecipeRuntime
from autotune.recipe.script_hash import workload_section
from autotune.recipe.values import check_env as _check_env
from autotune.recipe.values import check_knobs as _check_knobs
from autotune.recipe.values import check_probe, probe_record, warn_of_env
from autotune.recipe.values import check_source as _check_source
from autotune.recipe.values import error_at as _error_at
from autotune.space import yaml_reader, yaml_surprises

RECIPE_VERSION = 1
#: The longest recipe name read: a study's name (at most 100 characters, `space.load`) and
#: what export and migrate add to it (`-trialN`, `-migrated-trialN`), with room to spare.
NAME_MAX = 200
#: A recipe's name: the study name's rule (`space.load`) at NAME_MAX characters. It is printed
#: and becomes run names and file comments, so no path separators, escapes or line breaks.
NAME = re.compile(rf"[A-Za-z0-9][A-Za-z0-9_.-]{{0,{NAME_MAX - 1}}}")
FORMAT_KEY = "autotune_recipe"
_REQUIRED = ("name", "workload", "precision", "micro_batch", "knobs")
_KEYS = (
    FORMAT_KEY,
    "name",
    "created_at",
    "autotune_version",
    "workload",
    "precision",
    "micro_batch",
    "accum_steps",
    "world_size",
    "effective_batch",
    "probe",
    "knobs",
    "env",
    "achieved",
    "fingerprint_hash",
    "fingerprint",
    "recorded",
    "source",
)


@dataclass(frozen=True)
class Recipe(RecipeRuntime):
    """One tuned configuration. Build with `Recipe.load`, `Recipe.loads` or `study.export`."""

    name: str
    workload: dict[str, Any]  # {name, size}, or {script, args, script_sha256}
    precision: str  # fp32 | fp16 | bf16
    micro_batch: int
    knobs: dict[str, Any]  # every knob of autotune.space.KNOBS, resolved to a value
    env: dict[str, str] = field(default_factory=dict)
    world_size: int = 1
    probe: dict[str, Any] = field(default_factory=dict)  # steps, seed, device: how it was measured
    # metric -> {direction, value (the trial's own), verified: {mean, low, high, n, ...} | None}
    achieved: dict[str, Any] = field(default_factory=dict)
    fingerprint: dict[str, Any] | None = None
    source: dict[str, Any] = field(default_factory=dict)  # study, trial, pick, mlflow run ids
    # What a migration compares against (autotune/migrate): the op audit and the loss curve
    # recorded where the recipe was tuned; empty when export recorded neither.
    recorded: dict[str, Any] = field(default_factory=dict)
    autotune_version: str = __version__
    created_at: str = ""

    def __post_init__(self) -> None:
        # knobs.batch is resolved like every knob: the samples per optimizer step it ran with.
        if self.knobs.get("batch") is None:
            batch = self.micro_batch * int(self.knobs.get("accum_steps") or 1)
            object.__setattr__(self, "knobs", {**self.knobs, "batch": batch})

    # ----- derived -----
    @property
    def effective_batch(self) -> int:
        return self.micro_batch * self.accum_steps * self.world_size

    @property
    def schedule_steps(self) -> int | None:
        """The LR schedule's length in optimizer steps at this recipe's batch: the run the study
        measured (every probe scheduled over its target, probe.schedule_steps); a recipe
        without that record, its probe.steps; None when neither is known."""
        p = self.probe
        length = p.get("schedule_steps") or p.get("steps")
        if length is None:
            return None
        batch = int(self.knobs["batch"])
        return steps_at_batch(int(length), int(p.get("batch") or batch), batch)

    @property
    def reference_layout(self) -> tuple[int, int]:
        """The initial-loss reference its study measured every trial against: held-out samples
        per chunk and in all (probe.reference_batch, probe.reference_samples). A recipe without
        that record: chunks of its micro-batch, REFERENCE_CHUNKS x its study's batch."""
        p = self.probe
        chunk = int(p.get("reference_batch") or self.micro_batch)
        batch = int(p.get("batch") or self.knobs["batch"])
        return chunk, int(p.get("reference_samples") or REFERENCE_CHUNKS * batch)

    def probe_config(
        self, *, knobs: Mapping[str, Any] | None = None, steps: int | None = None
    ) -> ProbeConfig:
        """The probe this recipe was measured with (its knobs unless others are given), `steps`
        long (default: its probe.steps). A recipe whose study searched the batch counts steps
        at its probe.batch: a probe at another batch runs the steps that see the same samples.

        Its LR schedule runs over the recipe's probe.schedule_steps (the study's target), or
        over `steps` where that is longer; a recipe without that record schedules over the
        probe's own length, as before. `autotune verify` runs it; a script run on its own under
        the recipe (`autotune.trial()`) starts from it."""
        p = self.probe
        script = self.workload.get("script")
        knobs = dict(self.knobs if knobs is None else knobs)
        batch = int(knobs.get("batch") or self.knobs["batch"])
        reference = int(p.get("batch") or self.knobs["batch"])
        length = int(p.get("steps", 200)) if steps is None else steps
        schedule = max(length, int(p.get("schedule_steps") or length))
        chunk, samples = self.reference_layout  # the study's: the recipe and the baseline alike
        return ProbeConfig(
            workload=f"script:{Path(script).name}" if script else self.workload["name"],
            size=self.workload.get("size", "tiny"),
            steps=steps_at_batch(length, reference, batch),
            schedule_steps=steps_at_batch(schedule, reference, batch),
            micro_batch=max(1, batch // max(1, int(knobs.get("accum_steps") or 1))),
            precision=self.precision,
            seed=int(p.get("seed", 0)),
            device=str(p.get("device", "auto")),
            deterministic=bool(p.get("deterministic", False)),
            telemetry_every=int(p.get("telemetry_every", 10)),
            threads=p.get("threads"),
            divergence=dict(p.get("divergence") or {}),
            knobs=knobs,
            env=dict(self.env),
            world_size=self.world_size,
            # Its scaling_efficiency, promised where the study measured it, is measured again
            # (one more process per probe, max(20, steps / 4) steps), else verify and migrate
            # could only say "not measured".
            measure_scaling=bool(p.get("measure_scaling", False)),
            script=script,
            args=[str(a) for a in self.workload.get("args") or ()],
            preload=[str(m) for m in self.workload.get("preload") or ()],
            reference_batch=chunk,
            reference_samples=samples,
        )

    def edited_sections(self) -> list[str] | None:
        """The sections changed since export (`recipe.digest`; None: not recorded)."""
        return digest.edited(self.to_dict())

    def with_digests(self) -> Recipe:
        """This recipe with `source.digests` of its sections as a file reads them back (as it
        is when it does not read back: no digests, so nothing is claimed of its edits)."""
        try:
            # Read back as `loads` reads it, but not warned of: the caller's recipe, not a file.
            read_back = Recipe.from_dict(yaml_reader.load(self.dump(), "<recipe>", RecipeError))
        except RecipeError:
            return self
        source = {**self.source, digest.KEY: digest.digests(read_back.to_dict())}
        return dataclasses.replace(self, source=source)

    @property
    def fingerprint_hash(self) -> str | None:
        return (self.fingerprint or {}).get("hash")

    # ----- the file -----
    def to_dict(self) -> dict[str, Any]:
        return {
            FORMAT_KEY: RECIPE_VERSION,
            "name": self.name,
            "created_at": self.created_at,
            "autotune_version": self.autotune_version,
            "workload": dict(self.workload),
            "precision": self.precision,
            "micro_batch": self.micro_batch,
            "accum_steps": self.accum_steps,
            "world_size": self.world_size,
            "effective_batch": self.effective_batch,
            "probe": dict(self.probe),
            "knobs": dict(self.knobs),
            "env": dict(self.env),
            "achieved": dict(self.achieved),
            "fingerprint_hash": self.fingerprint_hash,
            "fingerprint": self.fingerprint,
            "source": dict(self.source),
            **({"recorded": dict(self.recorded)} if self.recorded else {}),
        }

    def dump(self) -> str:
        """The recipe as documented YAML (comments say what each section is; `loads` reads it)."""
        d = self.to_dict()
        parts = [_HEADER.format(version=RECIPE_VERSION, name=self.name).rstrip() + "\n"]
        for key in (k for k in _KEYS if k in d):
            comment = _COMMENTS.get(key)
            if comment:
                parts.append("\n" + "".join(f"# {line}\n" for line in comment.splitlines()))
            parts.append(yaml.dump({key: d[key]}, Dumper=_Dumper, sort_keys=False, width=100))
        return "".join(parts)

    def save(self, path: str | Path) -> Path:
        """Write atomically: a failure leaves no half-written recipe (a symlink's target is
        replaced, the link kept; a device or FIFO at `path` is refused: `autotune.outfile`)."""
        outfile.write(path, self.dump(), "recipe file")
        return Path(path)

    @classmethod
    def load(cls, path: str | Path) -> Recipe:
        """The recipe file at `path` (a RecipeError naming the file and key of a problem); an
        `env:` variable the library would ignore is warned of (`values.warn_of_env`)."""
        p = Path(path)
        what = outfile.special(p)  # before it is opened: a FIFO would block the read forever
        if what is not None:
            raise RecipeError(f"{p}: not a regular file ({what}): not a recipe file")
        text = yaml_reader.read_text(p, RecipeError, "recipe file")
        recipe = cls.from_dict(_read(text, str(p)), source=str(p))
        warn_of_env(recipe.env, str(p), stacklevel=2)
        return recipe

    @classmethod
    def loads(cls, text: str, *, source: str = "<recipe>") -> Recipe:
        """The recipe in `text` (`source` names it in errors and warnings), as `load` reads it."""
        recipe = cls.from_dict(_read(text, source), source=source)
        warn_of_env(recipe.env, source, stacklevel=2)
        return recipe

    @classmethod
    def from_dict(cls, data: Any, *, source: str = "<recipe>") -> Recipe:
        def bad(key: str, msg: str) -> RecipeError:
            return _error_at(source)([key], msg)

        if not isinstance(data, dict) or FORMAT_KEY not in data:
            raise RecipeError(
                f"{source}: not an autotune recipe (no `{FORMAT_KEY}:` format number at the top); "
                "write one with `autotune export STUDY -o recipe.yaml`"
            )
        version = data[FORMAT_KEY]
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise bad(FORMAT_KEY, f"must be a format number (1, 2, ...), got {version!r}")
        if version > RECIPE_VERSION:
            raise bad(
                FORMAT_KEY,
                # The file's own `autotune_version` is not trusted to say which wrote it.
                f"format {version} was written by a newer autotune than this one "
                f"({__version__}), which reads up to format {RECIPE_VERSION}: upgrade autotune",
            )
        for key in data:
            if key not in _KEYS:
                raise bad(str(key), f"unknown key{did_you_mean(str(key), _KEYS)}")
        for key in _REQUIRED:
            if key not in data:
                raise bad(key, "required")
        if not isinstance(data["name"], str) or not NAME.fullmatch(data["name"]):
            raise bad(
                "name",
                f"must be the recipe's name, a string of at most {NAME_MAX} letters, digits, "
                "'_', '-', '.', starting with a letter or digit, as a study's name is (export "
                f"names it STUDY-trialN), got {yaml_reader.one_line(repr(data['name']), 80)}",
            )
        workload = workload_section(data["workload"], _error_at(source))  # + script_sha256
        layout = check_probe(data, source)
        knobs = _check_knobs(data["knobs"], source)
        env = _check_env(data.get("env") or {}, source)
        if "accum_steps" in data and data["accum_steps"] != knobs["accum_steps"]:
            raise bad(
                "accum_steps",
                f"{data['accum_steps']!r} disagrees with knobs.accum_steps "
                f"({knobs['accum_steps']!r})",
            )
        layout_batch = layout.micro_batch * int(knobs["accum_steps"])
        if knobs["batch"] is not None and knobs["batch"] != layout_batch:
            raise bad(
                "knobs",
                f"batch {knobs['batch']} disagrees with micro_batch x accum_steps "
                f"({layout.micro_batch} x {knobs['accum_steps']} = {layout_batch})",
            )
        effective = layout_batch * layout.world_size
        if "effective_batch" in data and (
            isinstance(data["effective_batch"], bool) or data["effective_batch"] != effective
        ):
            raise bad(
                "effective_batch",
                f"{data['effective_batch']!r} disagrees with micro_batch x accum_steps x "
                f"world_size ({layout.micro_batch} x {knobs['accum_steps']} x "
                f"{layout.world_size} = {effective})",
            )
        for key in ("achieved", "source", "recorded"):
            if not isinstance(data.get(key) or {}, dict):
                raise bad(key, "must be a mapping")
        at = _error_at(source)
        found = achieved_problem(data.get("achieved") or {})
        if found is not None:
            raise at(["achieved", *found[0]], found[1])
        recorded = data.get("recorded") or {}
        for key, problem in (("verified", verified_problem), ("curve", curve_problem)):
            wrong = problem(recorded.get(key))
            if wrong is not None:
                raise bad(f"recorded.{key}", wrong)
        found = audit_problem(recorded.get("audit"))
        if found is not None:
            raise at(["recorded", "audit", *found[0]], found[1])
        # How it was measured: a file without a probe, or a probe without steps (`probe: {}`
        # too), is cut short or hand-edited: nobody measured it at a length of our choosing.
        # Checked last, so that any other problem of the file is the one named.
        if "probe" not in data:
            raise bad("probe", "required (how the recipe was measured: steps, seed, device)")
        if "steps" not in (data["probe"] or {}):
            raise bad("probe.steps", "required (the probe's length, in optimizer steps)")
        fp = check_fingerprint(data.get("fingerprint"), at)  # its sections too
        return cls(
            name=str(data["name"]),
            workload=workload,
            precision=layout.precision,
            micro_batch=layout.micro_batch,
            knobs=knobs,
            env=env,
            world_size=layout.world_size,
            probe=probe_record(layout, data, source),
            achieved=dict(data.get("achieved") or {}),
            fingerprint=fp,
            source=_check_source(data.get("source"), source),  # + its Pareto neighbours
            recorded=dict(data.get("recorded") or {}),
            autotune_version=str(data.get("autotune_version", "?")),
            created_at=str(data.get("created_at", "")),
        )

    def describe(self) -> str:
        """A few lines: what the recipe sets and where it came from."""
        k = self.knobs
        src = self.source
        lines = [
            f"recipe {self.name}: workload {_workload_text(self.workload)},"
            f" {self.precision}, effective batch {self.effective_batch} "
            f"({self.micro_batch} x {self.accum_steps}"
            + (f" x {self.world_size} ranks" if self.world_size > 1 else "")
            + ")",
            f"  lr {k['lr']:g}, {self._schedule_text()}, clip "
            + clip_text(k)
            + f", AdamW eps {k['adam_eps']:g}, betas ({k['beta1']:g}, {k['beta2']:g}), "
            f"weight decay {k['weight_decay']:g}",
        ]
        if self.precision == "fp16":
            lines.append(
                f"  GradScaler init {k['init_scale']:g}, growth {k['growth_factor']:g} every "
                f"{k['growth_interval']}, backoff {k['backoff_factor']:g}"
            )
        if self.env:
            lines.append("  env " + " ".join(f"{n}={v}" for n, v in self.env.items()))
        if src:
            lines.append(
                f"  from study {src.get('study')} trial {src.get('trial')}"
                + (f" (pick {src['pick']})" if src.get("pick") else "")
                + (f", tuned on {self.fingerprint_hash}" if self.fingerprint_hash else "")
            )
        return "\n".join(lines)

    def _schedule_text(self) -> str:
        """The warm-up and schedule, or that the script ran its own: a script whose record says
        it called neither recipe.scheduler (lr_at, Lightning's configure_optimizers) nor the hf
        integration never applied them (the exports say so and leave them out)."""
        applied = (self.source or {}).get("script_applied")
        ran = {str(a) for a in applied or ()}
        if self.workload.get("script") and applied is not None and not ran & {"scheduler", "hf"}:
            return "the script's own schedule (the recipe's warm-up and schedule never applied)"
        return f"warmup {self.knobs['warmup_steps']}, {self.knobs['schedule']}"


def _read(text: str, source: str) -> Any:
    """The data of a recipe's YAML `text`; a number YAML reads as another (`seed: 010` as 8,
    `1:30` as 90) refused naming its key, as a space file's is."""
    data, root = yaml_reader.compose(text, source, RecipeError)
    yaml_surprises.refuse_misread(root, _error_at(source))
    return data


def _workload_text(w: dict[str, Any]) -> str:
    if w.get("script"):
        return f"script {w['script']}"
    return f"{w['name']} ({w.get('size')})"


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


class _Dumper(yaml.SafeDumper):
    """Writes an object met twice (two devices with the same record, say) out both times: a
    recipe is read by people, and `&id001` / `*id001` anchors mean nothing to them."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


_HEADER = """\
# autotune recipe {name!r} (format {version}).
# Written by `autotune.study.export`; read by `autotune verify`, `autotune study --warm-start` and
# `autotune.Recipe.load` in your own training code. Edit values with care: `autotune verify`
# re-measures whatever the file says.
"""


_COMMENTS: dict[str, str] = {
    "workload": "The workload it was tuned on (built-in name, file.py:attr or pkg.mod:attr), or\n"
    "the training script, its args and script_sha256 (the file as its trial ran it).",
    "precision": "fp32, fp16 (autocast + GradScaler) or bf16 (autocast, no scaler).",
    "micro_batch": "Samples per forward/backward; effective batch = micro_batch x accum_steps x "
    "world_size.",
    "probe": "How the probe measured it: steps, seed, device. schedule_steps: the LR schedule's\n"
    "length, the run the study measured (budget.target_steps): schedule your training over it.\n"
    "With a batch knob, `batch` is the study's reference: steps count at it (knobs.batch ran\n"
    "steps x batch / knobs.batch steps). reference_samples / reference_batch: the held-out\n"
    "samples (and samples per chunk) of the initial loss every trial was judged against.",
    "knobs": "Every knob, resolved (PyTorch's default where the study did not set it):\n"
    "AdamW lr/beta1/beta2/adam_eps/weight_decay; clip_norm (0 = off) and clip_mode;\n"
    "warmup_steps, schedule and min_lr_ratio; the GradScaler's init_scale, growth_factor,\n"
    "backoff_factor and growth_interval (fp16 only); accum_steps and batch (samples per\n"
    "optimizer step per process = micro_batch x accum_steps); the DDP arguments.",
    "env": "Environment knobs: set them before torch initialises the GPU or the process group\n"
    "(`autotune export --format env`, or Recipe.apply_env()).",
    "achieved": "What the recipe achieved, per objective: the trial's own value and, when it was\n"
    "verified, the mean and 95% interval over seeds and the share of seeds that diverged.",
    "fingerprint_hash": "The hardware and software it was tuned on (`autotune fingerprint`).",
    "recorded": "Recorded where it was tuned, for `autotune migrate`: the op audit (per op and\n"
    "pass, the error against float64), the trial's loss curve at its seed and its verified\n"
    "seeds (`verified`: per seed the outcome and the metrics at the decided length).",
    "source": "Where it came from: study, storage, trial, pick, MLflow runs; oom_retry (when the\n"
    "trial ran out of memory and was retried): the layout it was asked for and the one it ran\n"
    "with, which the recipe has; neighbours: the study's other candidates on the Pareto front,\n"
    "nearest the pick first, then the stablest without the hardware objectives (`front` says\n"
    "which; `autotune migrate` re-runs them when the recipe does not hold).",
}
