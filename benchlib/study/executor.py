"""Where a study's runs execute: the ``executor:`` section of a study file and the sweep's
``--executor`` flags, as one typed, validated value.

    executor:                 # optional; used by `dtype-bench sweep X.yaml --executor slurm`
      partition: gpu
      account: my-lab
      time_min: 120           # the limit of one run's task; Slurm stops it after this
      gpus_per_task: auto     # auto: a run's dist.nproc GPUs for device cuda/auto, none for cpu
      cpus_per_task: 8
      mem_gb: 64
      array_parallelism: 16   # at most this many tasks of the array run at once
      setup: ["source .venv/bin/activate"]   # shell lines run before each task
      sbatch: {constraint: h100}             # any other sbatch option, by its long name

Only ``dtype-bench sweep`` reads it, to schedule the runs (the training notebooks ignore it).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from benchlib.core.dtypes import closest
from benchlib.core.runconfig import ConfigError

KINDS = ("inprocess", "local", "slurm")
"""inprocess: the sweep runs each notebook itself (the default); local: submitit's local
executor on this machine; slurm: a Slurm job array through submitit."""


@dataclass(frozen=True)
class ExecutorSettings:
    """The resources of one run's task and how many run at once."""
    kind: str = "inprocess"
    """inprocess | local | slurm (see ``KINDS``)."""
    partition: str | None = None
    """Slurm partition (sbatch --partition); None: the cluster's default."""
    account: str | None = None
    """Slurm account to charge (sbatch --account)."""
    qos: str | None = None
    """Slurm quality of service (sbatch --qos)."""
    time_min: int = 60
    """Time limit of one task in minutes; a run that exceeds it gets a record saying so."""
    gpus_per_task: int | str = "auto"
    """GPUs per task; ``auto``: the run's ``dist.nproc`` on device cuda/auto, 0 on cpu."""
    cpus_per_task: int | None = None
    """CPU cores per task (data loading, the kernel, torchrun's processes)."""
    mem_gb: float | None = None
    """Host memory per task in GiB; None: the partition's default."""
    array_parallelism: int = 32
    """At most this many tasks of one array run at the same time."""
    setup: list = field(default_factory=list)
    """Shell lines run before each task (``module load ...``, ``source .venv/bin/activate``)."""
    sbatch: dict = field(default_factory=dict)
    """Further sbatch options by long name (``constraint``, ``exclude``, ``reservation``)."""

    @classmethod
    def keys(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def from_dict(cls, d: Any, where: str = "") -> "ExecutorSettings":
        """Validate a mapping (the study file's section, then the flags over it)."""
        where = f"{where}executor: "
        if d is None:
            return cls()
        if not isinstance(d, dict):
            raise ConfigError(f"{where}a mapping of settings is expected, got {type(d).__name__}")
        valid = cls.keys()
        for k in d:
            if k not in valid:
                raise ConfigError(f"{where}unknown key {k!r}.{closest(str(k), valid)} Valid: {', '.join(valid)}")
        s = cls(**d)
        s.check(where)
        return s

    def check(self, where: str = "executor: ") -> None:
        if self.kind not in KINDS:
            raise ConfigError(f"{where}kind {self.kind!r} is not one of {', '.join(KINDS)}")
        for k in ("partition", "account", "qos"):
            v = getattr(self, k)
            if v is not None and (not isinstance(v, str) or not v.strip()):
                raise ConfigError(f"{where}{k} must be a name, got {v!r}")
        for k in ("time_min", "array_parallelism", "cpus_per_task"):
            v = getattr(self, k)
            if (v is not None or k != "cpus_per_task") and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ConfigError(f"{where}{k} must be a whole number >= 1, got {v!r}")
        if self.mem_gb is not None and (isinstance(self.mem_gb, bool) or not isinstance(self.mem_gb, (int, float))
                                        or self.mem_gb <= 0):
            raise ConfigError(f"{where}mem_gb must be a positive number, got {self.mem_gb!r}")
        if self.gpus_per_task != "auto" and (isinstance(self.gpus_per_task, bool)
                                             or not isinstance(self.gpus_per_task, int) or self.gpus_per_task < 0):
            raise ConfigError(f"{where}gpus_per_task must be auto or a whole number >= 0, got {self.gpus_per_task!r}")
        if not isinstance(self.setup, list) or not all(isinstance(x, str) for x in self.setup):
            raise ConfigError(f"{where}setup must be a list of shell lines, got {self.setup!r}")
        if not isinstance(self.sbatch, dict):
            raise ConfigError(f"{where}sbatch must be a mapping of sbatch options, got {self.sbatch!r}")

    def replace(self, **changes) -> "ExecutorSettings":
        """These settings with ``changes`` (flags given on the command line) laid over, checked."""
        s = dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})
        s.check()
        return s

    def gpus_for(self, nproc: int, device: str) -> int:
        """GPUs one task of a run needs."""
        if self.gpus_per_task != "auto":
            return int(self.gpus_per_task)
        return 0 if device == "cpu" else nproc

