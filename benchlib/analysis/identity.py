"""Which configuration a record ran, named by its numeric definition (``identify``), and on which host.

A run is named by its recorded name where the registry's entry of that name has its definition;
else by the registry's name for the definition (an old ``fp16_naive`` with fp16 moments is
``fp16_fp16_states``; ``config_recorded`` keeps the name); else ``<name>@<6 hex>`` where the
registry name's meaning has changed (a *legacy* definition, never a pick); an unknown name is kept,
and two runs sharing it but not a definition are refused (``ConfigIdentityError``). A record
without numeric fields takes its name's registry definition. ``cost_hash`` marks configurations
identical for speed and memory only (``core.dtypes.cost_definition``), counted once by flips and picks.
"""
from __future__ import annotations

import dataclasses

from benchlib.core.dtypes import ALIASES, REGISTRY, DtypeConfig, cost_definition, definition_of, hash_definition

HOST_KEYS = ("host_id", "boot_id", "gpu_uuid")  # not hostname: many GPU hosts share one (``vm``)
LEGACY = "legacy"  # the role of a definition the registry no longer has
_NUMERIC = {f.name for f in dataclasses.fields(DtypeConfig)} - {"name", "description", "role"}
_BY_HASH = {c.definition_hash: c.name for c in REGISTRY.values()}


class ConfigIdentityError(ValueError):
    """Runs that share a configuration name but not its numeric definition."""


def definition_hash(dtype: dict) -> str | None:
    """The record's definition hash (recorded, else computed from its fields); None where its
    ``dtype`` entry has no numeric field and its name is not in the registry."""
    full = dtype if dtype.get("definition_hash") else _full(dtype)
    if full.get("definition_hash"):
        return str(full["definition_hash"])
    return hash_definition(definition_of(full)) if _NUMERIC & set(full) else None


def _full(dtype: dict) -> dict:
    """The record's dtype entry, or its registry entry where it names no numeric field."""
    if _NUMERIC & set(dtype):
        return dtype
    name = ALIASES.get(dtype.get("name", ""), dtype.get("name", ""))
    return REGISTRY[name].to_dict() if name in REGISTRY else dtype


def fp8_converted(rec: dict) -> bool | None:
    """Whether the run converted any Linear layer to float8 (``model.matmuls``); None: not said."""
    mm = (rec.get("model") or {}).get("matmuls")
    return any(bool(m.get("fp8")) for m in mm) if isinstance(mm, list) and mm else None


def identify(rec: dict) -> dict:
    """``config`` (the analysis' name, see the module docstring), ``config_recorded``,
    ``definition_hash``, ``cost_hash`` and ``role`` of one record."""
    recorded = ALIASES.get(rec["config"], rec["config"])
    dtype = {**(rec.get("dtype") or {}), "name": recorded}
    h = definition_hash(dtype)
    full = _full(dtype)
    fp8 = fp8_converted(rec) if full.get("fp8", "none") != "none" else None
    cost = hash_definition(cost_definition(full, fp8)) if _NUMERIC & set(full) else h
    if recorded in REGISTRY and (h is None or REGISTRY[recorded].definition_hash == h):
        name = recorded
    elif h in _BY_HASH:
        name = _BY_HASH[h]
    elif recorded in REGISTRY:
        name = f"{recorded}@{h[:6]}"
    else:
        name = recorded
    if name in REGISTRY:
        role = REGISTRY[name].role
    else:
        role = LEGACY if "@" in name else str((rec.get("dtype") or {}).get("role") or "candidate")
    return {"config": name, "config_recorded": rec["config"], "definition_hash": h, "cost_hash": cost, "role": role}


def identities(records: list[dict]) -> list[dict]:
    """``identify`` for every record; ``ConfigIdentityError`` where runs share a name, not a definition."""
    ids = [identify(r) for r in records]
    seen: dict[str, dict] = {}
    for r, i in zip(records, ids):
        seen.setdefault(i["config"], {}).setdefault(i["definition_hash"], []).append(r["run_id"])
    for name, defs in seen.items():
        if len(defs) > 1:
            runs = "; ".join(f"{', '.join(sorted(ids_)[:3])}{' ...' if len(ids_) > 3 else ''} (definition {h})"
                             for h, ids_ in sorted(defs.items(), key=lambda x: str(x[0])))
            raise ConfigIdentityError(f"runs share the config name {name!r} but not its definition, refusing to "
                                      f"merge them: {runs}; give the configurations different names or analyse "
                                      f"them apart")
    return ids


def host_of(env: dict) -> str | None:
    """The host identity of a run's ``env`` (``HOST_KEYS`` present, joined); None = unknown."""
    parts = [f"{k}={env[k]}" for k in HOST_KEYS if env.get(k)]
    return ";".join(parts) or None
