"""What a plan's values may be, checked once where they enter (``fleet plan``'s options,
``plan.json``) and quoted where they land.

Every value that reaches a scheduler's file is checked against what that scheduler
accepts, so that none can add a line, a shell command or an expression: Slurm partition
and account names, time limits (``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH``, ``D-HH:MM``,
``D-HH:MM:SS``, ``UNLIMITED``/``infinite``) and feature expressions; Kubernetes names
(an RFC 1123 label for the namespace, a label key for ``--arch-label``, an image prefix
for ``--registry``); GitHub runner labels (no ``${{``). Archs are envforge's (``gfx942``,
``sm_90``, ``cpu``): they name files (``certify-ARCH-gpuN.sbatch``), so a path separator
or ``..`` can never reach one. The plan's folder is any path without control characters
or ``%`` (Slurm's file-name patterns); in a ``#SBATCH`` line it is double-quoted
(:func:`sbatch_quote`, Slurm's own quoting), in the shell line ``shlex``-quoted.

Each check returns why a value is refused (None: accepted); :func:`check_site` raises
:class:`~envforge.errors.InvalidInput` naming the option (or the ``plan.json`` key).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Mapping
from typing import Protocol

from envforge.core.patterns import GFX_RE, NAME_RE, SM_RE
from envforge.errors import InvalidInput

#: Most nodes (tasks) per (recipe, arch) and GPUs per task a plan may ask for.
MAX_NODES = 1000
MAX_GPUS = 64
#: Most CPUs per task (--cpus-per-task).
MAX_CPUS = 4096
#: The longest plan folder (Linux's PATH_MAX).
MAX_FOLDER = 4096

_SLURM_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,62}", re.ASCII)
_TIME = re.compile(
    r"\d{1,7}(:\d{1,2}){0,2}"  # MM, MM:SS, HH:MM:SS
    r"|\d{1,5}-\d{1,2}(:\d{1,2}){0,2}",  # D-HH, D-HH:MM, D-HH:MM:SS
    re.ASCII,
)
_FEATURE = re.compile(r"[A-Za-z0-9_.+-]{1,64}", re.ASCII)
#: A feature expression: features joined by & (and), | (or), with *N counts and [ ] ( ).
_FEATURE_EXPR = re.compile(r"[A-Za-z0-9_.+\-&|*()\[\]]{1,256}", re.ASCII)
_MEM = re.compile(r"\d{1,9}[KMGT]?", re.ASCII)
_MEM_BINARY = re.compile(r"\d{1,9}[KMGT]i", re.ASCII)
_SBATCH_OPTION = re.compile(r"--([a-z][a-z0-9-]{0,40})(=(.*))?", re.ASCII | re.DOTALL)
#: sbatch options the plan sets itself: the option to use instead.
_OWN_OPTIONS: Mapping[str, str] = {
    "array": "one array per arch",
    "output": "runs/NNN/logs",
    "error": "runs/NNN/logs",
    "job-name": "from the plan",
    "wrap": "the script is the plan's",
    "parsable": "fleet submit's",
    "gres": "--gpus",
    "gpus": "--gpus",
    "constraint": "--arch/--feature",
    "partition": "--partition",
    "account": "--account",
    "time": "--time",
    "qos": "--qos",
    "reservation": "--reservation",
    "mem": "--mem",
    "cpus-per-task": "--cpus-per-task",
    "nodes": "one node per task",
    "ntasks": "one task per node",
    "nodelist": "--nodelist or --every-node",
}
#: The longest --preamble.
MAX_PREAMBLE = 64 * 1024
_K8S_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", re.ASCII)
_K8S_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?", re.ASCII)
_DNS_SUBDOMAIN = re.compile(
    r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*", re.ASCII
)
_REGISTRY = re.compile(
    r"[a-z0-9]([a-z0-9.-]{0,252}[a-z0-9])?(:\d{1,5})?(/[a-z0-9]+([._-][a-z0-9]+)*)*", re.ASCII
)
_RUNNER_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}", re.ASCII)
#: Character classes no file name or script line may hold: controls, format characters
#: (bidi overrides), surrogates, private and unassigned, line and paragraph separators.
_UNSAFE = ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp")


def _shown(value: str) -> str:
    """A refused value as an error names it: escaped, and cut when long."""
    text = ascii(value) if not value.isprintable() else repr(value)
    return text if len(text) <= 80 else text[:60] + "...'"


def arch_problem(value: str) -> str | None:
    if value == "cpu" or GFX_RE.match(value) or SM_RE.match(value):
        return None
    return "not a GPU arch (gfx942, sm_90) nor cpu"


def partition_problem(value: str) -> str | None:
    if not value or all(_SLURM_NAME.fullmatch(p) for p in value.split(",")):
        return None
    return "not a Slurm partition name (letters, digits, _ . -; several: comma-separated)"


def account_problem(value: str) -> str | None:
    if not value or _SLURM_NAME.fullmatch(value):
        return None
    return "not a Slurm account name (letters, digits, _ . -)"


def time_problem(value: str) -> str | None:
    if value.lower() in ("unlimited", "infinite") or _TIME.fullmatch(value):
        return None
    return "not a Slurm time (MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS, UNLIMITED)"


def feature_problem(value: str) -> str | None:
    words = [w for w in re.split(r"[&|*()\[\]]", value) if w]
    if _FEATURE_EXPR.fullmatch(value) and words and all(_FEATURE.fullmatch(w) for w in words):
        return None
    return "not a Slurm feature expression (names of letters, digits, _ . + -, joined by & or |)"


def reservation_problem(value: str) -> str | None:
    if not value or all(_SLURM_NAME.fullmatch(p) for p in value.split(",")):
        return None
    return "not a Slurm reservation name (letters, digits, _ . -; several: comma-separated)"


def mem_problem(value: str) -> str | None:
    """``--mem`` serves every engine: a Slurm size (``64G``, binary units; a bare number is
    MB) or the same in Kubernetes' binary form (``64Gi``)."""
    if not value or _MEM.fullmatch(value) or _MEM_BINARY.fullmatch(value):
        return None
    return "not a memory size (a whole number with K, M, G or T: 64G, or 64Gi)"


def slurm_mem(value: str) -> str:
    """``--mem`` as sbatch reads it (``16Gi`` → ``16G``: Slurm's units are binary)."""
    return value.removesuffix("i")


def k8s_mem(value: str) -> str:
    """``--mem`` as a Kubernetes quantity, binary as Slurm's units are (``64G`` → ``64Gi``,
    a bare number of MB → ``NMi``); empty: 16Gi."""
    if not value:
        return "16Gi"
    if value.endswith("i"):
        return value
    return f"{value}i" if value[-1] in "KMGT" else f"{value}Mi"


def sbatch_option_problem(value: str) -> str | None:
    """Why ``--sbatch-arg`` ``value`` cannot be a ``#SBATCH`` line (None: it can)."""
    match = _SBATCH_OPTION.fullmatch(value)
    if not match:
        return "not a long sbatch option (--name or --name=value)"
    name, argument = match.group(1), match.group(3) or ""
    if name in _OWN_OPTIONS:
        return f"--{name} is envforge's to set ({_OWN_OPTIONS[name]})"
    if len(argument) > 1024 or any(unicodedata.category(ch) in _UNSAFE for ch in argument):
        return "its value holds a control character or is over 1024 characters"
    return None


def preamble_problem(text: str) -> str | None:
    """Why a ``--preamble`` cannot go before the exec line (None: it can)."""
    if len(text) > MAX_PREAMBLE:
        return f"longer than {MAX_PREAMBLE} characters"
    if any(unicodedata.category(ch) in _UNSAFE and ch not in "\n\t" for ch in text):
        return "holds a control or format character other than a line break or tab"
    if any(re.match(r"\s*#\s*SBATCH", line) for line in text.splitlines()):
        return "holds an #SBATCH line (give sbatch options as --sbatch-arg)"
    return None


def setting_problem(value: str) -> str | None:
    """Why a ``--set KEY.PATH=VALUE`` cannot be passed on to a node's build."""
    key, sep, _ = value.partition("=")
    if not sep or not re.fullmatch(r"[A-Za-z0-9_.\-\[\]]{1,200}", key):
        return "not KEY.PATH=VALUE"
    if len(value) > 4096 or any(unicodedata.category(ch) in _UNSAFE for ch in value):
        return "holds a control character or is over 4096 characters"
    return None


def namespace_problem(value: str) -> str | None:
    if _K8S_LABEL.fullmatch(value):
        return None
    return "not a Kubernetes namespace (an RFC 1123 label: a-z, 0-9, -, at most 63)"


def label_key_problem(value: str) -> str | None:
    if not value:
        return None
    prefix, slash, name = value.rpartition("/")
    if _K8S_NAME.fullmatch(name) and (
        not slash or (len(prefix) <= 253 and _DNS_SUBDOMAIN.fullmatch(prefix))
    ):
        return None
    return "not a Kubernetes label key ([DNS-SUBDOMAIN/]NAME, NAME at most 63)"


def registry_problem(value: str) -> str | None:
    if not value or (len(value) <= 255 and _REGISTRY.fullmatch(value.rstrip("/"))):
        return None
    return "not an image registry prefix (HOST[:PORT][/NAMESPACE], lower case)"


def runner_label_problem(value: str) -> str | None:
    if _RUNNER_LABEL.fullmatch(value):
        return None
    return "not a GitHub runner label (letters, digits, _ . -, at most 100)"


def recipe_name_problem(value: str) -> str | None:
    return None if NAME_RE.match(value) else "not a recipe name"


def folder_problem(value: str) -> str | None:
    """Why a plan folder cannot go into a batch script (None: it can, quoted)."""
    if len(value) > MAX_FOLDER:
        return f"longer than {MAX_FOLDER} characters"
    if any(unicodedata.category(ch) in _UNSAFE for ch in value):
        return "holds a control or format character (a line break, NUL, ESC)"
    if "%" in value:
        return "holds %, which Slurm reads as a file-name pattern (%j, %A)"
    return None


_NODE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,252}", re.ASCII)


def node_problem(value: str) -> str | None:
    """Why ``value`` is no node name (a host name, one name: no Slurm ``[ranges]``)."""
    if _NODE.fullmatch(value):
        return None
    return "not a node name (letters, digits, _ . -; one name, no [ranges])"


def workdir_problem(value: str, *, allow_job_tmpdir: bool = False) -> str | None:
    """Why ``value`` is no node folder (``--workdir``, ``--cache-dir``): an absolute path
    a batch script can name, or ``$TMPDIR`` (the job's) where allowed."""
    if allow_job_tmpdir and value == "$TMPDIR":
        return None
    if not value.startswith("/"):
        return "not an absolute path (the nodes read it)"
    return folder_problem(value)


def count_problem(value: int, least: int, most: int) -> str | None:
    if least <= value <= most:
        return None
    return f"must be from {least} to {most}"


def sbatch_quote(value: str) -> str:
    """``value`` as one argument of a ``#SBATCH`` line: double quotes, ``\\`` and ``"``
    escaped (sbatch's own reading of directive lines; no shell reads them)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


_PLAIN_ARG = re.compile(r"[A-Za-z0-9_.:+\-&|*()\[\],/=%@]+", re.ASCII)


def sbatch_arg(value: str) -> str:
    """``value`` as is when sbatch reads it so (no space, quote, ``\\`` or ``#``), else
    :func:`sbatch_quote`-d."""
    return value if _PLAIN_ARG.fullmatch(value) else sbatch_quote(value)


def refuse(setting: str, value: str, why: str, fix: str) -> InvalidInput:
    return InvalidInput(f"{setting} {_shown(value)}: {why}", hint=fix)


class SiteValues(Protocol):
    """What :func:`check_site` reads of a site (:class:`envforge.fleet.plan.Site`)."""

    @property
    def partition(self) -> str: ...
    @property
    def account(self) -> str: ...
    @property
    def time(self) -> str: ...
    @property
    def namespace(self) -> str: ...
    @property
    def arch_label(self) -> str: ...
    @property
    def registry(self) -> str: ...
    @property
    def qos(self) -> str: ...
    @property
    def reservation(self) -> str: ...
    @property
    def mem(self) -> str: ...
    @property
    def cpus_per_task(self) -> int: ...
    @property
    def sbatch_args(self) -> tuple[str, ...]: ...
    @property
    def preamble(self) -> str: ...
    @property
    def features(self) -> tuple[tuple[str, str], ...]: ...
    @property
    def runner_labels(self) -> tuple[str, ...]: ...


#: Site field -> (option, check, an example for the fix).
_SITE: Mapping[str, tuple[str, Callable[[str], str | None], str]] = {
    "partition": ("--partition", partition_problem, "--partition gpu"),
    "account": ("--account", account_problem, "--account lab"),
    "time": ("--time", time_problem, "--time 01:00:00"),
    "qos": ("--qos", account_problem, "--qos normal"),
    "reservation": ("--reservation", reservation_problem, "--reservation maint"),
    "mem": ("--mem", mem_problem, "--mem 64G"),
    "namespace": ("--namespace", namespace_problem, "--namespace default"),
    "arch_label": ("--arch-label", label_key_problem, "--arch-label envforge.io/gpu-arch"),
    "registry": ("--registry", registry_problem, "--registry 127.0.0.1:5000/lab"),
}


def _check_slurm_extras(site: SiteValues, name: Callable[[str, str], str]) -> None:
    why = count_problem(site.cpus_per_task, 0, MAX_CPUS)
    if why:
        raise refuse(name("--cpus-per-task", "cpus_per_task"), str(site.cpus_per_task), why, "8")
    for option in site.sbatch_args:
        why = sbatch_option_problem(option)
        if why:
            raise refuse(
                name("--sbatch-arg", "sbatch_args"), option, why, "--sbatch-arg=--exclusive"
            )
    why = preamble_problem(site.preamble)
    if why:
        raise refuse(
            name("--preamble", "preamble"),
            site.preamble,
            why,
            "a file of shell lines, such as module load python/3.11",
        )


def check_site(site: SiteValues, *, source: str = "") -> None:
    """Refuse the first value of ``site`` its scheduler would not take; named as the
    option (``source`` empty) or as the key of ``source`` (a plan.json)."""

    def name(option: str, key: str) -> str:
        return f"{source}: key 'site.{key}'" if source else option

    for key, (option, check, example) in _SITE.items():
        value = getattr(site, key)
        why = check(value)
        if why:
            raise refuse(
                name(option, key),
                value,
                why,
                f"{example}" if not source else "plan again (envforge fleet plan)",
            )
    for arch, feature in site.features:
        for value, check in ((arch, arch_problem), (feature, feature_problem)):
            why = check(value)
            if why:
                raise refuse(
                    name("--feature", "features"),
                    f"{arch}={feature}",
                    why,
                    "--feature gfx942=mi300x" if not source else "plan again",
                )
    _check_slurm_extras(site, name)
    for label in site.runner_labels:
        why = runner_label_problem(label)
        if why:
            raise refuse(
                name("--runner-label", "runner_labels"),
                label,
                why,
                "--runner-label self-hosted" if not source else "plan again",
            )


# --------------------------------------------------------------------------- Kubernetes pods

_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?", re.ASCII)
_QUANTITY = re.compile(r"[0-9]{1,7}(\.[0-9]{1,3})?(m|k|Ki|M|Mi|G|Gi|T|Ti)?", re.ASCII)
_DIGEST_REF = re.compile(
    r"(?P<repo>[a-z0-9]([a-z0-9.-]{0,252}[a-z0-9])?(:\d{1,5})?(/[a-z0-9]+([._-][a-z0-9]+)*)+)"
    r"(:(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?@(?P<digest>sha256:[0-9a-f]{64})",
    re.ASCII,
)
#: The longest pod deadline and finished-Job lifetime (a year), seconds.
MAX_SECONDS = 366 * 86400


def toleration(value: str) -> dict[str, str]:
    """``KEY[=VALUE]:EFFECT`` as a pod toleration (``Equal`` with a value, else ``Exists``)."""
    rest, _, effect = value.rpartition(":")
    key, eq, val = rest.partition("=")
    found = {"key": key, "operator": "Equal" if eq else "Exists"}
    if eq:
        found["value"] = val
    return {**found, "effect": effect}


def toleration_problem(value: str) -> str | None:
    rest, colon, effect = value.rpartition(":")
    key, _, val = rest.partition("=")
    if (
        colon
        and effect in _EFFECTS
        and key
        and not label_key_problem(key)
        and _LABEL_VALUE.fullmatch(val)
    ):
        return None
    return f"not KEY[=VALUE]:EFFECT (a label key, a label value, one of {', '.join(_EFFECTS)})"


def quantity_problem(value: str) -> str | None:
    if not value or _QUANTITY.fullmatch(value):
        return None
    return "not a Kubernetes quantity (2, 500m, 16Gi)"


def digest_ref(value: str) -> tuple[str, str, str] | None:
    """``REPO[:TAG]@sha256:HEX`` as (repository, tag or "", digest); None when it is not."""
    found = _DIGEST_REF.fullmatch(value)
    if found is None:
        return None
    return found.group("repo"), found.group("tag") or "", found.group("digest")


def digest_ref_problem(value: str) -> str | None:
    if digest_ref(value) is not None:
        return None
    return "not an image by digest (HOST[:PORT]/NS/NAME[:TAG]@sha256: and 64 hex digits)"


def time_seconds(value: str) -> int:
    """A Slurm time (:func:`time_problem` accepted it) in seconds; 0 for unlimited."""
    if value.lower() in ("unlimited", "infinite"):
        return 0
    days, _, clock = value.rpartition("-")
    parts = [int(p) for p in clock.split(":")]
    if days:  # D-HH, D-HH:MM, D-HH:MM:SS
        hours, minutes, seconds = [*parts, 0, 0][:3]
    elif len(parts) == 3:  # HH:MM:SS
        hours, minutes, seconds = parts
    else:  # MM, MM:SS
        hours, minutes, seconds = 0, parts[0], parts[1] if len(parts) == 2 else 0
    return int(days or 0) * 86400 + hours * 3600 + minutes * 60 + seconds


class PodValues(Protocol):
    """What :func:`check_pods` reads of a site."""

    @property
    def tolerations(self) -> tuple[str, ...]: ...
    @property
    def cpu(self) -> str: ...
    @property
    def mem(self) -> str: ...
    @property
    def deadline(self) -> int: ...
    @property
    def ttl(self) -> int: ...
    @property
    def digests(self) -> tuple[str, ...]: ...
    @property
    def groups(self) -> tuple[int, ...]: ...


def check_pods(site: PodValues, *, source: str = "") -> None:
    """Refuse the first Kubernetes pod setting of ``site`` the API would not take."""

    def name(option: str, key: str) -> str:
        return f"{source}: key 'site.{key}'" if source else option

    again = "plan again (envforge fleet plan)"
    checks: list[tuple[str, str, str, str | None, str]] = [
        *(
            (
                "--toleration",
                "tolerations",
                t,
                toleration_problem(t),
                "--toleration gpu=true:NoSchedule",
            )
            for t in site.tolerations
        ),
        *(
            ("--image", "digests", d, digest_ref_problem(d), "--image HOST/NS/R:TAG@sha256:...")
            for d in site.digests
        ),
        ("--cpu", "cpu", site.cpu, quantity_problem(site.cpu), "--cpu 4"),
        (
            "--time",
            "deadline",
            str(site.deadline),
            count_problem(site.deadline, 0, MAX_SECONDS),
            "--time 01:00:00",
        ),
        ("--ttl", "ttl", str(site.ttl), count_problem(site.ttl, 0, MAX_SECONDS), "--ttl 86400"),
        *(
            ("--pod-group", "groups", str(g), count_problem(g, 0, 2**31 - 1), "--pod-group 109")
            for g in site.groups
        ),
    ]
    for option, key, value, why, example in checks:
        if why:
            raise refuse(name(option, key), value, why, example if not source else again)
