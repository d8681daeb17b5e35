"""A fleet plan: which recipe (or image) is certified on which arch, one task per node.

``plan.json`` (schema :data:`SCHEMA`) is the one file every engine's files, ``fleet
status`` and ``fleet collect`` read. Tasks are numbered from 0; task ``i`` writes its
report into ``reports/NNN/`` (:attr:`Task.folder`) of the plan's folder.

Pairing: with ``--arch`` given, each recipe is planned on each listed arch its GPU fits
(a recipe for no GPU fits every arch; a GPU recipe only its own arch); without, each recipe
on its own arch (``cpu`` for a recipe without a GPU). ``nodes`` tasks per pair, each asking
the scheduler for ``gpus`` GPUs (default 1 for a GPU recipe or an explicit arch, else 0).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from envforge.container.refs import registry_ref
from envforge.errors import InvalidInput
from envforge.fleet import values
from envforge.fleet.signing_ref import ref_problem
from envforge.probe.spec import GpuChecks
from envforge.recipe.model import Recipe

#: Bytes a plan.json may have.
PLAN_MAX_BYTES = 64 * 1024 * 1024

SCHEMA = "envforge.fleet-plan/1"
#: An engine as envforge.fleet.engines.ENGINES names it (checked where a plan is made or read).
EngineName = str
#: A backend as envforge.backends.BACKENDS names it; the node's envforge checks the name.
BackendName = str
_BACKEND_NAME = re.compile(r"[a-z][a-z0-9_-]{0,31}")
#: The arch of a task for a recipe without a GPU and no ``--arch``.
CPU = "cpu"
#: ``Plan.workdir`` for the job's $TMPDIR (else /tmp), read on the node.
JOB_TMPDIR = "$TMPDIR"
#: Most tasks one plan may hold (a Slurm array's default MaxArraySize is 1001).
MAX_TASKS = 1000


@dataclass(frozen=True)
class Site:
    """What differs between sites: Slurm partition/account/time and feature names per
    arch, the Kubernetes namespace and node label, the GitHub runner labels."""

    partition: str = ""
    account: str = ""
    time: str = "00:30:00"
    #: (arch, Slurm feature) for archs whose feature is not the arch's name.
    features: tuple[tuple[str, str], ...] = ()
    namespace: str = "default"
    #: A node label whose value is the arch (set by hand), used instead of the vendors'
    #: labels (``kubectl label node N envforge.io/gpu-arch=gfx942``).
    arch_label: str = ""
    #: Image registry prefix for the recipes' images (``HOST:PORT/envforge``).
    registry: str = ""
    runner_labels: tuple[str, ...] = ("self-hosted", "gpu")
    #: Slurm: quality of service, reservation, memory per node, CPUs per task (0: the
    #: site's default), further ``--name=value`` options, shell lines before the exec line.
    qos: str = ""
    reservation: str = ""
    #: Memory per task: Slurm's --mem (64G); a Kubernetes pod's request and limit (empty:
    #: 16Gi there).
    mem: str = ""
    cpus_per_task: int = 0
    sbatch_args: tuple[str, ...] = ()
    preamble: str = ""
    #: Kubernetes pods (:mod:`envforge.fleet.k8s`): tolerations (``KEY[=VALUE]:EFFECT``),
    #: CPU and memory (requests = limits), the Job's deadline in seconds (0: from the step
    #: timeouts), how long a finished Job is kept, images by digest
    #: (``REPO[:TAG]@sha256:...``), the pods' supplementary groups (AMD: render, video).
    tolerations: tuple[str, ...] = ()
    cpu: str = "2"
    deadline: int = 0
    ttl: int = 7 * 86400
    digests: tuple[str, ...] = ()
    groups: tuple[int, ...] = ()

    def feature(self, arch: str) -> str:
        return dict(self.features).get(arch, arch)


#: Site fields added after plan ids were first handed out, with their defaults: a field
#: at its default is left out of plan.json (and of the id).
_LATER_SITE: Mapping[str, object] = {
    "qos": "",
    "reservation": "",
    "mem": "",
    "cpus_per_task": 0,
    "sbatch_args": (),
    "preamble": "",
    "tolerations": (),
    "cpu": "2",
    "deadline": 0,
    "ttl": 7 * 86400,
    "digests": (),
    "groups": (),
}


@dataclass(frozen=True)
class PlanChecks:
    """``fleet plan --health/--no-health``, ``--require-healthy`` and
    ``--collective/--no-collective`` as given (None: not given). Each task's probe gets
    them settled for its recipe and GPU count by :meth:`GpuChecks.chosen`, the rule
    ``build`` follows: health for a GPU recipe, and the collective for its task of two
    or more GPUs."""

    health: bool | None = None
    require_healthy: bool = False
    collective: bool | None = None

    def for_task(self, task: Task) -> GpuChecks:
        return GpuChecks.chosen(
            health=self.health,
            require_healthy=self.require_healthy,
            collective=self.collective,
            vendor=task.vendor,
            gpus=task.gpus,
        )

    def to_dict(self) -> dict[str, bool | None]:
        return asdict(self)


@dataclass(frozen=True)
class Task:
    """One node's work: certify ``recipe`` on a node of ``arch`` with ``gpus`` GPUs."""

    index: int
    recipe: str
    #: The recipe file as given (a name of the catalogue, or an absolute path).
    ref: str
    recipe_hash: str
    stack: str
    #: The recipe's GPU vendor (``none`` for a CPU recipe, even on a GPU node).
    vendor: str
    arch: str
    gpus: int
    #: The image to certify (docker backend, Kubernetes): ``REGISTRY/R:STACK`` as
    #: ``envforge publish --registry`` pushes it, else ``envforge/R:STACK``.
    image: str = ""
    #: The node it is pinned to (``--every-node``, ``--nodelist``; "" for any node).
    node: str = ""

    def to_dict(self) -> dict[str, Any]:
        """Its JSON form; ``node`` only when pinned (a plan's id is unchanged by it)."""
        data = asdict(self)
        if not self.node:
            del data["node"]
        return data

    @property
    def folder(self) -> str:
        """Its report folder, relative to the plan's folder."""
        return f"reports/{self.index:03d}"


@dataclass(frozen=True)
class Plan:
    engine: EngineName
    backend: BackendName
    tasks: tuple[Task, ...]
    site: Site = field(default_factory=Site)
    wheelhouse: str = ""
    level: str = ""
    #: How a node runs envforge (``python -m envforge`` of the planning interpreter: the
    #: same path on a shared file system).
    envforge: tuple[str, ...] = ("envforge",)
    #: Whether each task gets an ENVFORGE_HOME of its own under the plan's folder (safe
    #: for concurrent tasks); False: the nodes' own.
    task_homes: bool = True
    #: A random value of this plan, passed to each task (``ENVFORGE_FLEET_TASK``) and
    #: recorded by its probe run in its report: ``fleet collect`` counts only reports
    #: that carry it ("" in plans from before it: none of their reports counts).
    nonce: str = ""
    #: Passed on to each node's ``build``: a PEM bundle (absolute path) and ``--set``s.
    ca_bundle: str = ""
    overrides: tuple[str, ...] = ()
    #: Node-local work (:mod:`envforge.fleet.task`): each task's ENVFORGE_HOME under this
    #: node folder (an absolute path, or :data:`JOB_TMPDIR`: the job's $TMPDIR, else
    #: /tmp); "": under the run's folder (plans from before it). ``cache_dir``: a wheel
    #: cache the tasks share (uv's UV_CACHE_DIR). ``exclusive``: each task has its node.
    workdir: str = ""
    cache_dir: str = ""
    exclusive: bool = False
    #: Where each node finds the key its task signs with (:mod:`envforge.fleet.signing_ref`:
    #: an absolute path on the node, or ``env:NAME``); never the key itself.
    signing_key: str = ""
    #: The probe's health and collective steps (:class:`PlanChecks`); None in plans from
    #: before them (their tasks pass no such flag, and their reports are not asked for
    #: the steps).
    checks: PlanChecks | None = None

    def task_checks(self, task: Task) -> GpuChecks | None:
        """The health and collective steps ``task``'s probe runs (None: the plan says
        nothing of them)."""
        return self.checks.for_task(task) if self.checks is not None else None

    @property
    def id(self) -> str:
        """A short digest of the plan's content (names jobs; equal plans, equal ids)."""
        text = json.dumps(self.to_dict(with_id=False), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:10]

    def to_dict(self, *, with_id: bool = True) -> dict[str, Any]:
        data: dict[str, Any] = {"schema": SCHEMA}
        if with_id:
            data["id"] = self.id
        data.update(
            engine=self.engine,
            backend=self.backend,
            wheelhouse=self.wheelhouse,
            level=self.level,
            envforge=list(self.envforge),
            task_homes=self.task_homes,
            nonce=self.nonce,
            site={
                k: v
                for k, v in asdict(self.site).items()
                if k not in _LATER_SITE or v != _LATER_SITE[k]
            },
            tasks=[t.to_dict() for t in self.tasks],
        )
        for key in ("workdir", "cache_dir", "exclusive"):
            if getattr(self, key):
                data[key] = getattr(self, key)
        # written only when set, so a plan without them keeps the id it had before them
        if self.ca_bundle:
            data["ca_bundle"] = self.ca_bundle
        if self.overrides:
            data["overrides"] = list(self.overrides)
        if self.signing_key:
            data["signing_key"] = self.signing_key
        if self.checks is not None:
            data["checks"] = self.checks.to_dict()
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"

    def groups(self) -> dict[tuple[str, int, str], tuple[Task, ...]]:
        """Tasks by (arch, gpus, node): what one Slurm array (one constraint, one GRES,
        one ``--nodelist``) holds."""
        found: dict[tuple[str, int, str], list[Task]] = {}
        for task in self.tasks:
            found.setdefault((task.arch, task.gpus, task.node), []).append(task)
        return {key: tuple(tasks) for key, tasks in found.items()}


def _fits(recipe: Recipe, arch: str) -> bool:
    return recipe.gpu.vendor == "none" or recipe.gpu.arch == arch


def vendor_of(arch: str) -> str:
    """``amd`` for gfx*, ``nvidia`` for sm_*, ``none`` otherwise."""
    if arch.startswith("gfx"):
        return "amd"
    if arch.startswith("sm_"):
        return "nvidia"
    return "none"


def _pairs(recipes: Sequence[Recipe], archs: Sequence[str]) -> list[tuple[Recipe, str, bool]]:
    """(recipe, arch, arch given) in plan order; a recipe no given arch fits is refused."""
    pairs: list[tuple[Recipe, str, bool]] = []
    for recipe in recipes:
        if not archs:
            pairs.append((recipe, recipe.gpu.arch or CPU, False))
            continue
        fitting = [a for a in archs if _fits(recipe, a)]
        if not fitting:
            raise InvalidInput(
                f"--recipe {recipe.name}: its GPU arch {recipe.gpu.arch} is not among "
                f"--arch {','.join(archs)}",
                hint=f"add --arch {recipe.gpu.arch}, or plan that recipe on its own",
            )
        pairs.extend((recipe, a, True) for a in fitting)
    return pairs


def image_for(recipe: Recipe, site: Site) -> str:
    """The recipe's image: ``REGISTRY/R:STACK`` as ``envforge publish --registry`` pushes
    it, else the local ``envforge/R:STACK``."""
    if site.registry:
        return registry_ref(site.registry, recipe.name, recipe.stack_tag)
    return f"envforge/{recipe.name}:{recipe.stack_tag}"


def _check_counts(recipes: Sequence[tuple[str, Recipe]], nodes: int, gpus: int | None) -> None:
    if not recipes:
        raise InvalidInput("no recipe to plan", hint="--recipe NAME (repeatable)")
    why = values.count_problem(nodes, 1, values.MAX_NODES)
    if why:
        raise InvalidInput(f"--nodes {nodes}: {why}", hint="--nodes 4")
    why = values.count_problem(gpus, 0, values.MAX_GPUS) if gpus is not None else None
    if why:
        raise InvalidInput(f"--gpus {gpus}: {why}", hint="--gpus 1")
    for _, recipe in recipes:
        arch = recipe.gpu.arch
        if arch and values.arch_problem(arch):
            raise values.refuse(
                f"--recipe {recipe.name}: its GPU arch",
                arch,
                values.arch_problem(arch) or "",
                "fix the recipe's gpu.arch",
            )


# --------------------------------------------------------------------------- reading


def _text(data: Mapping[str, Any], key: str, default: str, source: str) -> str:
    value = data.get(key, default)
    if not isinstance(value, str):
        raise InvalidInput(f"{source}: key {key!r} is not a string", hint="plan again")
    return value


def _pairs_of(value: Any, source: str) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(
        isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) for x in p) for p in value
    ):
        raise InvalidInput(
            f"{source}: key 'site.features' is not a list of [arch, feature]", hint="plan again"
        )
    return tuple((a, f) for a, f in value)


def _site(data: Any, source: str) -> Site:
    if not isinstance(data, Mapping):
        raise InvalidInput(f"{source}: key 'site' is not an object", hint="plan again")
    labels = _strings(data, "runner_labels", source)
    cpus = data.get("cpus_per_task", 0)
    if type(cpus) is not int:
        raise InvalidInput(
            f"{source}: key 'site.cpus_per_task' is not a whole number", hint="plan again"
        )
    where = f"{source}: site"
    site = Site(
        partition=_text(data, "partition", "", where),
        account=_text(data, "account", "", where),
        time=_text(data, "time", "00:30:00", where),
        features=_pairs_of(data.get("features"), source),
        namespace=_text(data, "namespace", "default", where),
        arch_label=_text(data, "arch_label", "", where),
        registry=_text(data, "registry", "", where),
        runner_labels=labels,
        qos=_text(data, "qos", "", where),
        reservation=_text(data, "reservation", "", where),
        mem=_text(data, "mem", "", where),
        cpus_per_task=cpus,
        sbatch_args=_strings(data, "sbatch_args", source),
        preamble=_text(data, "preamble", "", where),
        **_pods(data, source),
    )
    values.check_site(site, source=source)
    values.check_pods(site, source=source)
    return site


def _strings(data: Mapping[str, Any], key: str, source: str) -> tuple[str, ...]:
    value = data.get(key) or []
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise InvalidInput(
            f"{source}: key 'site.{key}' is not a list of strings", hint="plan again"
        )
    return tuple(value)


def _whole(data: Mapping[str, Any], key: str, default: int, source: str) -> int:
    value = data.get(key, default)
    if type(value) is not int:
        raise InvalidInput(f"{source}: key 'site.{key}' is not a whole number", hint="plan again")
    return value


def _pods(data: Mapping[str, Any], source: str) -> dict[str, Any]:
    """The Kubernetes pod settings of a plan's site (defaults in plans from before them)."""
    groups = data.get("groups") or []
    if not isinstance(groups, list) or not all(type(g) is int for g in groups):
        raise InvalidInput(f"{source}: key 'site.groups' is not a list of GIDs", hint="plan again")
    where = f"{source}: site"
    return {
        "tolerations": _strings(data, "tolerations", source),
        "cpu": _text(data, "cpu", Site.cpu, where),
        "deadline": _whole(data, "deadline", 0, source),
        "ttl": _whole(data, "ttl", Site.ttl, source),
        "digests": _strings(data, "digests", source),
        "groups": tuple(groups),
    }


_TASK_TEXT = ("recipe", "ref", "recipe_hash", "stack", "vendor", "arch")


def _task(data: Any, number: int, source: str) -> Task:
    where = f"{source}: tasks[{number}]"
    if not isinstance(data, Mapping):
        raise InvalidInput(f"{where} is not an object", hint="plan again")
    missing = [k for k in (*_TASK_TEXT, "index", "gpus") if k not in data]
    if missing:
        raise InvalidInput(f"{where} lacks key {missing[0]!r}", hint="plan again")
    index, gpus = data["index"], data["gpus"]
    if type(index) is not int or type(gpus) is not int:
        raise InvalidInput(
            f"{where}: keys 'index' and 'gpus' must be whole numbers", hint="plan again"
        )
    text = {k: _text(data, k, "", where) for k in _TASK_TEXT}
    task = Task(
        index=index,
        gpus=gpus,
        image=_text(data, "image", "", where),
        node=_text(data, "node", "", where),
        **text,
    )
    if task.index != number:
        raise InvalidInput(f"{where} has index {task.index}", hint="plan again")
    for key, why in (
        ("recipe", values.recipe_name_problem(task.recipe)),
        ("arch", values.arch_problem(task.arch)),
        ("gpus", values.count_problem(task.gpus, 0, values.MAX_GPUS)),
        ("node", values.node_problem(task.node) if task.node else None),
    ):
        if why:
            raise values.refuse(
                f"{where}: key {key!r}",
                str(getattr(task, key)),
                why,
                "plan again (envforge fleet plan)",
            )
    return task


def plan_from_dict(data: Any, source: str) -> Plan:
    """A plan as :meth:`Plan.to_dict` wrote it; :class:`InvalidInput` naming the key."""
    if not isinstance(data, Mapping) or data.get("schema") != SCHEMA:
        raise InvalidInput(
            f"{source}: not an envforge fleet plan (schema {SCHEMA})",
            hint="envforge fleet plan ... -o DIR writes DIR/plan.json",
        )
    engine, backend = data.get("engine"), data.get("backend")
    if not isinstance(engine, str):  # a registered engine: envforge.fleet.planning checks
        raise InvalidInput(f"{source}: key 'engine' is {engine!r}", hint="plan again")
    if not _BACKEND_NAME.fullmatch(str(backend)):
        raise InvalidInput(f"{source}: key 'backend' has an unknown value", hint="plan again")
    tasks = data.get("tasks")
    if not isinstance(tasks, list) or len(tasks) > MAX_TASKS:
        raise InvalidInput(
            f"{source}: key 'tasks' is not a list of at most {MAX_TASKS}", hint="plan again"
        )
    command = data.get("envforge")
    if not isinstance(command, list) or not command or not all(isinstance(x, str) for x in command):
        raise InvalidInput(f"{source}: key 'envforge' is not a command", hint="plan again")
    level = _text(data, "level", "", source)
    if level not in ("", "quick", "full"):
        raise values.refuse(f"{source}: key 'level'", level, "not quick or full", "plan again")
    nonce = _text(data, "nonce", "", source)
    if nonce and not re.fullmatch(r"[0-9a-f]{32}", nonce):
        raise values.refuse(f"{source}: key 'nonce'", nonce, "not 32 hex digits", "plan again")
    overrides = _strings(data, "overrides", source)
    for setting in overrides:
        why = values.setting_problem(setting)
        if why:
            raise values.refuse(f"{source}: key 'overrides'", setting, why, "plan again")
    signing_key = _text(data, "signing_key", "", source)
    why = ref_problem(signing_key)
    if why:  # never quoted: it might be the key itself
        raise InvalidInput(f"{source}: key 'signing_key' {why}", hint="plan again")
    return Plan(
        engine=engine,
        backend=str(backend),
        tasks=tuple(_task(t, i, source) for i, t in enumerate(tasks)),
        site=_site(data.get("site", {}), source),
        wheelhouse=_text(data, "wheelhouse", "", source),
        level=level,
        envforge=tuple(command),
        task_homes=data.get("task_homes", True) is not False,
        nonce=nonce,
        ca_bundle=_text(data, "ca_bundle", "", source),
        overrides=overrides,
        **_node_local(data, source),
        signing_key=signing_key,
        checks=_checks(data.get("checks"), source),
    )


def _node_local(data: Mapping[str, Any], source: str) -> dict[str, Any]:
    """``workdir``, ``cache_dir`` and ``exclusive`` of a plan.json (checked)."""
    found = {k: _text(data, k, "", source) for k in ("workdir", "cache_dir")}
    for key, value in found.items():
        why = values.workdir_problem(value, allow_job_tmpdir=key == "workdir") if value else None
        if why:
            raise values.refuse(f"{source}: key {key!r}", value, why, "plan again")
    exclusive = data.get("exclusive", False)
    if type(exclusive) is not bool:
        raise InvalidInput(f"{source}: key 'exclusive' is not true or false", hint="plan again")
    return {**found, "exclusive": exclusive}


def _checks(data: Any, source: str) -> PlanChecks | None:
    """``checks`` of a plan.json (None: a plan from before them)."""
    if data is None:
        return None
    if not isinstance(data, Mapping):
        raise InvalidInput(f"{source}: key 'checks' is not an object", hint="plan again")
    found: dict[str, Any] = {}
    for key, default in (("health", None), ("require_healthy", False), ("collective", None)):
        value = data.get(key, default)
        if not (isinstance(value, bool) or (value is None and default is None)):
            allowed = "true, false or null" if default is None else "true or false"
            raise InvalidInput(f"{source}: key 'checks.{key}' is not {allowed}", hint="plan again")
        found[key] = value
    checks = PlanChecks(**found)
    if checks.require_healthy and checks.health is False:
        raise InvalidInput(
            f"{source}: keys 'checks.require_healthy' and 'checks.health' contradict",
            hint="plan again",
        )
    return checks
