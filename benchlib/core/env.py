"""Where a run happens: device choice, what the hardware and installed packages support,
and the environment every record carries (device, versions, commit, date, and which machine
and GPU: ``host_identity``)."""
from __future__ import annotations

import datetime as _dt
import functools
import hashlib
import importlib
import importlib.metadata
import os
import platform
import socket
import subprocess
import sys
import time
from pathlib import Path

import torch

from benchlib.core.dtypes import DtypeConfig, capability_problem


def pick_device(choice: str = "auto") -> torch.device:
    """The run's device; under torchrun each process takes its local rank's GPU."""
    if choice == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device='cuda' but no CUDA GPU is visible")
    if choice in ("auto", "cuda") and torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    return torch.device("cpu" if choice == "auto" else choice)


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"


@functools.lru_cache(maxsize=None)
def _importable(mod: str) -> str | None:
    """None if ``mod`` imports, else the reason it does not."""
    try:
        importlib.import_module(mod)
        return None
    except Exception as e:  # ImportError, or a library that fails to load its binary
        return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}".strip()


def capability(device: torch.device) -> tuple[int, int] | None:
    """The CUDA compute capability of ``device``; None for the CPU."""
    return tuple(torch.cuda.get_device_capability(device)) if device.type == "cuda" else None


def unsupported_reason(dtype: DtypeConfig, device: torch.device) -> str | None:
    """Why this config cannot run here (a ``skipped`` record), or None: the hardware its
    requirements need (``dtypes.REQUIREMENTS``), then the packages they import."""
    why = capability_problem(dtype, capability(device), device_name(device))
    if why:
        return why
    for req, mod, pkg in (("bitsandbytes", "bitsandbytes.optim", "bitsandbytes"), ("fp8", "torchao.float8", "torchao")):
        why = _importable(mod) if req in dtype.requirements() else None
        if why:
            return f"{dtype.name} needs {mod} (pip install {pkg}): {why}"
    return None


def _version(pkg: str) -> str | None:
    try:
        return importlib.metadata.version(pkg)
    except importlib.metadata.PackageNotFoundError:
        return None


REPO_ROOT = Path(__file__).resolve().parents[2]
CODE_PATHS = ("benchlib", "dtype_bench", "notebooks", "params")
"""What produces a result; ``git_commit(code_only=True)`` ignores commits of results alone."""


@functools.lru_cache(maxsize=None)
def git_commit(code_only: bool = False) -> str | None:
    """The checkout's commit (+"-dirty"); DTYPE_BENCH_COMMIT names it where the tree was
    copied without its .git (e.g. onto a remote GPU host). ``code_only``: the last commit
    that changed the code (``CODE_PATHS``), dirty only if the code is: committing results
    (an executed study) does not change it, so re-analysing those results writes the same."""
    if os.environ.get("DTYPE_BENCH_COMMIT"):
        return os.environ["DTYPE_BENCH_COMMIT"]
    root = REPO_ROOT
    paths = ["--", *CODE_PATHS] if code_only else []
    try:
        out = subprocess.run(["git", "log", "-1", "--format=%h", "--abbrev=12", *paths] if code_only else
                             ["git", "rev-parse", "--short=12", "HEAD"], cwd=root, capture_output=True,
                             text=True, timeout=5)
        if out.returncode != 0:
            return None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", *paths], cwd=root,
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return out.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


STATIC_CHARTS_ENV = "DTYPE_BENCH_STATIC_CHARTS"
"""Set to 1 by ``dtype-bench sweep`` for the notebooks it executes: their charts are then the static
image only (each spec copies its data); a notebook run by hand keeps the interactive chart."""

COMPILE_CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"
"""The variable torch.compile reads for its cache folder (``dtype-bench sweep --compile_cache``)."""


def python_bytecode() -> str:
    """Where this process keeps the bytecode of what it imports: "not written" under
    PYTHONDONTWRITEBYTECODE (a module without a .pyc beside it is compiled from source in every
    process: 8-12 s of a run on the H100 hosts of 2026-11-27, docs/performance.md), the folder of
    PYTHONPYCACHEPREFIX, else "beside the sources"."""
    if sys.flags.dont_write_bytecode:
        return "not written"
    return sys.pycache_prefix or "beside the sources"


def environment(device: torch.device) -> dict:
    env = {
        "device": device.type,
        "device_name": device_name(device),
        "device_count": torch.cuda.device_count() if device.type == "cuda" else 0,
        "cuda": torch.version.cuda,
        "torch": torch.__version__,
        **{pkg: _version(pkg) for pkg in ("transformers", "bitsandbytes", "torchao")},
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "hostname": socket.gethostname(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "git_commit": git_commit(),
        # torch.compile's cache folder when set (None: its default, /tmp/torchinductor_<user>);
        # whether the run's graphs came from it: metrics compile/* (training.compile_cache)
        "compile_cache_dir": os.environ.get(COMPILE_CACHE_ENV),
        "python_bytecode": python_bytecode(),  # what imports cost: time/startup_s, time/data_s, time/model_s
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        **host_identity(device),
    }
    if device.type == "cuda":
        env["capability"] = ".".join(map(str, torch.cuda.get_device_capability(device)))
        env["driver"] = _nvml_driver()
        # the GPU whose energy counter the run reads: its own, by UUID (None: no energy measured)
        env["energy_gpu_uuid"] = env["gpu_uuid"] if nvml_handle(device)[1] is not None else None
    return env


BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def host_identity(device: torch.device) -> dict:
    """Which machine and GPU ran (hostnames repeat; the same runs on two H100s differed by up to
    26%, docs/performance.md):

    * ``gpu_uuid``: the physical GPU (torch's device properties), None on the CPU;
    * ``boot_id``: the running Linux kernel's random id, new at every boot: two records with one
      boot id ran on one machine (a reboot or a fresh VM gives a new one); None off Linux;
    * ``host_id``: a short hash of both: equal host ids mean one machine, one boot, one GPU.
      None where neither is known (a CPU run off Linux): such records cannot be told apart.
    """
    uuid = None
    if device.type == "cuda":
        uuid = getattr(torch.cuda.get_device_properties(device), "uuid", None)
        uuid = str(uuid) if uuid else None
    try:
        boot = BOOT_ID.read_text().strip() or None
    except OSError:
        boot = None
    host = hashlib.sha256(f"{boot}|{uuid}".encode()).hexdigest()[:16] if (boot or uuid) else None
    return {"gpu_uuid": uuid, "boot_id": boot, "host_id": host}


def cpu_model() -> str | None:
    """The host CPU's model name: launch-bound steps (small batches, eager FSDP hooks) run at
    the host's single-thread speed, so a step time is only comparable with the CPU named."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _nvml_driver() -> str | None:
    try:
        import pynvml
        pynvml.nvmlInit()
        return pynvml.nvmlSystemGetDriverVersion()
    except Exception:
        return None


def nvml_handle(device: torch.device):
    """(pynvml, handle) of the NVML device that is this CUDA device, matched by UUID; (None, None)
    where NVML, the UUID or a match is missing. NVML numbers every GPU of the host whatever
    CUDA_VISIBLE_DEVICES says, so a handle taken by torch's index reads the host's first GPU for a
    run that sees only its second (records before this fix: ``energy_trusted``)."""
    uuid = getattr(torch.cuda.get_device_properties(device), "uuid", None) if device.type == "cuda" else None
    if not uuid:
        return None, None
    try:
        import pynvml
        pynvml.nvmlInit()
        want = f"GPU-{uuid}"
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            got = pynvml.nvmlDeviceGetUUID(h)
            if (got.decode() if isinstance(got, bytes) else got) == want:
                return pynvml, h
    except Exception:  # NVML missing or unreadable (a container without the library)
        pass
    return None, None


class EnergyMeter:
    """GPU energy from NVML's total-energy counter (mJ since driver load) of the run's own GPU
    (``nvml_handle``: by UUID); inactive where NVML, the counter or the GPU's match is unavailable
    (CPU, older GPUs): no energy rather than another GPU's."""

    def __init__(self, device: torch.device):
        self._nvml, self.handle = nvml_handle(device)
        if self.handle is None:
            return
        try:
            self._nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle)
        except Exception:
            self.handle = None

    def read_j(self) -> float | None:
        if self.handle is None:
            return None
        return self._nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle) / 1000.0


def process_age_s() -> float | None:
    """Seconds since this process started (interpreter or notebook-kernel start, imports)."""
    try:
        import psutil
        return max(0.0, time.time() - psutil.Process().create_time())
    except Exception:  # psutil missing or the process table unreadable: not worth failing a run
        return None


def peak_rss_gib() -> float:
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux
