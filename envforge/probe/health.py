"""GPU health facts around the probe: the ``health`` step, run on the host after the worker.

Read from the driver's tools, each under :data:`TOOL_DEADLINE` seconds through
:func:`envforge.core.proc.run` (the one helper for processes with deadlines):

- NVIDIA: ``nvidia-smi --query-gpu=`` :data:`NVIDIA_FIELDS` (uncorrected ECC errors,
  volatile and aggregate; retired pages pending and double-bit; the active clock
  throttle reasons; temperature; power draw) and ``--query-remapped-rows`` (A100 and
  later remap rows instead of retiring pages).
- AMD: ``amd-smi metric --json`` (uncorrectable ECC, edge temperature, socket power,
  throttle status), else ``rocm-smi --showtemp --showpower --json``.

A tool that is not installed is recorded as ``absent``; one that fails or overruns as
``failed``/``timed out``: facts, never an error. A failing fact (uncorrected ECC errors,
pages waiting to be retired or rows to be remapped, a row remapping failure, a hardware
slowdown throttle) makes the step ``warn`` (the report still passes), or ``fail`` with
``--require-healthy``. The facts go into the report's ``health`` section.
"""

from __future__ import annotations

import math
import os
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from envforge.core import proc
from envforge.core.jsonlimits import BadJSON, loads
from envforge.probe.report import Status, StepResult
from envforge.probe.spec import HEALTH_STEP

#: Seconds one tool may take (a hung driver must not hang the probe).
TOOL_DEADLINE = 10.0
NVIDIA_FIELDS = (
    "index",
    "uuid",
    "ecc.errors.uncorrected.volatile.total",
    "ecc.errors.uncorrected.aggregate.total",
    "retired_pages.pending",
    "retired_pages.double_bit.count",
    "clocks_throttle_reasons.active",
    "temperature.gpu",
    "power.draw",
)
NVIDIA_QUERY: tuple[str, ...] = (
    "nvidia-smi",
    f"--query-gpu={','.join(NVIDIA_FIELDS)}",
    "--format=csv,noheader,nounits",
)
REMAP_FIELDS = (
    "gpu_uuid",
    "remapped_rows.correctable",
    "remapped_rows.uncorrectable",
    "remapped_rows.pending",
    "remapped_rows.failure",
)
NVIDIA_REMAP: tuple[str, ...] = (
    "nvidia-smi",
    f"--query-remapped-rows={','.join(REMAP_FIELDS)}",
    "--format=csv,noheader,nounits",
)
AMD_METRIC: tuple[str, ...] = ("amd-smi", "metric", "--json")
ROCM_METRIC: tuple[str, ...] = ("rocm-smi", "--showtemp", "--showpower", "--json")
#: NVML's clocks throttle reasons that mean the hardware slowed itself down
#: (nvmlClocksThrottleReasons: HW slowdown, HW thermal slowdown, HW power brake).
HW_SLOWDOWN = {0x8: "hardware slowdown", 0x40: "hardware thermal slowdown", 0x80: "power brake"}
#: The largest counter taken as a number (a tool printing nonsense gives None).
_MAX_COUNT = 1 << 62


@dataclass(frozen=True)
class ToolRun:
    """One tool's answer: ``state`` is ``read``, ``absent``, ``failed`` or ``timed out``."""

    argv: tuple[str, ...]
    state: str
    text: str = ""
    why: str = ""


Runner = Callable[[Sequence[str]], ToolRun]


def tool_run(timeout: float = TOOL_DEADLINE, environ: Mapping[str, str] | None = None) -> Runner:
    """Runs a tool found on ``PATH`` under ``timeout`` seconds, saying what became of it."""
    env = dict(os.environ if environ is None else environ)

    def run(argv: Sequence[str]) -> ToolRun:
        exe = shutil.which(argv[0], path=env.get("PATH"))
        if exe is None:
            return ToolRun(tuple(argv), "absent")
        try:
            done = proc.run([exe, *argv[1:]], timeout=timeout, env=env)
        except OSError as exc:
            return ToolRun(tuple(argv), "failed", why=exc.strerror or str(exc))
        if done.timed_out:
            return ToolRun(tuple(argv), "timed out", why=f"no answer within {timeout:g}s")
        if done.returncode != 0:
            said = (done.stdout.strip() or done.stderr.strip()).splitlines()
            why = f"exit {done.returncode}" + (f": {said[0][:200]}" if said else "")
            return ToolRun(tuple(argv), "failed", why=why)
        return ToolRun(tuple(argv), "read", done.stdout)

    return run


@dataclass(frozen=True)
class GpuHealth:
    """One GPU's health facts; None where the tool does not say (``[N/A]``)."""

    index: str
    source: str
    uuid: str | None = None
    ecc_volatile: int | None = None
    ecc_aggregate: int | None = None
    retired_pending: bool | None = None
    retired_double_bit: int | None = None
    remap_pending: bool | None = None
    remap_failure: bool | None = None
    remap_uncorrectable: int | None = None
    #: NVIDIA: NVML's throttle reasons bit mask; AMD: amd-smi's throttle status text.
    throttle: int | None = None
    throttle_status: str | None = None
    temperature: float | None = None
    power: float | None = None

    @property
    def problems(self) -> tuple[str, ...]:
        """What about this GPU is worth draining a node for, one phrase each."""
        out: list[str] = []
        if self.ecc_volatile:
            out.append(f"{self.ecc_volatile} uncorrected ECC error(s) since the driver loaded")
        elif self.ecc_aggregate:
            out.append(f"{self.ecc_aggregate} uncorrected ECC error(s) in its lifetime")
        if self.retired_pending:
            out.append("pages waiting to be retired (reset the GPU)")
        if self.remap_pending:
            out.append("rows waiting to be remapped (reset the GPU)")
        if self.remap_failure:
            out.append("a row remapping failed")
        slow = [name for bit, name in HW_SLOWDOWN.items() if self.throttle and self.throttle & bit]
        if slow:
            out.append("throttled: " + ", ".join(slow))
        if self.throttle_status and self.throttle_status.upper() not in ("UNTHROTTLED", "N/A"):
            out.append(f"throttled: {self.throttle_status}")
        return tuple(out)

    def to_dict(self) -> dict[str, Any]:
        data = {k: v for k, v in vars(self).items() if v is not None}
        if self.throttle is not None:
            data["throttle"] = f"0x{self.throttle:016x}"
        if self.problems:
            data["problems"] = list(self.problems)
        return data


@dataclass(frozen=True)
class HealthFacts:
    gpus: tuple[GpuHealth, ...]
    #: (tool, state): ``read``, ``absent``, ``failed: why``, ``timed out: why``.
    tools: tuple[tuple[str, str], ...]

    @property
    def problems(self) -> tuple[str, ...]:
        return tuple(f"GPU {g.index}: {p}" for g in self.gpus for p in g.problems)

    def to_dict(self) -> dict[str, Any]:
        return {"gpus": [g.to_dict() for g in self.gpus], "tools": dict(self.tools)}

    @property
    def summary(self) -> str:
        if self.problems:
            return "; ".join(self.problems)
        if not self.gpus:
            told = ", ".join(f"{tool} {state}" for tool, state in self.tools)
            return f"no GPU health read ({told})"
        temps = [f"{g.temperature:g}C" for g in self.gpus if g.temperature is not None]
        text = f"{len(self.gpus)} GPU(s) healthy by {self.gpus[0].source}"
        return text + (f" ({', '.join(temps)})" if temps else "")


# --------------------------------------------------------------------------- parsers


def _count(text: Any) -> int | None:
    """A whole number (``0``, ``12``); None for ``[N/A]``, ``N/A``, ``[Not Supported]``."""
    if isinstance(text, bool):
        return None
    if isinstance(text, int):
        return text if 0 <= text <= _MAX_COUNT else None
    value = str(text).strip()
    return int(value) if value.isdigit() and int(value) <= _MAX_COUNT else None


def _float(text: Any) -> float | None:
    if isinstance(text, bool) or text is None:
        return None
    if isinstance(text, Mapping):
        return _float(text.get("value"))
    try:
        value = float(str(text).strip())
    except ValueError:
        return None
    return value if math.isfinite(value) and abs(value) < 1e9 else None


def _yes(text: str) -> bool | None:
    value = text.strip().lower()
    return True if value == "yes" else False if value == "no" else None


def _hex(text: str) -> int | None:
    value = text.strip().lower()
    try:
        return int(value, 16) if value.startswith("0x") else None
    except ValueError:
        return None


def _rows(text: str, width: int) -> list[list[str]]:
    rows = [[c.strip() for c in line.split(",")] for line in text.splitlines() if line.strip()]
    return [r for r in rows if len(r) == width]


def parse_nvidia(text: str, remapped: str = "") -> list[GpuHealth]:
    """``nvidia-smi --query-gpu=`` :data:`NVIDIA_FIELDS` ``--format=csv,noheader,nounits``
    rows, with ``--query-remapped-rows`` rows joined by UUID."""
    remaps = {r[0]: r for r in _rows(remapped, len(REMAP_FIELDS))}
    out: list[GpuHealth] = []
    for row in _rows(text, len(NVIDIA_FIELDS)):
        index, uuid, volatile, aggregate, pending, dbe, throttle, temp, power = row
        remap = remaps.get(uuid)
        out.append(
            GpuHealth(
                index=index,
                source="nvidia-smi",
                uuid=uuid or None,
                ecc_volatile=_count(volatile),
                ecc_aggregate=_count(aggregate),
                retired_pending=_yes(pending),
                retired_double_bit=_count(dbe),
                remap_uncorrectable=_count(remap[2]) if remap else None,
                remap_pending=_yes(remap[3]) if remap else None,
                remap_failure=_yes(remap[4]) if remap else None,
                throttle=_hex(throttle),
                temperature=_float(temp),
                power=_float(power),
            )
        )
    return out


def _json(text: str) -> Any:
    try:
        return loads(text)
    except BadJSON:
        return None


def _section(data: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = data.get(key)
    return value if isinstance(value, Mapping) else {}


def parse_amd_smi(text: str) -> list[GpuHealth]:
    """``amd-smi metric --json``: a list of GPUs (ROCm 6) or ``{"gpu_data": [...]}``
    (ROCm 7), each with ``ecc``, ``temperature``, ``power``."""
    data = _json(text)
    if isinstance(data, Mapping):
        data = data.get("gpu_data")
    out: list[GpuHealth] = []
    for gpu in data if isinstance(data, list) else ():
        if not isinstance(gpu, Mapping) or "gpu" not in gpu:
            continue
        ecc, temps, power = (_section(gpu, key) for key in ("ecc", "temperature", "power"))
        status = power.get("throttle_status")
        out.append(
            GpuHealth(
                index=str(gpu["gpu"]),
                source="amd-smi",
                ecc_aggregate=_count(ecc.get("total_uncorrectable_count")),
                throttle_status=str(status) if isinstance(status, str) else None,
                temperature=_float(temps.get("edge") or temps.get("hotspot")),
                power=_float(power.get("socket_power")),
            )
        )
    return out


def parse_rocm_smi(text: str) -> list[GpuHealth]:
    """``rocm-smi --showtemp --showpower --json``: ``{"card0": {"Temperature (Sensor
    edge) (C)": "52.0", "Average Graphics Package Power (W)": "35.0"}}``."""
    data = _json(text)
    out: list[GpuHealth] = []
    for card, values in data.items() if isinstance(data, Mapping) else ():
        if not str(card).startswith("card") or not isinstance(values, Mapping):
            continue
        power = next((v for k, v in values.items() if "Power" in str(k)), None)
        out.append(
            GpuHealth(
                index=str(card)[4:],
                source="rocm-smi",
                temperature=_float(values.get("Temperature (Sensor edge) (C)")),
                power=_float(power),
            )
        )
    return out


# --------------------------------------------------------------------------- reading


def _state(run: ToolRun) -> str:
    return run.state + (f": {run.why}" if run.why else "")


def read_health(runner: Runner | None = None) -> HealthFacts:
    """Every GPU's health facts from whichever tool is here (NVIDIA's, then AMD's)."""
    tool = runner or tool_run()
    tools: list[tuple[str, str]] = []
    nvidia = tool(NVIDIA_QUERY)
    tools.append(("nvidia-smi", _state(nvidia)))
    if nvidia.state == "read":
        remap = tool(NVIDIA_REMAP)
        gpus = parse_nvidia(nvidia.text, remap.text if remap.state == "read" else "")
        return HealthFacts(tuple(gpus), tuple(tools))
    amd = tool(AMD_METRIC)
    tools.append(("amd-smi", _state(amd)))
    if amd.state == "read":
        return HealthFacts(tuple(parse_amd_smi(amd.text)), tuple(tools))
    rocm = tool(ROCM_METRIC)
    tools.append(("rocm-smi", _state(rocm)))
    found = parse_rocm_smi(rocm.text) if rocm.state == "read" else []
    return HealthFacts(tuple(found), tuple(tools))


def health_step(
    require: bool = False, runner: Runner | None = None
) -> tuple[StepResult, HealthFacts]:
    """The ``health`` step: ``warn`` on a failing fact (``fail`` when ``require``), else
    ``pass``, the facts said in its detail; and the facts for the report."""
    start = time.monotonic()
    facts = read_health(runner)
    status: Status = "pass"
    if facts.problems:
        status = "fail" if require else "warn"
    result = StepResult(
        name=HEALTH_STEP, status=status, seconds=time.monotonic() - start, detail=facts.summary
    )
    return result, facts
