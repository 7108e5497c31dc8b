"""``detect()``: probe this machine once and return its ``HardwareProfile``.

Probes that load GPU libraries (NVML, llama.cpp, ONNX Runtime) and external commands (nvidia-smi, sysctl) run
in child processes with a timeout, side by side. Whatever fails is left out of the profile and explained in
its ``notes``: detection never raises.
"""

from __future__ import annotations

import logging
import os
import platform
import shutil
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from localinfer.hardware import cpu, gpus, installed, memory, nvidia
from localinfer.hardware.probes import CommandResult, library_probe_command, run_command, run_library_probe
from localinfer.hardware.profile import OS, BackendAvailability, CPUInfo, GPUInfo, HardwareProfile, MemoryInfo

log = logging.getLogger(__name__)

T = TypeVar("T")
ProbeAnswer = tuple[dict[str, Any] | None, str | None]
NvidiaProbes = tuple["Future[ProbeAnswer] | None", "Future[CommandResult] | None", "str | None"]

_OS_NAMES: dict[str, OS] = {"linux": "linux", "darwin": "darwin", "windows": "windows"}
_SYSCTL_NAMES = ("machdep.cpu.brand_string", "hw.memsize", "hw.optional", "iogpu.wired_limit_mb")
# NVML errors that only mean "no NVIDIA driver here": no GPU, nothing to explain.
_NO_NVIDIA_DRIVER = ("LibraryNotFound", "DriverNotLoaded", "Shared Library Not Found", "Driver Not Loaded")


def detect(
    *,
    environ: Mapping[str, str] = os.environ,
    timeout: float = 10.0,
    probe_command: Callable[[str], Sequence[str]] = library_probe_command,
) -> HardwareProfile:
    """What this machine has: OS, CPU, memory (capped by a container's limit), GPUs, usable backends.

    ``environ`` is the environment that probes see (``CUDA_VISIBLE_DEVICES``, ``PATH``); each child-process
    probe is stopped after ``timeout`` seconds. ``probe_command(name)`` is the command that runs a library probe
    (a frozen build runs them its own way). Never raises.
    """
    with ThreadPoolExecutor(max_workers=4, thread_name_prefix="hw-probe") as pool:
        return _Detection(os_name(platform.system()), environ, timeout, probe_command, pool).run()


def os_name(system: str) -> OS:
    """``platform.system()`` as the profile names it."""
    return _OS_NAMES.get(system.lower(), "other")


def parse_os_release(text: str) -> str | None:
    """The distribution's name in ``/etc/os-release`` (``PRETTY_NAME``, else ``NAME VERSION_ID``)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            fields[key.strip()] = value.strip().strip("\"'")
    if fields.get("PRETTY_NAME"):
        return fields["PRETTY_NAME"]
    name = " ".join(filter(None, (fields.get("NAME"), fields.get("VERSION_ID"))))
    return name or None


def os_version(system: OS, root: Path = Path("/")) -> str:
    """A readable OS version: ``Ubuntu 22.04.4 LTS (kernel 6.8.0)``, ``macOS 14.4``, ``Windows 11 (10.0.22631)``."""
    if system == "linux":
        try:
            distro = parse_os_release((root / "etc/os-release").read_text())
        except OSError:
            distro = None
        return f"{distro} (kernel {platform.release()})" if distro else f"kernel {platform.release()}"
    if system == "darwin":
        return f"macOS {platform.mac_ver()[0] or platform.release()}"
    if system == "windows":
        return f"Windows {platform.release()} ({platform.version()})"
    return f"{platform.system()} {platform.release()}".strip()


class _Detection:
    """One run of ``detect``: the probes started side by side, and the notes they leave."""

    def __init__(
        self,
        system: OS,
        environ: Mapping[str, str],
        timeout: float,
        probe_command: Callable[[str], Sequence[str]],
        pool: ThreadPoolExecutor,
    ) -> None:
        self.system = system
        self.environ = environ
        self.env = dict(environ)
        self.timeout = timeout
        self.probe_command = probe_command
        self.pool = pool
        self.notes: list[str] = []

    def run(self) -> HardwareProfile:
        llama = self._library("llamacpp") if installed.is_installed("llama_cpp") else None
        onnx = self._library("onnx") if installed.is_installed("onnxruntime") else None
        nvml = (
            self._library("nvml") if self.system in ("linux", "windows") and installed.is_installed("pynvml") else None
        )
        smi_path = shutil.which("nvidia-smi", path=self.environ.get("PATH")) if self.system != "darwin" else None
        smi = self._command([smi_path, *nvidia.NVIDIA_SMI_QUERY]) if smi_path and nvml is None else None
        sysctl = self._command([_sysctl_path(), *_SYSCTL_NAMES]) if self.system == "darwin" else None

        sysctl_values = self._sysctl(sysctl)
        cpu_info = self._attempt("the CPU", lambda: self._cpu(sysctl_values), _unknown_cpu())
        mem = self._attempt("memory", self._memory, MemoryInfo(0, 0))
        onnx_answer = self._answer(onnx, "onnx")
        no_gpus: list[GPUInfo] = []
        found = self._attempt(
            "GPUs", lambda: self._gpus(cpu_info, mem, sysctl_values, (nvml, smi, smi_path), onnx_answer), no_gpus
        )
        llama_answer = self._answer(llama, "llamacpp")
        not_probed: tuple[BackendAvailability, ...] = ()
        available = self._attempt(
            "backends",
            lambda: (
                installed.llamacpp_availability(*llama_answer),
                installed.onnx_availability(*onnx_answer),
                *installed.engine_availabilities(self.system, found, self.environ.get("PATH")),
            ),
            not_probed,
        )
        return HardwareProfile(
            os=self.system,
            os_version=self._attempt("the OS version", lambda: os_version(self.system), platform.release()),
            cpu=cpu_info,
            memory=mem,
            gpus=tuple(found),
            backends=available,
            onnx_providers=tuple(str(p) for p in (onnx_answer[0] or {}).get("providers", ())),
            notes=tuple(dict.fromkeys(self.notes)),
        )

    def _library(self, name: str) -> Future[ProbeAnswer]:
        command = self.probe_command(name)
        return self.pool.submit(run_library_probe, name, timeout=self.timeout, env=self.env, command=command)

    def _command(self, argv: Sequence[str]) -> Future[CommandResult]:
        return self.pool.submit(run_command, argv, timeout=self.timeout, env=self.env)

    def _cpu(self, sysctl: Mapping[str, str] | None) -> CPUInfo:
        cpuinfo: str | None = None
        if self.system == "linux":
            try:
                cpuinfo = Path("/proc/cpuinfo").read_text(errors="replace")
            except OSError:
                cpuinfo = None
        info, notes = cpu.detect_cpu(self.system, cpuinfo=cpuinfo, sysctl=sysctl)
        self.notes.extend(notes)
        return info

    def _memory(self) -> MemoryInfo:
        info, notes = memory.detect_memory(Path("/") if self.system == "linux" else None)
        self.notes.extend(notes)
        return info

    def _gpus(
        self,
        cpu_info: CPUInfo,
        mem: MemoryInfo,
        sysctl: Mapping[str, str] | None,
        probes: NvidiaProbes,
        onnx: ProbeAnswer,
    ) -> list[GPUInfo]:
        devices = self._nvidia(*probes)
        visible, notes = nvidia.select_visible(devices, self.environ.get("CUDA_VISIBLE_DEVICES"))
        self.notes.extend(notes)
        order = nvidia.order_note(visible, self.environ.get("CUDA_DEVICE_ORDER"))
        self.notes.extend([order] if order else [])
        found = [nvidia.to_gpu_info(d, ram_total=mem.total, ram_available=mem.available) for d in visible]
        self.notes.extend(
            f"{g.name} reports no memory of its own: it is taken to share the RAM." for g in found if g.unified_memory
        )
        if self.system == "linux":
            if not devices and cpu_info.arch == "arm64":
                jetson = nvidia.read_jetson(Path("/"), ram_total=mem.total, ram_available=mem.available)
                if jetson is not None and self.environ.get("CUDA_VISIBLE_DEVICES", "0").strip() not in ("", "-1"):
                    found.append(jetson)
            found.extend(gpus.read_amd_gpus(Path("/")))
        elif self.system == "darwin" and cpu_info.arch == "arm64":
            values = sysctl or {}
            wired = values.get("iogpu.wired_limit_mb", "")
            found.append(
                gpus.apple_gpu(
                    values.get("machdep.cpu.brand_string") or cpu_info.model,
                    ram_total=mem.total,
                    ram_available=mem.available,
                    wired_limit_mb=int(wired) if wired.isdigit() else None,
                )
            )
        elif self.system == "windows":
            found.extend(self._directml(onnx, skip=("nvidia",) if devices else ()))
        return found

    def _nvidia(
        self, nvml: Future[ProbeAnswer] | None, smi: Future[CommandResult] | None, smi_path: str | None
    ) -> list[nvidia.NvidiaDevice]:
        """The NVIDIA devices NVML lists, else nvidia-smi's, in PCI order."""
        if nvml is not None:
            data, error = nvml.result()
            if data is not None and "error" not in data:
                return nvidia.parse_nvml(data)
            reason = error or str((data or {}).get("error"))
            no_driver = any(marker in reason for marker in _NO_NVIDIA_DRIVER)
            if smi_path is None:
                self.notes.extend([] if no_driver else [f"NVML could not list NVIDIA GPUs: {reason}"])
                return []
            self.notes.append(f"NVML could not list NVIDIA GPUs ({reason}): nvidia-smi was asked instead.")
            smi = self._command([smi_path, *nvidia.NVIDIA_SMI_QUERY])
        if smi is None:
            if Path("/proc/driver/nvidia/version").exists():
                self.notes.append(
                    "An NVIDIA driver is loaded but neither nvidia-ml-py nor nvidia-smi is here to list its GPUs: "
                    "pip install 'localinfer[gpu]'."
                )
            return []
        result = smi.result()
        devices = nvidia.parse_nvidia_smi(result.stdout)
        if result.error and not devices:
            self.notes.append(f"nvidia-smi could not list NVIDIA GPUs: {result.error}")
        return devices

    def _directml(self, onnx: ProbeAnswer, *, skip: tuple[str, ...]) -> list[GPUInfo]:
        data = onnx[0] or {}
        if "DmlExecutionProvider" not in data.get("providers", ()):
            return []
        if not data.get("devices"):
            self.notes.append("DirectML is available but ONNX Runtime (before 1.22) cannot list its adapters.")
        adapters = gpus.directml_gpus(data.get("devices", ()), skip_vendors=skip)
        self.notes.extend(f"DirectML adapter {g.name}: its memory is unknown." for g in adapters if not g.memory_total)
        return adapters

    def _sysctl(self, result: Future[CommandResult] | None) -> dict[str, str] | None:
        if result is None:
            return None
        answer = _result(result, CommandResult("", "sysctl did not run"))
        values = cpu.parse_sysctl(answer.stdout)
        if not values:
            self.notes.append(f"sysctl gave no answer ({answer.error}): the CPU's model and features are unknown.")
            return None
        return values

    def _answer(self, probe: Future[ProbeAnswer] | None, name: str) -> ProbeAnswer:
        if probe is None:
            return None, f"the {name} probe did not run"
        data, error = _result(probe, (None, f"the {name} probe did not run"))
        if error:
            self.notes.append(error[0].upper() + error[1:] + ".")
        return data, error

    def _attempt(self, what: str, step: Callable[[], T], fallback: T) -> T:
        """``step()``, or ``fallback`` with a note when it raises: one failed probe never sinks the profile."""
        try:
            return step()
        except Exception as exc:
            log.debug("detecting %s failed", what, exc_info=True)
            self.notes.append(f"Detecting {what} failed: {type(exc).__name__}: {exc}")
            return fallback


def _result(future: Future[T], fallback: T) -> T:
    """The future's result; ``fallback`` if it raised (the probes catch their errors: this is a last resort)."""
    try:
        return future.result()
    except Exception:
        log.debug("a hardware probe raised", exc_info=True)
        return fallback


def _sysctl_path() -> str:
    return shutil.which("sysctl", path="/usr/sbin:/sbin:/usr/bin") or "sysctl"


def _unknown_cpu() -> CPUInfo:
    count = os.cpu_count() or 1
    return CPUInfo("unknown CPU", cpu.normalize_arch(platform.machine()), count, count)
